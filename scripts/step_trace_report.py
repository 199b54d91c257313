"""Where a stage's time to its first output went, from the step trace (`AURA_OMNI_STEP_TRACE=DIR`,
aura_omni/step_trace.py): per stage its steps; with stages in processes of their own, each call's crossing from the
server to the stage's process (from the first turn on: the server's warm-up left out); per request of STAGE the gaps submit -> taken -> (the Talker's planned -> admitted) ->
first output; and for the slowest few, every loop's lines in between.

    python scripts/step_trace_report.py DIR [--stage talker] [--worst 3]
"""

import argparse
import collections
import glob
import os

import numpy as np


def read(folder: str) -> list[tuple[float, str, list[str]]]:
    lines = []
    for path in glob.glob(os.path.join(folder, "*.trace")):
        thread = os.path.basename(path).rsplit("-", 1)[0]
        for line in open(path, encoding="utf-8", errors="replace"):
            parts = line.split()
            if len(parts) >= 2:
                try:
                    lines.append((float(parts[0]), thread, parts[1:]))
                except ValueError:
                    pass
    return sorted(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--stage", default="talker", help="stage name prefix (talker matches talker:custom_voice)")
    ap.add_argument("--worst", type=int, default=3)
    args = ap.parse_args()
    lines = read(args.folder)
    if not lines:
        raise SystemExit(f"no trace lines in {args.folder}")
    first_turn = next((t for t, _, f in lines if f[0] == "turn_start"), None)
    if first_turn is not None:  # the server's own warm-up (a grammar's compile: a 2.3 s step) is not the load's
        lines = [line for line in lines if line[0] >= first_turn]
    steps = collections.defaultdict(list)
    for t, _, f in lines:
        if f[0] == "step":
            steps[f[1]].append(float(f[2]))
    for stage, took in sorted(steps.items()):
        print(f"{stage}: {len(took)} steps, mean {1000 * np.mean(took):.2f} ms, p95 {1000 * np.percentile(took, 95):.2f}, "
              f"max {1000 * max(took):.1f}")
    # (stage, "prompt" or "decode") -> (step seconds, from its start until the engine's launch returned, its wait for
    # the device's results): a launch that takes long while the wait stays short hides a synchronisation
    kinds = collections.defaultdict(list)
    scheduled = {}  # stage -> (tokens, sequences, when the launch returned) of its engine's step in progress
    for t, _, f in lines:
        if f[0] == "engine_step":
            scheduled[f[1]] = (int(f[2]), int(f[3]), t)
        elif f[0] == "step" and f[1] in scheduled:
            tokens, seqs, launched = scheduled.pop(f[1])
            took = float(f[2])
            waited = float(f[6]) if len(f) > 6 else float("nan")  # traces before the wait was recorded have none
            kinds[f[1], "decode" if tokens == seqs else "prompt"].append((took, launched - (t - took), waited))
    for (stage, kind), rows in sorted(kinds.items()):  # a step that prefills anything holds every decoding row
        took, launch, waited = np.array(rows).T
        print(f"{stage} steps with {'prompts' if kind == 'prompt' else 'decodes only'}: {len(took)}, mean "
              f"{1000 * np.mean(took):.1f} ms, p95 {1000 * np.percentile(took, 95):.1f}, launched after "
              f"{1000 * np.mean(launch):.1f}, of them waiting for the device: mean {1000 * np.mean(waited):.1f} ms")
    delivered = [float(f[2]) for _, _, f in lines if f[0] == "delivered"]  # a step's outputs handed to the event loop
    if delivered:
        print(f"event loop: {len(delivered)} deliveries of step outputs, waited mean {1000 * np.mean(delivered):.2f} ms, "
              f"p95 {1000 * np.percentile(delivered, 95):.2f}, max {1000 * max(delivered):.1f}")
    # calls to stages in processes of their own (`process_stages`): sent by the server, arrived in the stage's process
    sent, crossed = {}, collections.defaultdict(list)
    for t, _, f in lines:
        if f[0] == "sent":
            sent[f[1], f[2]] = t
        elif f[0] == "arrived" and (f[1], f[2]) in sent:
            crossed[f[1]].append(1000 * (t - sent.pop((f[1], f[2]))))
    for method, ms in sorted(crossed.items()):
        print(f"crossing to {method}: mean {np.mean(ms):.1f} ms, p95 {np.percentile(ms, 95):.1f}, max {max(ms):.1f} "
              f"(n={len(ms)})")
    req = collections.defaultdict(dict)  # request id -> moment -> time
    for t, _, f in lines:
        kind = f[0]
        if kind in ("submit", "add", "first_output") and f[1].startswith(args.stage):
            req[f[2]].setdefault(kind, t)
        elif kind in ("parked", "planned"):
            req[f[1]].setdefault(kind, t)
    req = {rid: m for rid, m in req.items() if "submit" in m}  # this stage's (parked, planned: the Talker's)
    admitted = [t for t, _, f in lines if f[0] == "admitted"]
    for rid, m in req.items():
        if "planned" in m:
            m["admitted"] = next((a for a in admitted if a >= m["planned"]), m["planned"])
    order = ("submit", "add", "planned", "admitted", "first_output")
    gaps = collections.defaultdict(list)
    total = []
    for rid, m in req.items():
        seen = [k for k in order if k in m]
        for a, b in zip(seen, seen[1:]):
            gaps[f"{a} -> {b}"].append(1000 * (m[b] - m[a]))
        if "submit" in m and "first_output" in m:
            total.append((m["first_output"] - m["submit"], rid))
    for gap, ms in gaps.items():
        print(f"{args.stage} {gap}: mean {np.mean(ms):.1f} ms, p50 {np.percentile(ms, 50):.1f}, max {max(ms):.1f} "
              f"(n={len(ms)})")
    for took, rid in sorted(total)[max(0, len(total) - args.worst):]:
        m = req[rid]
        print(f"\n== {rid}: first output {1000 * took:.0f} ms after submit; every loop meanwhile "
              f"(ms from submit; other stages' steps, adds and submits, feeds and first outputs in a row are counted on one line):")
        t0, last = m["submit"], None
        folded = collections.Counter()
        for t, thread, f in lines:
            if t < t0 or t > m["first_output"]:
                continue
            if f[0] in ("feed", "first_output", "delivered") or (f[0] in ("step", "submit", "add")
                                                     and not f[1].startswith(args.stage)):
                folded[f"{f[1]} {f[0]}"] += 1  # in a row: counted on one line
                continue
            if folded:
                print("   ", ", ".join(f"{n} {s}" for s, n in folded.items()))
                folded.clear()
            print(f"  {1000 * (t - t0):8.1f} {thread:16s} {' '.join(f)[:150]}")
        if folded:
            print("   ", ", ".join(f"{n} {s}" for s, n in folded.items()))


if __name__ == "__main__":
    main()
