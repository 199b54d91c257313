"""Does one thread's blocking copy to pageable host memory hold up another thread's CUDA launches? (session 14)

Under load on the H200 the Talker's loop thread spent ~27% of its time inside `Event.record` without the interpreter
lock, and a prompt's add took 1.5-2.4 ms of which it held the lock ~0.3 ms. Meanwhile the Code2Wav thread waits for
its ~15 ms steps in `wavs.cpu()`: a copy to pageable memory, which the driver runs synchronously. This probe times
a Talker-like thread (small launches and an event record on its own stream, then a wait) while a Code2Wav-like
thread on another stream queues ~10 ms of GPU work and copies its result to the host, either pageable (`.cpu()`)
or into pinned memory waited on with an event. If the pageable copy holds launches up, the Talker-like thread's
launch time grows with it and not with the pinned copy. Each mode runs eagerly, then with a captured graph of many
small kernels replayed before the record (whether a large graph launch is what the next call waits behind).
`done` is each iteration's time until its work has run on the GPU: the high-priority stream's latency beside the
other stream's load. Run it again under CUDA_DEVICE_MAX_CONNECTIONS=32: with the default 8 hardware work queues, two
streams may share one, and the high-priority stream's kernels then wait behind the other's in that queue whatever
their priority.

    python3 scripts/driver_lock_probe.py [--seconds 4] [--graph-kernels 2000]
"""

import argparse
import statistics
import threading
import time

import torch


def captured(stream: torch.cuda.Stream, kernels: int) -> torch.cuda.CUDAGraph:
    """A graph of many small kernels, as the Talker's step replays (its backbone and frame decoder)."""
    x = torch.zeros(64, 1024, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(kernels):
            x.add_(1.0)
    return graph


def talker_like(stop: threading.Event, stream: torch.cuda.Stream, graph: torch.cuda.CUDAGraph | None,
                times: list[tuple[float, float, float]]) -> None:
    x = torch.zeros(64, 1024, device="cuda")
    with torch.cuda.stream(stream):
        while not stop.is_set():
            start = time.perf_counter()
            for _ in range(20):  # a step's small launches
                x.add_(1.0)
            if graph is not None:
                graph.replay()
            launched = time.perf_counter()
            done = torch.cuda.Event()
            done.record()
            recorded = time.perf_counter()
            done.synchronize()
            times.append((launched - start, recorded - launched, time.perf_counter() - start))
            time.sleep(0.002)


def code2wav_like(stop: threading.Event, stream: torch.cuda.Stream, mode: str, steps: list[int]) -> None:
    a = torch.randn(2048, 2048, device="cuda")
    out = torch.empty(8, 25 * 1920, device="cuda")  # 8 streams' 25-frame windows of samples
    with torch.cuda.stream(stream):
        while not stop.is_set():
            for _ in range(20):  # ~10 ms of GPU
                a = (a @ a).clamp_(-1, 1)
            out.copy_(a.reshape(-1)[:out.numel()].view_as(out))
            if mode == "pageable":
                out.cpu()
            else:
                host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
                host.copy_(out, non_blocking=True)
                done = torch.cuda.Event()
                done.record()
                done.synchronize()
            steps[0] += 1


def summary(name: str, values: list[float]) -> str:
    ms = sorted(1e3 * v for v in values)
    return (f"{name} mean {statistics.mean(ms):.3f} / p50 {statistics.median(ms):.3f} / p95 "
            f"{ms[int(0.95 * len(ms))]:.3f} / max {ms[-1]:.3f} ms")


def run(mode: str, seconds: float, graph: torch.cuda.CUDAGraph | None, hi: torch.cuda.Stream) -> None:
    stop, times, steps = threading.Event(), [], [0]
    threads = [threading.Thread(target=talker_like, args=(stop, hi, graph, times))]
    if mode != "alone":
        threads.append(threading.Thread(target=code2wav_like, args=(stop, torch.cuda.Stream(), mode, steps)))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    times = times[10:]
    print(f"{mode:9s} {'graph' if graph is not None else 'eager'}: talker-like "
          f"{summary('launches', [t[0] for t in times])}; {summary('record', [t[1] for t in times])}; "
          f"{summary('done', [t[2] for t in times])} ({len(times)} iterations); code2wav-like steps {steps[0]}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--graph-kernels", type=int, default=2000)
    args = parser.parse_args()
    torch.ones(1, device="cuda").sum().item()  # the context first
    hi = torch.cuda.Stream(priority=-1)
    graph = captured(hi, args.graph_kernels)
    for g in (None, graph):
        for mode in ("alone", "pageable", "pinned", "pageable", "pinned"):
            run(mode, args.seconds, g, hi)


if __name__ == "__main__":
    main()
