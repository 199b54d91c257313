"""What the server's event loop pays per Talker step to hand codec frames to the streams that wait for them.

A Talker step's outputs reach the event loop in one batch (stages/loop.py `_Outbox`); each stream's task then wakes
and passes its frame through the same chain of async generators as `/v1/audio/speech` (`StageLoop.submit` ->
`Qwen3TTS.frames` -> `Qwen3TTS.astream`, which stacks a window every `--window` frames). The chain is modelled with
plain asyncio queues, so this measures the hand-off alone, without a model:

    python benchmarks/frame_handoff_bench.py [--streams 64] [--steps 400] [--window 25]
"""

import argparse
import asyncio
import time

import torch


async def handoff_ms(streams: int, steps: int, window: int) -> float:
    queues = [asyncio.Queue() for _ in range(streams)]

    async def submit(q):  # StageLoop.submit: one output per step
        while True:
            yield await q.get()

    async def frames(q):  # Qwen3TTS.frames: the output's frames
        async for out in submit(q):
            for frame in out:
                yield frame

    async def astream(q):  # Qwen3TTS.astream: frames gathered into Code2Wav windows
        pending = []
        async for frame in frames(q):
            pending.append(frame)
            if len(pending) >= window:
                yield torch.stack(pending)
                pending = []

    windows = [0]

    async def consume(q):
        async for _ in astream(q):
            windows[0] += 1

    tasks = [asyncio.create_task(consume(q)) for q in queues]
    await asyncio.sleep(0)
    frame = torch.zeros(16, dtype=torch.long)
    start = time.perf_counter()
    for _ in range(steps):
        for q in queues:  # _put_all: one step's outputs, one per stream
            q.put_nowait([frame])
        await asyncio.sleep(0)  # every woken stream runs
        await asyncio.sleep(0)
    took = time.perf_counter() - start
    for t in tasks:
        t.cancel()
    assert windows[0] == streams * (steps // window), "a stream fell behind: the measurement is off"
    return took / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--window", type=int, default=25)
    args = ap.parse_args()
    ms = asyncio.run(handoff_ms(args.streams, args.steps, args.window))
    print(f"{args.streams} streams: {ms:.3f} ms of event-loop time per Talker step "
          f"({ms * 1e3 / args.streams:.1f} us per stream-frame)")


if __name__ == "__main__":
    main()
