"""Does one thread's blocking copy to pageable host memory hold up another thread's CUDA launches? (session 14)

Under load on the H200 the Talker's loop thread spent ~27% of its time inside `Event.record` without the interpreter
lock, and a prompt's add took 1.5-2.4 ms of which it held the lock ~0.3 ms. Meanwhile the Code2Wav thread waits for
its ~15 ms steps in `wavs.cpu()`: a copy to pageable memory, which the driver runs synchronously. This probe times
a Talker-like thread (small launches and an event record on its own stream, then a wait) while a Code2Wav-like
thread on another stream queues ~10 ms of GPU work and copies its result to the host, either pageable (`.cpu()`)
or into pinned memory waited on with an event. If the pageable copy holds launches up, the Talker-like thread's
launch time grows with it and not with the pinned copy.

    python3 scripts/driver_lock_probe.py [--seconds 5]
"""

import argparse
import statistics
import threading
import time

import torch


def talker_like(stop: threading.Event, stream: torch.cuda.Stream, times: list[float]) -> None:
    x = torch.zeros(64, 1024, device="cuda")
    with torch.cuda.stream(stream):
        while not stop.is_set():
            start = time.perf_counter()
            for _ in range(20):  # a step's small launches
                x.add_(1.0)
            done = torch.cuda.Event()
            done.record()
            times.append(time.perf_counter() - start)  # the host's launch time only
            done.synchronize()
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


def run(mode: str, seconds: float) -> None:
    stop, times, steps = threading.Event(), [], [0]
    hi = torch.cuda.Stream(priority=-1)
    lo = torch.cuda.Stream()
    threads = [threading.Thread(target=talker_like, args=(stop, hi, times))]
    if mode != "alone":
        threads.append(threading.Thread(target=code2wav_like, args=(stop, lo, mode, steps)))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    times_ms = sorted(1e3 * t for t in times[10:])
    p95 = times_ms[int(0.95 * len(times_ms))]
    print(f"{mode:9s} talker-like launches+record: mean {statistics.mean(times_ms):.3f} ms, p50 "
          f"{statistics.median(times_ms):.3f}, p95 {p95:.3f}, max {times_ms[-1]:.3f} ({len(times_ms)} iterations); "
          f"code2wav-like steps {steps[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    torch.ones(1, device="cuda").sum().item()  # the context first
    for mode in ("alone", "pageable", "pinned", "pageable", "pinned"):
        run(mode, args.seconds)


if __name__ == "__main__":
    main()
