"""Triton GEMVs for a few token rows (M <= 16): the weights, read once, are the whole cost of a projection.

At decode batch 1-16 a projection reads N*K weights for M*N*K flops, so it should run at HBM bandwidth;
what it loses is launches around it and cuBLAS's small-M efficiency. Each kernel here streams the weight
rows once, coalesced along K (fp32 accumulation), with the layer's neighbouring elementwise work folded in:

- `rms_gemv`: rmsnorm(x) @ W.T (the residual add before the norm rides in the previous projection's `residual`);
- `silu_mul_gemv`: (silu(gate) * up) @ W.T on the fused gate/up output (roundings of triton_ops.silu_mul);
- `gemv`: x @ W.T; all but the norms take `residual`, added like `residual + F.linear(...)` (output rounded first).

The norm's scale is applied to the dot product, so x is read once: the GEMV input is x*w rounded to the
dtype instead of the reference's (x*r)*w rounded twice -- the same in fp32, within bf16 rounding otherwise.
fp16 normalises first (x*w unnormalised could leave its range).

One row runs on FMA units. Its tile (BLOCK_N rows by BLOCK_K along K, warps, pipeline depth) comes from
gemv_tiles.json: the fastest of ~130 tiles per projection shape, measured on that GPU model (`scripts/bench_gemv.py
--rows 1 --sweep --write-table`; the gain over one fixed tile is in docs/benchmarks.md). Shapes or GPUs the table lacks take `_one_row_tile`'s rule. N is split,
never K: split-K would need a second pass or atomics plus zeroing -- a launch more, or results that vary run to
run. 2..16 rows run on tensor cores (rows padded to 16, the padding never loaded), the weights through a cp.async
pipeline. Tiles depend on shapes only, so CUDA-graph capture never autotunes and a model computes the same on
every start.

attention_backend enables these where `self_check` matches the references on the device at start-up.
"""

import functools
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from aura_omni.layers import cuda_graph, pdl, triton_ops
from aura_omni.layers.device import on_device, on_first_tensor_device

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines and CI: the torch paths run instead
    triton = tl = None

AVAILABLE = triton is not None
TILES_FILE = Path(__file__).with_name("gemv_tiles.json")
MAX_M = 16  # token rows the kernels take (one tensor-core row tile); models/qwen3.py uses them for one row

if AVAILABLE:

    @triton.jit
    def _gemv_step(acc, ssq, a_ptr, nw_ptr, w, rows, rmask, ks, stride_a, K: tl.constexpr, NORM: tl.constexpr,
                   SILU: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr, dt: tl.constexpr):
        """One BLOCK_K slice: the activation slice (normed or SiLU*mul'ed) times the weight tile `w`."""
        kmask = ks < K
        amask = rmask[:, None] & kmask[None, :]
        a_at = rows[:, None] * stride_a + ks[None, :]
        a = tl.load(a_ptr + a_at, mask=amask, other=0.0).to(tl.float32)
        if NORM:
            ssq += tl.sum(a * a, 1)
            a = a * tl.load(nw_ptr + ks, mask=kmask, other=0.0).to(tl.float32)[None, :]
        if SILU:  # gate in columns [0, K), up in [K, 2K)
            u = tl.load(a_ptr + a_at + K, mask=amask, other=0.0).to(tl.float32)
            a = (a / (1.0 + tl.exp(-a))).to(dt).to(tl.float32) * u
        a = a.to(dt)  # the GEMV input in the activation dtype, as F.linear sees it
        if DOT:
            if IEEE:
                acc = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, tl.trans(w), acc)
        else:
            acc += w.to(tl.float32) * a.to(tl.float32)
        return acc, ssq

    @triton.jit
    def _gemv_kernel(a_ptr, nw_ptr, w_ptr, res_ptr, out_ptr, M, N, stride_a, stride_w, stride_res, stride_o, eps,
                     K: tl.constexpr, NORM: tl.constexpr, SILU: tl.constexpr, HAS_RES: tl.constexpr,
                     DOT: tl.constexpr, IEEE: tl.constexpr, M_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, STAGES: tl.constexpr, PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        pid_n = tl.program_id(0)
        rows = tl.program_id(1) * M_PAD + tl.arange(0, M_PAD)
        rmask = rows < M
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        cmask = cols < N
        dt = out_ptr.dtype.element_ty
        w_rows = w_ptr + cols.to(tl.int64)[:, None] * stride_w
        if DOT:
            acc = tl.zeros([M_PAD, BLOCK_N], tl.float32)
        else:  # one row: per-thread partial sums, reduced across K once at the end
            acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
        ssq = tl.zeros([M_PAD], tl.float32)
        # the first weight tile is loaded before waiting for the previous kernel (pdl.py): the weights are constant
        ks = tl.arange(0, BLOCK_K)
        w = tl.load(w_rows + ks[None, :], mask=cmask[:, None] & (ks < K)[None, :], other=0.0)
        if PDL:
            tl.extra.cuda.gdc_wait()
        acc, ssq = _gemv_step(acc, ssq, a_ptr, nw_ptr, w, rows, rmask, ks, stride_a, K, NORM, SILU, DOT, IEEE, dt)
        # K constexpr: a static trip count (the interpreter needs it); STAGES > 1 streams the tiles through cp.async
        for k0 in tl.range(BLOCK_K, K, BLOCK_K, num_stages=STAGES):
            ks = k0 + tl.arange(0, BLOCK_K)
            w = tl.load(w_rows + ks[None, :], mask=cmask[:, None] & (ks < K)[None, :], other=0.0)
            acc, ssq = _gemv_step(acc, ssq, a_ptr, nw_ptr, w, rows, rmask, ks, stride_a, K, NORM, SILU, DOT, IEEE,
                                  dt)
        if DOT:
            y = acc
        else:
            y = tl.sum(acc, 1)[None, :]
        if NORM:
            y = y * tl.rsqrt(ssq / K + eps)[:, None]
        omask = rmask[:, None] & cmask[None, :]
        if HAS_RES:
            r = tl.load(res_ptr + rows[:, None] * stride_res + cols[None, :], mask=omask, other=0.0).to(tl.float32)
            y = y.to(dt).to(tl.float32) + r
        tl.store(out_ptr + rows[:, None] * stride_o + cols[None, :], y.to(dt), mask=omask)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132


def _widest(n: int, block_ns: tuple[int, ...], programs: float) -> int:
    return next((bn for bn in block_ns if -(-n // bn) >= programs), block_ns[-1])


@functools.lru_cache(maxsize=None)
def _device_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


@functools.lru_cache(maxsize=None)
def tuned_tiles(device_name: str | None) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """(N, K) -> (BLOCK_N, BLOCK_K, num_warps, num_stages) measured fastest for one bf16/fp16 row on this GPU model
    (gemv_tiles.json, written by `scripts/bench_gemv.py --rows 1 --sweep --write-table`)."""
    table = json.loads(TILES_FILE.read_text()).get(device_name, {}).get("one_row", {})
    return {tuple(map(int, shape.split("x"))): tuple(tile) for shape, tile in table.items()}


def _one_row_tile(n: int, k: int, itemsize: int, sms: int) -> tuple[int, int, int, int]:
    """Shapes the table lacks: 32 KB weight tiles of whole rows up to 8 KB (the H200 sweep favours long runs along
    K; a power of two dividing K, so that no step is half masked), narrowed to at least 3 programs per SM."""
    block_k = min(k & -k, 8192 // itemsize)
    if block_k < 64:
        block_k = min(_pow2(k), 1024)
    block_n = max(2, min(32, 32768 // itemsize // block_k))
    while block_n > 2 and -(-n // block_n) < 3 * sms:
        block_n //= 2
    return block_n, block_k, 4, 1


def _config(m: int, n: int, k: int, itemsize: int, device: torch.device) -> tuple[bool, int, int, int, int, int]:
    """(DOT, M_PAD, BLOCK_N, BLOCK_K, num_warps, num_stages) from shapes only (static per captured graph)."""
    sms = _sm_count(device)
    if m == 1:  # FMA units
        tile = tuned_tiles(_device_name(device)).get((n, k)) if itemsize == 2 else None
        return (False, 1, *(tile or _one_row_tile(n, k, itemsize, sms)))
    # the widest tile that gives about two programs per SM (power-of-two N gives 1.94 on 132 SMs)
    bn = _widest(n, (64, 32, 16, 8), 1.9 * sms)
    if m > 8 and bn < 64 and -(-n // (2 * bn)) >= 0.9 * sms:
        bn *= 2  # each program re-reads x (M*K): at M > 8 that is over half its weight bytes; one program per SM
    return _tile(bn, k, itemsize)


def _tile(block_n: int, k: int, itemsize: int, stages: int = 4) -> tuple[bool, int, int, int, int, int]:
    """Tensor cores: 8 KB weight stages through a `stages`-deep pipeline, BLOCK_K <= 256 so that the [16, BLOCK_K]
    activation tile also fits in registers."""
    block_k = min(256, 8192 // itemsize // block_n, max(16, _pow2(k)))
    return True, MAX_M, block_n, block_k, 4, stages


def _rows(t: torch.Tensor | None) -> torch.Tensor | None:
    """The kernel indexes rows by stride and columns by position."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


def _launch(a: torch.Tensor, weight: torch.Tensor, k: int, *, norm_weight=None, eps=0.0, silu=False,
            residual=None) -> torch.Tensor:
    a, residual = _rows(a), _rows(residual)
    m, n = a.shape[0], weight.shape[0]
    out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    dot, m_pad, bn, bk, warps, stages = _config(m, n, k, weight.element_size(), a.device)
    _gemv_kernel[(triton.cdiv(n, bn), triton.cdiv(m, m_pad))](
        a, a if norm_weight is None else norm_weight, weight, out if residual is None else residual, out, m, n,
        a.stride(0), weight.stride(0), 0 if residual is None else residual.stride(0), out.stride(0), eps,
        K=k, NORM=norm_weight is not None, SILU=silu, HAS_RES=residual is not None, DOT=dot,
        IEEE=a.dtype == torch.float32, M_PAD=m_pad, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, num_warps=warps,
        num_stages=stages, **pdl.flags(a.device))
    return out


# -- launchers (inputs row-major with unit stride along K; weights [N, K] as nn.Linear stores them) -----------------
@on_first_tensor_device
def gemv(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ residual)."""
    return _launch(x, weight, x.shape[1], residual=residual)


@on_first_tensor_device
def rms_gemv(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, weight: torch.Tensor) -> torch.Tensor:
    """rmsnorm(x) @ weight.T."""
    if x.dtype == torch.float16:
        return gemv(triton_ops.rmsnorm(x, norm_weight, eps), weight)
    return _launch(x, weight, x.shape[1], norm_weight=norm_weight, eps=eps)


@on_first_tensor_device
def silu_mul_gemv(gate_up: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """(silu(gate) * up) @ weight.T (+ residual); gate_up [M, 2I] holds gate then up."""
    return _launch(gate_up, weight, gate_up.shape[1] // 2, silu=True, residual=residual)


def graph_time_ms(fn, device: torch.device, reps: int = 5) -> float:
    """Mean ms of one replay of `fn()` captured in a CUDA graph: what it costs inside the decode graphs,
    launch gaps included (timing eager calls would mostly time Python)."""
    stream = cuda_graph.private_stream(device)
    graph, _ = cuda_graph.capture(fn, device, stream)
    try:
        with on_device(device):
            graph.replay()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / reps
    finally:
        cuda_graph.reset([graph])
        del graph  # destroyed before its stream goes back
        cuda_graph.release_stream(stream)


# -- torch references ----------------------------------------------------------------------------------------------
def ref_gemv(x, weight, residual=None):
    y = F.linear(x, weight)
    return y if residual is None else residual + y


def ref_rms_gemv(x, norm_weight, eps, weight):
    return F.linear(triton_ops.ref_rmsnorm(x, norm_weight, eps), weight)


def ref_silu_mul_gemv(gate_up, weight, residual=None):
    gate, up = gate_up.chunk(2, dim=-1)
    return ref_gemv(F.silu(gate) * up, weight, residual)


def self_check(device: torch.device, dtype: torch.dtype, hidden: int = 272, out: int = 208,
               rows: tuple[int, ...] = (1, 7)) -> dict[str, float]:
    """Max |kernel - reference| of each GEMV (relative to the reference's scale), over one row (FMA path) and
    several (tensor-core path); sizes that are multiples of 16 but not of the tiles, like real layers."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    rnd = lambda *s, scale=1.0: (torch.randn(*s, generator=gen) * scale).to(device, dtype)
    err = dict.fromkeys(("gemv", "rms_gemv", "silu_mul_gemv"), 0.0)

    def rel(got, want):
        got, want = got.float(), want.float()
        if not torch.isfinite(got).all():
            return float("inf")
        return float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))

    w, nw = rnd(out, hidden, scale=hidden ** -0.5), rnd(hidden, scale=0.5) + 1
    for m in rows:
        x, residual = rnd(m, hidden), rnd(m, out)
        gu = rnd(m, 2 * hidden)
        checks = {
            "gemv": max(rel(gemv(x, w), ref_gemv(x, w)), rel(gemv(x, w, residual), ref_gemv(x, w, residual))),
            "rms_gemv": rel(rms_gemv(x, nw, 1e-6, w), ref_rms_gemv(x, nw, 1e-6, w)),
            "silu_mul_gemv": max(rel(silu_mul_gemv(gu, w), ref_silu_mul_gemv(gu, w)),
                                 rel(silu_mul_gemv(gu, w, residual), ref_silu_mul_gemv(gu, w, residual))),
        }
        err = {name: max(err[name], e) for name, e in checks.items()}
    return err
