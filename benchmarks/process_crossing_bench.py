"""What a call to a stage in its own process (`process_stages`) costs to cross, with and without other threads
holding the server's interpreter lock: 32 calls at once, each carrying a 3 s clip (192 KB of float32 at 16 kHz) the
way a burst of 32 commits does, answered by the stage's process at once (a bad call: its error comes back), timed from
the call to its answer; beside it, the same calls to a stage loop's thread in this process (the ceiling).

    python benchmarks/process_crossing_bench.py --deploy /work/tiny/deploy.yaml --busy-threads 0 4

The busy threads run Python without pause, as the event loop and the AURA, Talker and Code2Wav loops do at 32-64
sessions (docs/benchmarks.md, session 30).
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import sys
import threading
import time

import numpy as np

from aura_omni.deploy import ASR, load_deploy_config
from aura_omni.pipeline.runtime import load_stage, stage_device, warm_models
from aura_omni.placement.process_stages import ProcessActor, StageInProcess


def busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(2000))


class ThreadStage:
    """The in-process baseline: a stage loop's thread that takes each call from a queue and answers through the
    event loop's call_soon_threadsafe, as stages/loop.py hands results over."""

    def __init__(self):
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            loop, future, clip = self.inbox.get()
            loop.call_soon_threadsafe(future.set_result, len(clip))

    async def call(self, method: str, clip: np.ndarray) -> int:
        future = asyncio.get_running_loop().create_future()
        self.inbox.put((asyncio.get_running_loop(), future, clip))
        return await future


async def burst(actor, calls: int, clip: np.ndarray) -> list[float]:
    async def one() -> float:
        t = time.perf_counter()
        try:
            await actor.call("stats", clip)  # stats takes no clip: the process answers with the TypeError at once
        except TypeError:
            pass
        return time.perf_counter() - t

    return list(await asyncio.gather(*(one() for _ in range(calls))))


async def run(name: str, actor, calls: int, rounds: int, busy_threads: int) -> None:
    clip = np.zeros(48000, dtype=np.float32)
    stop = threading.Event()
    threads = [threading.Thread(target=busy, args=(stop,), daemon=True) for _ in range(busy_threads)]
    for t in threads:
        t.start()
    try:
        await burst(actor, calls, clip)  # warm
        took = [x for _ in range(rounds) for x in await burst(actor, calls, clip)]
    finally:
        stop.set()
    ms = 1000 * np.array(took)
    print(f"| {name} | {busy_threads} | {calls} | {np.percentile(ms, 50):.2f} / {np.percentile(ms, 95):.2f} / {ms.max():.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--deploy", required=True, help="a deploy file with an ASR stage (its process answers the calls)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--calls", type=int, default=32)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--busy-threads", type=int, nargs="+", default=[0, 4])
    p.add_argument("--switch-interval-ms", type=float, default=0.5, help="as the server's gil_switch_interval_ms")
    args = p.parse_args()
    sys.setswitchinterval(args.switch_interval_ms / 1000)
    deploy = load_deploy_config(args.deploy)
    stage = deploy.stage(ASR)
    actor = ProcessActor([ASR], (deploy, [(ASR, stage.stage_id, stage_device(stage, args.device))], load_stage,
                                 warm_models, None, None, None, 30))
    actor.spawn()
    actor.wait_ready()
    print("| stage | busy threads | calls at once | call to answer p50 / p95 / max ms |\n|---|---|---|---|")
    try:
        for n in args.busy_threads:
            asyncio.run(run("own process", StageInProcess(actor, ASR), args.calls, args.rounds, n))
            asyncio.run(run("in process (a thread)", ThreadStage(), args.calls, args.rounds, n))
    finally:
        actor.close()


if __name__ == "__main__":
    main()
