"""Run a benchmark script with the one-row GEMV tiles that a sweep measured fastest (instead of `_config`'s picks):
how a retuned tile table would do end to end, before `bench_gemv.py --write-table` stores it in layers/gemv_tiles.json.

    python scripts/bench_gemv.py --rows 1 --sweep --out sweep.jsonl
    python scripts/with_gemv_sweep.py sweep.jsonl benchmarks/engine_bench.py --no-talker --batches 1
"""

import json
import runpy
import sys

from aura_omni.layers import triton_gemv


def fastest(path: str) -> dict[tuple[int, int], tuple]:
    """(N, K) -> the fastest one-row config of every swept op."""
    best = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row["m"] == 1:
                best[row["n"], row["k"]] = tuple(min(row["results"])[1])
    return best


def main():
    best = fastest(sys.argv[1])
    picked = triton_gemv._config
    triton_gemv._config = lambda m, n, k, itemsize, device: (best[n, k] if m == 1 and (n, k) in best
                                                             else picked(m, n, k, itemsize, device))
    print("one-row GEMV tiles from the sweep:", {f"{n}x{k}": cfg[2:] for (n, k), cfg in best.items()}, flush=True)
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
