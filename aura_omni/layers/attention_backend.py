"""Which fast attention kernels this process may use, detected from the installed torch and checked once.

torch's `varlen_attn` (flash) exists on CUDA from torch 2.11 with fp16/bf16; its `block_table` (paged
KV) arrives in torch 2.13 (absent in 2.11). Argument
names moved between releases, so everything is read from the signature, and `select_backend` runs each
kernel once against the pure-torch reference on the real device before enabling it: a kernel that
raises or disagrees is logged and left off, never trusted blind.

Kernels (each checked the same way):
- `varlen`: flash over cache-less prefill of mixed lengths;
- `varlen_cached`: flash over a cached step's gathered keys (query shorter than keys, causal from the end);
- `paged_varlen`: flash straight from the pages (`block_table`, torch >= 2.13);
- `triton_decode`, `fused_layers`: layers/triton_ops.py (paged decode in place; fused norm/RoPE/SiLU layers);
- `short_attention`: layers/triton_short_attention.py, q/k norm + RoPE + KV write + attention of a decode step
  over at most 64 tokens of context in one launch (the code predictor), on top of `fused_layers`;
- `triton_prefill`: layers/triton_prefill.py, any cached step from the pages with no host sync: the attention of
  graph-captured prefill steps (engine/prefill_graphs.py);
- `gemv`: layers/triton_gemv.py (projections of at most 16 rows with their norm / SiLU*mul / residual fused),
  on top of `fused_layers`; a model then uses them for one-row steps if they time faster (models/qwen3.py).
torch 2.11's varlen_attn takes no `enable_gqa`; its flash kernel still accepts unexpanded K/V heads, which a probe
confirms once before the expansion (two copies of the keys per layer) is skipped.
The checks run once per (device, dtype) per process, and what passed is kept per device: a stage on the CPU, or one
that asks for plain torch, never turns a kernel off for another stage. Which of the checked kernels a stage uses is its
own choice (`kernels:` in the deploy file -> EngineConfig -> layers/kernel_switches.py), read at each use.
"""

import inspect
import logging
import threading

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

try:  # torch >= 2.11
    from torch.nn.attention.varlen import varlen_attn as _varlen_attn

    _VARLEN_ARGS = set(inspect.signature(_varlen_attn).parameters)
except ImportError:  # pragma: no cover - older torch
    _varlen_attn, _VARLEN_ARGS = None, set()

from aura_omni.layers.device import on_device
from aura_omni.layers import kernel_switches, triton_gemv, triton_ops, triton_prefill, triton_short_attention

_FLASH_DTYPES = (torch.float16, torch.bfloat16)
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_KERNELS = ("varlen", "varlen_cached", "paged_varlen", "triton_decode", "fused_layers", "gemv", "triton_prefill",
            "short_attention")
_passed: dict[tuple[torch.device, torch.dtype], dict[str, bool]] = {}  # the kernels that passed on (device, dtype)
_native_gqa: set[tuple[torch.device, torch.dtype]] = set()  # where flash takes unexpanded GQA heads (_probe_native_gqa)
_selected: dict[tuple, dict[str, bool]] = {}  # (device, dtype, GEMVs checked) -> outcome; checks run once
_selecting = threading.Lock()  # stages loading in parallel: one runs the checks (and compiles), the others wait for it


def available() -> dict[str, bool]:
    """What the installed torch offers at all (before any device check)."""
    varlen = _varlen_attn is not None
    return {
        "varlen": varlen,
        "varlen_cached": varlen,
        "paged_varlen": varlen and "block_table" in _VARLEN_ARGS and "seqused_k" in _VARLEN_ARGS,
        "triton_decode": triton_ops.AVAILABLE and torch.cuda.is_available(),
        "fused_layers": triton_ops.AVAILABLE and torch.cuda.is_available(),
        "gemv": triton_gemv.AVAILABLE and torch.cuda.is_available(),
        "triton_prefill": triton_prefill.AVAILABLE and torch.cuda.is_available(),
        "short_attention": triton_short_attention.AVAILABLE and torch.cuda.is_available(),
    }


def _device_key(device: torch.device) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def enabled(device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> dict[str, bool]:
    """What the running stage may use on `device` (default: the current CUDA device) in `dtype` (default: any):
    passed its check there and allowed by the stage's switches."""
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = _device_key(device)
    passed = [p for (d, t), p in _passed.items() if d == device and dtype in (None, t)]
    return {name: _allowed(name) and any(p[name] for p in passed) for name in _KERNELS}


def _allowed(name: str) -> bool:
    switches = kernel_switches.current()
    return switches.fast_attention and (name != "gemv" or switches.gemv)


def _on(name: str, x: torch.Tensor) -> bool:
    return x.is_cuda and _passed.get((x.device, x.dtype), {}).get(name, False) and _allowed(name)


def varlen_enabled(q: torch.Tensor) -> bool:
    return q.dtype in _FLASH_DTYPES and _on("varlen", q)


def paged_varlen_enabled(q: torch.Tensor) -> bool:
    return q.dtype in _FLASH_DTYPES and _on("paged_varlen", q)


def varlen_cached_enabled(q: torch.Tensor) -> bool:
    return q.dtype in _FLASH_DTYPES and _on("varlen_cached", q)


def triton_decode_enabled(q: torch.Tensor) -> bool:
    return _on("triton_decode", q) and triton_ops.supports(q.shape[-1], 1)


def fused_layers_enabled(x: torch.Tensor) -> bool:
    return _on("fused_layers", x)


def triton_prefill_enabled(x: torch.Tensor, head_dim: int) -> bool:
    return _on("triton_prefill", x) and triton_prefill.supports(head_dim)


def short_attention_enabled(x: torch.Tensor) -> bool:
    return _on("short_attention", x)


def gemv_enabled(x: torch.Tensor) -> bool:
    return _on("gemv", x)


def triton_paged_decode(q, k_cache, v_cache, meta, scale: float) -> torch.Tensor:
    return triton_ops.paged_decode(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale)


def paged_prefill(q, k_cache, v_cache, meta, scale: float) -> torch.Tensor:
    """A step described by device tensors only (`meta.query_tiles` set): Triton where checked, else the torch
    reference (host syncs, so no graph; CPU runs of the graph path)."""
    args = (q, k_cache, v_cache, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, scale)
    if triton_prefill_enabled(q, q.shape[-1]):
        return triton_prefill.paged_prefill(*args, meta.query_tiles)
    return triton_prefill.ref_paged_prefill(*args)


def varlen_cached(q, keys, values, meta, scale: float) -> torch.Tensor:
    """A cached step of any mix (chunks, decodes): q [N, Hq, D] over each sequence's gathered keys."""
    return _call(q, keys.to(q.dtype), values.to(q.dtype), meta.cu_seqlens_q, meta.cu_seqlens_k,
                 max(meta.query_lens), meta.max_seq_len, scale)


def _causal() -> dict:
    if "window_size" in _VARLEN_ARGS:
        return {"window_size": (-1, 0)}  # causal, aligned to the end of the keys (flash convention)
    return {"is_causal": True}


def _call(q, k, v, cu_q, cu_k, max_q, max_k, scale, **extra):
    kwargs = {"scale": scale, **_causal(), **extra}
    if q.shape[1] != k.shape[-2]:
        if "enable_gqa" in _VARLEN_ARGS:
            kwargs["enable_gqa"] = True
        elif (q.device, q.dtype) not in _native_gqa:  # expand the kv heads for kernels without GQA
            rep = q.shape[1] // k.shape[-2]
            k, v = k.repeat_interleave(rep, dim=-2), v.repeat_interleave(rep, dim=-2)
    return _varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs)


def _probe_native_gqa(device: torch.device, dtype: torch.dtype) -> bool:
    """torch 2.11's varlen_attn has no `enable_gqa`, but its flash kernel takes fewer K/V heads than Q heads;
    expanding them costs two copies of the keys per layer per prefill. Use that only if it gives the same."""
    gen = torch.Generator(device="cpu").manual_seed(1)
    q, k, v = (torch.randn(24, h, 64, generator=gen).to(device, dtype) for h in (8, 2, 2))
    cu = torch.tensor([0, 7, 24], dtype=torch.int32, device=device)
    try:
        native = _varlen_attn(q, k, v, cu, cu, 17, 17, **_causal())
        expanded = _varlen_attn(q, k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1), cu, cu, 17, 17,
                                **_causal())
        return bool(torch.equal(native, expanded))
    except Exception:  # noqa: BLE001 - a kernel that refuses GQA keeps the expansion
        return False


def varlen_prefill(q, k, v, meta, scale: float) -> torch.Tensor:
    """Cache-less causal attention over several sequences of different lengths in one flash call."""
    max_q = max(meta.query_lens)
    return _call(q, k.to(q.dtype), v.to(q.dtype), meta.cu_seqlens_q, meta.cu_seqlens_q, max_q, max_q, scale)


def paged_varlen(q, k_cache, v_cache, meta, scale: float) -> torch.Tensor:
    """Any cached step (prefill chunks and decode mixed) straight from the pages."""
    cu_k = torch.zeros(meta.num_seqs + 1, dtype=torch.int32, device=q.device)
    cu_k[1:] = meta.seq_lens.cumsum(0)
    return _call(q, k_cache.to(q.dtype), v_cache.to(q.dtype), meta.cu_seqlens_q, cu_k, max(meta.query_lens),
                 meta.max_seq_len, scale, seqused_k=meta.seq_lens, block_table=meta.block_tables)


def _reference(q, k, v, context: int) -> torch.Tensor:
    qlen, klen = q.shape[0], k.shape[0]
    mask = torch.arange(klen, device=q.device)[None, :] <= torch.arange(context, context + qlen, device=q.device)[:, None]
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None].float(), k.transpose(0, 1)[None].float(),
                                         v.transpose(0, 1)[None].float(), attn_mask=mask, enable_gqa=True)
    return out[0].transpose(0, 1)


def select_backend(device: torch.device, dtype: torch.dtype, prefer_fast: bool = True) -> dict[str, bool]:
    """Check each available kernel the running stage wants (kernel_switches.current()) against the reference on this
    device and dtype, once; returns what the stage may use. `prefer_fast=False`: no checks, plain torch for the stage."""
    if not prefer_fast or torch.device(device).type != "cuda" or dtype not in _TRITON_DTYPES:
        return {name: False for name in _KERNELS}
    device = _device_key(device)
    with _selecting, on_device(device):
        outcome = _select_backend(device, dtype)
    passed = _passed.setdefault((device, dtype), dict.fromkeys(_KERNELS, False))
    for name, ok in outcome.items():  # what passed stays passed: another stage's choice never turns it off
        passed[name] |= ok
    return enabled(device, dtype)


def _select_backend(device: torch.device, dtype: torch.dtype) -> dict[str, bool]:
    from aura_omni.layers.attention import AttentionMetadata

    gemv_wanted = kernel_switches.current().gemv
    key = (device, dtype, gemv_wanted)
    if key in _selected:
        return _selected[key]
    outcome = dict.fromkeys(_KERNELS, False)
    triton_checked = False  # the fused-kernel check ran in this dtype (the others build on its kernels)
    offer = available()
    offer["gemv"] &= gemv_wanted
    if offer["triton_decode"]:
        try:
            tol = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
            errors = triton_ops.self_check(device, dtype)
            outcome["triton_decode"] = errors["paged_decode"] <= tol
            outcome["fused_layers"] = all(v <= tol for k, v in errors.items() if k != "paged_decode")
            triton_checked = True
            log.info("triton kernels vs reference (%s): %s", dtype, {k: f"{v:.1e}" for k, v in errors.items()})
        except Exception as e:  # noqa: BLE001
            log.warning("triton kernels unusable here (%s: %s); using torch", type(e).__name__, e)
        for name, check in (("triton_prefill", triton_prefill.self_check),
                            ("short_attention", triton_short_attention.self_check)):
            if offer[name] and triton_checked and (name != "short_attention" or outcome["fused_layers"]):
                try:
                    error = check(device, dtype)
                    outcome[name] = error <= tol
                    log.info("triton %s vs reference (%s): %.1e", name, dtype, error)
                except Exception as e:  # noqa: BLE001 - the kernels it would replace stay on
                    log.warning("triton %s unusable here (%s: %s)", name, type(e).__name__, e)
        offer["gemv"] &= outcome["fused_layers"]  # the GEMV layer runs inside the fused one
        if offer["gemv"]:
            try:
                errors = triton_gemv.self_check(device, dtype)
                outcome["gemv"] = all(v <= tol for v in errors.values())
                log.info("triton GEMVs vs reference (%s): %s", dtype, {k: f"{v:.1e}" for k, v in errors.items()})
            except Exception as e:  # noqa: BLE001
                log.warning("triton GEMVs unusable here (%s: %s); using cuBLAS", type(e).__name__, e)
    if dtype not in _FLASH_DTYPES:
        offer = dict(offer, varlen=False, varlen_cached=False, paged_varlen=False)
    if _varlen_attn is not None and any(offer[k] for k in ("varlen", "varlen_cached", "paged_varlen")):
        if "enable_gqa" not in _VARLEN_ARGS and _probe_native_gqa(device, dtype):
            _native_gqa.add((device, dtype))
    gen = torch.Generator(device="cpu").manual_seed(0)
    hq, hkv, d, bs = 4, 2, 64, 16
    rnd = lambda *shape: torch.randn(*shape, generator=gen).to(device, dtype)
    lens, ctx = [5, 17], [0, 20]
    if offer["varlen"]:
        try:
            q, k, v = rnd(22, hq, d), rnd(22, hkv, d), rnd(22, hkv, d)
            meta = AttentionMetadata.prefill(lens, device)
            got = varlen_prefill(q, k, v, meta, d**-0.5).float()
            want = torch.cat([_reference(q[:5], k[:5], v[:5], 0), _reference(q[5:], k[5:], v[5:], 0)])
            outcome["varlen"] = bool((got - want).abs().max() < 2e-2)
        except Exception as e:  # noqa: BLE001 - any failure means: do not use it
            log.warning("varlen_attn prefill unusable here (%s: %s); using SDPA", type(e).__name__, e)
    if offer["varlen_cached"]:
        try:  # queries at the end of longer key ranges (prefix-cached / chunked prefill), GQA
            k_all, v_all = rnd(sum(ctx) + sum(lens), hkv, d), rnd(sum(ctx) + sum(lens), hkv, d)
            q = rnd(sum(lens), hq, d)
            cu_q = torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32, device=device)
            kl = [c + n for c, n in zip(ctx, lens)]
            cu_k = torch.tensor([0, kl[0], sum(kl)], dtype=torch.int32, device=device)
            meta = AttentionMetadata(cu_q, lens, ctx, None, None, None, max(kl), cu_seqlens_k=cu_k)
            got = varlen_cached(q, k_all, v_all, meta, d**-0.5).float()
            want = torch.cat([_reference(q[cu_q[i]:cu_q[i + 1]], k_all[cu_k[i]:cu_k[i + 1]],
                                         v_all[cu_k[i]:cu_k[i + 1]], ctx[i]) for i in range(2)])
            outcome["varlen_cached"] = bool((got - want).abs().max() < 2e-2)
        except Exception as e:  # noqa: BLE001
            log.warning("varlen_attn over cached keys unusable here (%s: %s); using per-sequence SDPA",
                        type(e).__name__, e)
    if offer["paged_varlen"]:
        try:
            k_cache, v_cache = rnd(8, bs, hkv, d), rnd(8, bs, hkv, d)
            tables = torch.tensor([[3, 0], [6, 1]], dtype=torch.int32, device=device)
            total = [c + n for c, n in zip(ctx, lens)]
            q = rnd(sum(lens), hq, d)
            cu = torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32, device=device)
            meta = AttentionMetadata(cu, lens, ctx, None, tables, torch.tensor(total, dtype=torch.int32, device=device),
                                     max(total))
            got = paged_varlen(q, k_cache, v_cache, meta, d**-0.5).float()
            want = []
            for i, (c, n) in enumerate(zip(ctx, lens)):
                keys = k_cache[tables[i].long()].reshape(-1, hkv, d)[:c + n]
                vals = v_cache[tables[i].long()].reshape(-1, hkv, d)[:c + n]
                want.append(_reference(q[cu[i]:cu[i] + n], keys, vals, c))
            outcome["paged_varlen"] = bool((got - torch.cat(want)).abs().max() < 2e-2)
        except Exception as e:  # noqa: BLE001
            log.warning("varlen_attn with block_table unusable here (%s: %s); using gathered SDPA", type(e).__name__, e)
    for name, on in outcome.items():
        if offer[name] and not on:
            log.warning("attention kernel %s is offered by torch %s but disagreed with the reference: off",
                        name, torch.__version__)
    log.info("attention kernels (%s, %s): %s", device, dtype, outcome)
    _selected[key] = outcome
    return outcome
