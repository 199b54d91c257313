"""Does cuBLAS's heuristics cache grow the C heap with each new matmul shape, and does its capacity bound it?

    python scripts/cublas_cache_probe.py            # on a CUDA machine: the default capacity, then 256, then 0

Runs bf16 matmuls of `--shapes` distinct row counts (a prefill's packed token count, never the same twice) against
three weight shapes, in a child process per setting of `CUBLASLT_HEURISTICS_CACHE_CAPACITY`, and prints the C heap's
bytes in use (stages/heap_trim.py) before and after, and the step's time for new shapes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aura_omni.stages.heap_trim import heap_in_use_bytes  # noqa: E402


def heap_mb() -> float:
    return heap_in_use_bytes() / 2**20


def child(shapes: int) -> dict:
    import torch
    dev = torch.device("cuda")
    weights = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for k, n in ((4096, 4096), (4096, 12288),
                                                                              (12288, 4096))]
    x = torch.randn(shapes + 64, 12288, device=dev, dtype=torch.bfloat16)
    for w in weights:  # cuBLAS's handle and workspace, before the count starts
        (x[:8, :w.shape[0]] @ w).sum().item()
    torch.cuda.synchronize()
    before = heap_mb()
    t0 = time.perf_counter()
    for m in range(9, 9 + shapes):
        for w in weights:
            x[:m, :w.shape[0]] @ w
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    after = heap_mb()
    t0 = time.perf_counter()
    for m in range(9, 9 + shapes):  # the same shapes again: cached (or not, past the capacity)
        for w in weights:
            x[:m, :w.shape[0]] @ w
    torch.cuda.synchronize()
    again = time.perf_counter() - t0
    return {"capacity": os.environ.get("CUBLASLT_HEURISTICS_CACHE_CAPACITY", "default"), "shapes": shapes * 3,
            "heap_before_mb": round(before, 2), "heap_growth_mb": round(heap_mb() - before, 2),
            "growth_after_first_pass_mb": round(after - before, 2),
            "us_per_matmul_new": round(first / (shapes * 3) * 1e6, 1),
            "us_per_matmul_again": round(again / (shapes * 3) * 1e6, 1)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", type=int, default=3000)
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.shapes)))
        return
    for cap in (None, "256", "0"):
        env = dict(os.environ)
        if cap is not None:
            env["CUBLASLT_HEURISTICS_CACHE_CAPACITY"] = cap
        out = subprocess.run([sys.executable, __file__, "--child", "--shapes", str(a.shapes)], env=env,
                             capture_output=True, text=True)
        print(out.stdout.strip() or out.stderr[-2000:], flush=True)


if __name__ == "__main__":
    main()
