"""Host time per GEMM launch on CUDA, by BLAS library and by whether the shape repeats.

    python scripts/blas_overhead.py

Prefill steps run eagerly (no CUDA graph), so each projection's host cost is paid every step. Prints,
for M in a few prefill sizes and the 8B shapes, the host microseconds per F.linear call (no sync inside
the timed loop) and the device time per call, with torch's default BLAS choice and each library forced.
"""

import time

import torch
import torch.nn.functional as F

SHAPES = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]  # AURA-8B qkv, o, gate_up, down (N, K)


def host_us(ms: list[int], repeat_shape: bool) -> tuple[float, float]:
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for n, k in SHAPES]
    xs = {m: torch.randn(m, 4096 * 3, device="cuda", dtype=torch.bfloat16) for m in ms}
    calls = 0
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    start.record()
    for i in range(10):
        m = ms[0] if repeat_shape else ms[i % len(ms)]
        for w in weights:
            F.linear(xs[m][:, :w.shape[1]], w)
            calls += 1
    end.record()
    host = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) / calls * 1e3


def main() -> None:
    print("torch", torch.__version__, "cuda", torch.version.cuda, "default blas",
          torch.backends.cuda.preferred_blas_library())
    ms = [157, 301, 512, 749, 1000, 1301]
    for lib in ["default", "cublas", "cublaslt"]:
        if lib != "default":
            torch.backends.cuda.preferred_blas_library(lib)
        host_us(ms, False)  # warm-up: first-use costs of every shape
        for repeat in (True, False):
            host, dev = host_us(ms if not repeat else [ms[0]], repeat)
            print(f"{lib:9s} {'same M' if repeat else 'new M each call':16s} host {host:8.1f} us/call  device {dev:8.1f} us/call")
        fresh = [m + 7 for m in ms]  # shapes never seen before
        host, dev = host_us(fresh, False)
        print(f"{lib:9s} {'unseen M':16s} host {host:8.1f} us/call  device {dev:8.1f} us/call")


if __name__ == "__main__":
    main()
