"""Where a server's host time goes, from py-spy's raw (collapsed) stacks: the share of samples per thread, and the
frames that took the most samples by themselves and with what they called (aura_omni frames only for the latter).

    py-spy record --nonblocking --gil --threads -f raw -o gil.txt -p PID -d 15
    python scripts/pyspy_top.py gil.txt [all.txt ...] [--top 25]

With `--gil` the samples are of the thread holding the interpreter lock, so the shares say which thread keeps the
others (the stage loops, the HTTP event loop) waiting; with `--idle`, where every thread stands.
"""

import argparse
import collections


def _stacks(path: str):
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if not line or " " not in line:
            continue
        stack, count = line.rsplit(" ", 1)
        if count.isdigit():
            yield stack.split(";"), int(count)


def _thread_of(frames: list[str]) -> tuple[str, list[str]]:
    """(the sample's thread, by name with `--threads`: stage-talker, stage-code2wav, MainThread (the HTTP event loop),
    asyncio_N (the event loop's worker pool); its Python frames)."""
    label, rest = "", frames
    while rest and rest[0].startswith(("process ", "thread (")):
        if rest[0].startswith("thread ("):
            label = rest[0].split(": ", 1)[1] if ": " in rest[0] else rest[0]
        rest = rest[1:]
    if label == "MainThread" and any("uvicorn" in f or "base_events.py" in f for f in rest):
        label = "MainThread (HTTP event loop)"
    return label or "unnamed", rest


def summarize(path: str, top: int) -> None:
    threads, leaf, inclusive = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0
    for frames, n in _stacks(path):
        thread, rest = _thread_of(frames)
        total += n
        threads[thread] += n
        if rest:
            leaf[rest[-1]] += n
        for frame in dict.fromkeys(f for f in rest if "aura_omni/" in f):
            inclusive[frame] += n
    print(f"== {path}: {total} samples")
    if not total:
        return
    print("-- by thread")
    for name, n in threads.most_common(top):
        print(f"{n / total:7.1%}  {name}")
    print("-- by frame, itself")
    for name, n in leaf.most_common(top):
        print(f"{n / total:7.1%}  {name}")
    print("-- by aura_omni frame, with what it called")
    for name, n in inclusive.most_common(top):
        print(f"{n / total:7.1%}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    for path in args.files:
        summarize(path, args.top)


if __name__ == "__main__":
    main()
