"""Fused Triton kernels for the decoder's memory-bound pieces (CUDA only; every one has a torch reference).

A decode step of a small batch is bound by launches, not bytes: the plain torch layer is ~50 kernels
(RMSNorm alone is 7). These kernels make a layer ~10 launches, each with the reference's roundings:

- `rmsnorm` / `add_rmsnorm`: Qwen RMSNorm (fp32 mean square, cast, times weight in the input dtype),
  optionally after the residual add `x + delta` (rounded like the torch add);
- `qk_norm_rope`: per-head q/k RMSNorm + rotate-half RoPE on the fused QKV output, writing K and V
  straight into their paged-cache slots;
- `silu_mul`: `silu(gate) * up` on the fused gate/up output;
- `paged_decode`: one new token per sequence over its paged K/V, GQA groups together, split over the
  context (flash-decoding) and combined by a second small kernel. It reads the pages in place (no
  gather copy), and its cost follows each row's real length, not the table width a graph captured.

attention_backend.select_backend runs `self_check` on the real device and enables them only if each
matches its reference. `TRITON_INTERPRET=1` runs the same kernels on the CPU (scripts/check_triton_ops.py).
"""

import os

import torch
import torch.nn.functional as F

from aura_omni.layers import pdl
from aura_omni.layers.device import on_first_tensor_device

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines and CI: the torch paths run instead
    triton = tl = None

AVAILABLE = triton is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"  # kernels run on the CPU interpreter (checks, tests)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


if AVAILABLE:
    from aura_omni.layers.pdl import begin

    @triton.jit
    def _rmsnorm_kernel(x_ptr, r_ptr, w_ptr, out_ptr, res_ptr, stride_x, stride_r, stride_o, stride_res, n_cols, eps,
                        HAS_RES: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
        begin(PDL)
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        dt = out_ptr.dtype.element_ty
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            r = tl.load(r_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
            x = (x + r).to(dt).to(tl.float32)  # the residual add, rounded like torch's
            tl.store(res_ptr + row * stride_res + cols, x.to(dt), mask=mask)
        var = tl.sum(x * x, axis=0) / n_cols
        y = (x * tl.rsqrt(var + eps)).to(dt).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_o + cols, (y * w).to(dt), mask=mask)

    @triton.jit
    def _qk_norm_rope_kernel(qkv_ptr, stride_tok, cos_ptr, sin_ptr, stride_cs, qw_ptr, kw_ptr,
                             q_out, k_out, v_out, kc_ptr, vc_ptr, slot_ptr, eps,
                             HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, HAS_CACHE: tl.constexpr,
                             PDL: tl.constexpr):
        begin(PDL)
        tok = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        half = tl.arange(0, D // 2)
        dt = q_out.dtype.element_ty
        base = qkv_ptr + tok * stride_tok
        if h < HQ:
            src = base + h * D
            w_ptr = qw_ptr
            dst = q_out + (tok * HQ + h) * D
        else:
            src = base + h * D  # K heads follow the Q heads
            w_ptr = kw_ptr
            dst = k_out + (tok * HKV + h - HQ) * D
        x1 = tl.load(src + half).to(tl.float32)
        x2 = tl.load(src + D // 2 + half).to(tl.float32)
        r = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / D + eps)
        n1 = ((x1 * r).to(dt).to(tl.float32) * tl.load(w_ptr + half).to(tl.float32)).to(dt).to(tl.float32)
        n2 = ((x2 * r).to(dt).to(tl.float32) * tl.load(w_ptr + D // 2 + half).to(tl.float32)).to(dt).to(tl.float32)
        cs = tok * stride_cs
        c1 = tl.load(cos_ptr + cs + half).to(dt).to(tl.float32)
        c2 = tl.load(cos_ptr + cs + D // 2 + half).to(dt).to(tl.float32)
        s1 = tl.load(sin_ptr + cs + half).to(dt).to(tl.float32)
        s2 = tl.load(sin_ptr + cs + D // 2 + half).to(dt).to(tl.float32)
        o1 = ((n1 * c1).to(dt).to(tl.float32) - (n2 * s1).to(dt).to(tl.float32)).to(dt)  # rotate_half: (-x2, x1)
        o2 = ((n2 * c2).to(dt).to(tl.float32) + (n1 * s2).to(dt).to(tl.float32)).to(dt)
        tl.store(dst + half, o1)
        tl.store(dst + D // 2 + half, o2)
        if h >= HQ:
            kh = h - HQ
            full = tl.arange(0, D)
            v = tl.load(base + (HQ + HKV + kh) * D + full)
            tl.store(v_out + (tok * HKV + kh) * D + full, v.to(dt))
            if HAS_CACHE:
                slot = tl.load(slot_ptr + tok).to(tl.int64)
                at = (slot * HKV + kh) * D
                tl.store(kc_ptr + at + half, o1.to(kc_ptr.dtype.element_ty))
                tl.store(kc_ptr + at + D // 2 + half, o2.to(kc_ptr.dtype.element_ty))
                tl.store(vc_ptr + at + full, v.to(vc_ptr.dtype.element_ty))

    @triton.jit
    def _silu_mul_kernel(gu_ptr, out_ptr, stride_gu, stride_o, n_cols, BLOCK: tl.constexpr, PDL: tl.constexpr):
        begin(PDL)
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        dt = out_ptr.dtype.element_ty
        g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(gu_ptr + row * stride_gu + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        s = (g / (1.0 + tl.exp(-g))).to(dt).to(tl.float32)
        tl.store(out_ptr + row * stride_o + cols, (s * u).to(dt), mask=mask)

    @triton.jit
    def _kv_block(kc_ptr, vc_ptr, table_ptr, t, tmask, head, d, stride_kb, stride_kt, stride_kh, BS: tl.constexpr):
        """K and V [N, D] of token positions `t` (where `tmask`) of one KV head, read through a page table row."""
        page = tl.load(table_ptr + t // BS, mask=tmask, other=0).to(tl.int64)
        at = page[:, None] * stride_kb + (t % BS)[:, None] * stride_kt + head * stride_kh + d[None, :]
        k = tl.load(kc_ptr + at, mask=tmask[:, None], other=0.0)
        return k, tl.load(vc_ptr + at, mask=tmask[:, None], other=0.0)

    @triton.jit
    def _attend_block(q, k, v, valid, m_i, l_i, acc, scale, IEEE: tl.constexpr):
        """One block of keys of an online softmax (flash order): q [R, D] against k, v [N, D] (cast to q's dtype) where
        `valid` ([R, N] or broadcastable); returns the updated running max [R], sum [R] and weighted values [R, D],
        all fp32."""
        k, v = k.to(q.dtype), v.to(q.dtype)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.where(valid, s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # a row that has seen no key yet (a key part that starts past its position) keeps max -inf; exp(-inf - -inf)
        # would be NaN, so it subtracts 0 instead and its weights stay exp(-inf) = 0
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - shift)
        p = tl.exp(s - shift[:, None])
        if IEEE:
            pv = tl.dot(p.to(q.dtype), v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(q.dtype), v)
        return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + pv

    @triton.jit
    def _key_block(n0, q, qpos, m_i, l_i, acc, kc_ptr, vc_ptr, table_ptr, end, kvh, d, scale, stride_kb, stride_kt,
                   stride_kh, BS: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr, MASK: tl.constexpr):
        t = n0 + tl.arange(0, BLOCK_N)
        if MASK:
            tmask = t < end
            k, v = _kv_block(kc_ptr, vc_ptr, table_ptr, t, tmask, kvh, d, stride_kb, stride_kt, stride_kh, BS)
            return _attend_block(q, k, v, tmask[None, :] & (t[None, :] <= qpos[:, None]), m_i, l_i, acc, scale, IEEE)
        k, v = _kv_block(kc_ptr, vc_ptr, table_ptr, t, t >= 0, kvh, d, stride_kb, stride_kt, stride_kh, BS)
        return _attend_block(q, k, v, True, m_i, l_i, acc, scale, IEEE)

    @triton.jit
    def attend_keys(lo, hi, q, qpos, m_i, l_i, acc, kc_ptr, vc_ptr, table_ptr, end, kvh, d, scale, stride_kb,
                    stride_kt, stride_kh, BS: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr,
                    MASK: tl.constexpr, PIPELINE: tl.constexpr):
        """Keys [lo, hi) of KV head `kvh`, read BLOCK_N at a time through the page-table row `table_ptr`, into the
        online softmax (flash order) of q [R, D] at positions qpos [R]; returns the running max [R], sum [R] and
        weighted values [R, D], fp32. MASK: keys at or past `end` or past a row's position are left out (a block
        that every row sees needs neither). PIPELINE: a software-pipelined loop (compiled kernels only: the
        interpreter takes no loaded bound in a range)."""
        if PIPELINE:  # the next blocks' page lookups and K/V loads overlap this block's math
            for n0 in tl.range(lo, hi, BLOCK_N, num_stages=3):  # 3 x 32 KB of K/V (D 128) in shared memory
                m_i, l_i, acc = _key_block(n0, q, qpos, m_i, l_i, acc, kc_ptr, vc_ptr, table_ptr, end, kvh, d, scale,
                                           stride_kb, stride_kt, stride_kh, BS, BLOCK_N, IEEE, MASK)
        else:
            n0 = lo + 0 * hi  # a tensor even for a constant `lo`: the loop carries it
            while n0 < hi:
                m_i, l_i, acc = _key_block(n0, q, qpos, m_i, l_i, acc, kc_ptr, vc_ptr, table_ptr, end, kvh, d, scale,
                                           stride_kb, stride_kt, stride_kh, BS, BLOCK_N, IEEE, MASK)
                n0 += BLOCK_N
        return m_i, l_i, acc

    @triton.jit(do_not_specialize=["stride_btb"])  # eager decode steps differ in table width: one variant
    def _paged_decode_part_kernel(q_ptr, kc_ptr, vc_ptr, bt_ptr, sl_ptr, m_ptr, l_ptr, acc_ptr, out_ptr, scale,
                                  stride_qb, stride_qh, stride_kb, stride_kt, stride_kh, stride_btb, stride_ob,
                                  stride_oh, num_parts, part_len,
                                  HQ: tl.constexpr, GROUP: tl.constexpr,
                                  GROUP_PAD: tl.constexpr, D: tl.constexpr, BS: tl.constexpr,
                                  BLOCK_N: tl.constexpr, IEEE: tl.constexpr, SINGLE: tl.constexpr, PDL: tl.constexpr):
        begin(PDL)
        b = tl.program_id(0).to(tl.int64)
        kvh = tl.program_id(1)
        part = tl.program_id(2)
        seq_len = tl.load(sl_ptr + b).to(tl.int32)
        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, D)
        gmask = g < GROUP
        heads = kvh * GROUP + g
        q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=gmask[:, None], other=0.0)
        m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, D], tl.float32)
        start = part * part_len
        end = tl.minimum(start + part_len, seq_len)
        qpos = tl.zeros([GROUP_PAD], tl.int32) + seq_len - 1  # the new token sees every key
        m_i, l_i, acc = attend_keys(start, end, q, qpos, m_i, l_i, acc, kc_ptr, vc_ptr, bt_ptr + b * stride_btb, end,
                                    kvh, d, scale, stride_kb, stride_kt, stride_kh, BS, BLOCK_N, IEEE, True, False)
        if SINGLE:  # one partition holds the whole context: normalise here, no reduce launch
            out = acc / l_i[:, None]
            tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=gmask[:, None])
        else:  # a partition past the row's length only marks itself empty (max -inf): the reduce skips its values
            row = (b * HQ + heads) * num_parts + part
            tl.store(m_ptr + row, m_i, mask=gmask)
            tl.store(l_ptr + row, l_i, mask=gmask)
            tl.store(acc_ptr + row[:, None] * D + d[None, :], acc, mask=gmask[:, None] & (start < end))

    @triton.jit
    def _paged_decode_reduce_kernel(m_ptr, l_ptr, acc_ptr, out_ptr, stride_ob, stride_oh, num_parts,
                                    HQ: tl.constexpr, D: tl.constexpr, PARTS_PAD: tl.constexpr, PDL: tl.constexpr):
        begin(PDL)
        b = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        p = tl.arange(0, PARTS_PAD)
        d = tl.arange(0, D)
        pmask = p < num_parts
        rows = (b * HQ + h) * num_parts + p
        m = tl.load(m_ptr + rows, mask=pmask, other=float("-inf"))
        l = tl.load(l_ptr + rows, mask=pmask, other=0.0)
        big = tl.max(m, 0)  # partition 0 always holds token 0, so this is finite
        used = pmask & (m > float("-inf"))
        w = tl.where(used, tl.exp(m - big), 0.0)
        acc = tl.load(acc_ptr + rows[:, None] * D + d[None, :], mask=used[:, None], other=0.0)
        out = tl.sum(acc * w[:, None], 0) / tl.sum(l * w, 0)
        tl.store(out_ptr + b * stride_ob + h * stride_oh + d, out.to(out_ptr.dtype.element_ty))


# -- launchers -------------------------------------------------------------------------------------------------
@on_first_tensor_device
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    out = torch.empty_like(x)
    _rmsnorm_kernel[(x.shape[0],)](x, x, weight, out, out, x.stride(0), 0, out.stride(0), 0, x.shape[1], eps,
                                   HAS_RES=False, BLOCK=_pow2(x.shape[1]), num_warps=8 if x.shape[1] >= 2048 else 4,
                                   **pdl.flags(x.device))
    return out


@on_first_tensor_device
def add_rmsnorm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, rmsnorm(x + delta))."""
    out, res = torch.empty_like(x), torch.empty_like(x)
    _rmsnorm_kernel[(x.shape[0],)](x, delta, weight, out, res, x.stride(0), delta.stride(0), out.stride(0),
                                   res.stride(0), x.shape[1], eps, HAS_RES=True, BLOCK=_pow2(x.shape[1]),
                                   num_warps=8 if x.shape[1] >= 2048 else 4, **pdl.flags(x.device))
    return res, out


@on_first_tensor_device
def qk_norm_rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, q_weight: torch.Tensor,
                 k_weight: torch.Tensor, eps: float, hq: int, hkv: int, d: int,
                 k_cache: torch.Tensor | None = None, v_cache: torch.Tensor | None = None,
                 slots: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [N, (hq+2hkv)*d] -> q [N,hq,d], k [N,hkv,d] (normed, rotated), v [N,hkv,d]; K/V to `slots` if given."""
    n = qkv.shape[0]
    q = torch.empty(n, hq, d, dtype=qkv.dtype, device=qkv.device)
    k = torch.empty(n, hkv, d, dtype=qkv.dtype, device=qkv.device)
    v = torch.empty(n, hkv, d, dtype=qkv.dtype, device=qkv.device)
    has_cache = slots is not None
    _qk_norm_rope_kernel[(n, hq + hkv)](
        qkv, qkv.stride(0), cos, sin, cos.stride(0), q_weight, k_weight, q, k, v,
        k_cache if has_cache else q, v_cache if has_cache else q, slots if has_cache else q, eps,
        HQ=hq, HKV=hkv, D=d, HAS_CACHE=has_cache, num_warps=1 if d <= 128 else 2, **pdl.flags(qkv.device))
    return q, k, v


@on_first_tensor_device
def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    n, two_i = gate_up.shape
    inter = two_i // 2
    out = torch.empty(n, inter, dtype=gate_up.dtype, device=gate_up.device)
    block = min(1024, _pow2(inter))
    _silu_mul_kernel[(n, triton.cdiv(inter, block))](gate_up, out, gate_up.stride(0), out.stride(0), inter,
                                                     BLOCK=block, num_warps=4, **pdl.flags(gate_up.device))
    return out


_TARGET_PROGRAMS = 264  # two waves over the H200's 132 SMs
_BLOCK_N = 64  # tokens per inner iteration


@on_first_tensor_device
def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                 seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B, Hq, D] (one token per sequence); caches [blocks, bs, Hkv, D] -> [B, Hq, D].

    The split over the context is fixed by the table width (static under CUDA graphs); partitions past a
    row's length exit at once.
    """
    b, hq, d = q.shape
    _, bs, hkv, _ = k_cache.shape
    group = hq // hkv
    width = block_tables.shape[1] * bs
    parts = max(1, min(-(-_TARGET_PROGRAMS // (b * hkv)), -(-width // _BLOCK_N)))
    part = -(-(-(-width // parts)) // _BLOCK_N) * _BLOCK_N
    parts = -(-width // part)
    single = parts == 1  # short contexts (the code predictor's 16 tokens): one launch
    m = torch.empty(0 if single else b * hq * parts, dtype=torch.float32, device=q.device)
    l_ = torch.empty_like(m)
    acc = torch.empty(0 if single else b * hq * parts * d, dtype=torch.float32, device=q.device)
    out = torch.empty_like(q)
    _paged_decode_part_kernel[(b, hkv, parts)](
        q, k_cache, v_cache, block_tables, seq_lens, m, l_, acc, out, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        out.stride(0), out.stride(1), parts, part, HQ=hq, GROUP=group, GROUP_PAD=max(16, _pow2(group)), D=d, BS=bs,
        BLOCK_N=_BLOCK_N, IEEE=q.dtype == torch.float32, SINGLE=single, num_warps=4, **pdl.flags(q.device))
    return out if single else reduce_parts(m, l_, acc, out, parts)


def reduce_parts(m: torch.Tensor, l_: torch.Tensor, acc: torch.Tensor, out: torch.Tensor, parts: int) -> torch.Tensor:
    """Combine per-part softmax partials into out [R, Hq, D]: m, l [R*Hq*parts] (max, sum; an empty part has max
    -inf and unwritten values) and acc [R*Hq*parts*D] (values weighted by exp(score - max)), part fastest."""
    rows, hq, d = out.shape
    _paged_decode_reduce_kernel[(rows, hq)](m, l_, acc, out, out.stride(0), out.stride(1), parts, HQ=hq, D=d,
                                            PARTS_PAD=_pow2(parts), num_warps=1, **pdl.flags(out.device))
    return out


def supports(head_dim: int, hidden: int) -> bool:
    """Shapes the kernels take: power-of-two head_dim >= 16 (tl.arange / tl.dot)."""
    return AVAILABLE and head_dim >= 16 and head_dim & (head_dim - 1) == 0 and hidden >= 1


# -- torch references (the CPU path's exact semantics) -----------------------------------------------------------
def ref_rmsnorm(x, weight, eps):
    y = x.float()
    return weight * (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def ref_qk_norm_rope(qkv, cos, sin, q_weight, k_weight, eps, hq, hkv, d):
    from aura_omni.layers.rotary import apply_rotary

    n = qkv.shape[0]
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    q = apply_rotary(ref_rmsnorm(q.reshape(n, hq, d), q_weight, eps), cos, sin)
    k = apply_rotary(ref_rmsnorm(k.reshape(n, hkv, d), k_weight, eps), cos, sin)
    return q, k, v.reshape(n, hkv, d)


def ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale):
    outs = []
    bs, hkv, d = k_cache.shape[1:]
    for i in range(q.shape[0]):
        n = int(seq_lens[i])
        blocks = block_tables[i, :-(-n // bs)].long()
        keys = k_cache[blocks].reshape(-1, hkv, d)[:n].transpose(0, 1)[None].float()
        vals = v_cache[blocks].reshape(-1, hkv, d)[:n].transpose(0, 1)[None].float()
        o = F.scaled_dot_product_attention(q[i][None, :, None].float(), keys, vals, scale=scale, enable_gqa=True)
        outs.append(o[0, :, 0])
    return torch.stack(outs)


def self_check(device: torch.device, dtype: torch.dtype, head_dim: int = 64, hq: int = 8, hkv: int = 2,
               hidden: int = 256) -> dict[str, float]:
    """Max |kernel - reference| of each kernel on random inputs (relative to the reference's scale)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    rnd = lambda *s, scale=1.0: (torch.randn(*s, generator=gen) * scale).to(device, dtype)
    err = {}

    def rel(got, want):
        got, want = got.float(), want.float()
        if not torch.isfinite(got).all():
            return float("inf")
        return float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))

    n = 5
    x, delta, w = rnd(n, hidden), rnd(n, hidden), rnd(hidden, scale=0.5) + 1
    err["rmsnorm"] = rel(rmsnorm(x, w, 1e-6), ref_rmsnorm(x, w, 1e-6))
    res, normed = add_rmsnorm(x, delta, w, 1e-6)
    err["add_rmsnorm"] = max(rel(res, x + delta), rel(normed, ref_rmsnorm(x + delta, w, 1e-6)))
    gu = rnd(n, 2 * hidden)
    err["silu_mul"] = rel(silu_mul(gu), F.silu(gu[:, :hidden]) * gu[:, hidden:])
    qkv = rnd(n, (hq + 2 * hkv) * head_dim)
    ang = torch.arange(n, dtype=torch.float32)[:, None] * torch.rand(head_dim // 2, generator=gen)[None]
    cos, sin = torch.cat([ang, ang], -1).cos().to(device), torch.cat([ang, ang], -1).sin().to(device)
    qw, kw = rnd(head_dim, scale=0.5) + 1, rnd(head_dim, scale=0.5) + 1
    blocks, bs = 12, 16
    kc = torch.zeros(blocks, bs, hkv, head_dim, dtype=dtype, device=device)
    vc = torch.zeros_like(kc)
    slots = torch.tensor([3, 17, 40, 41, 100], device=device)
    q, k, v = qk_norm_rope(qkv, cos, sin, qw, kw, 1e-6, hq, hkv, head_dim, kc, vc, slots)
    rq, rk, rv = ref_qk_norm_rope(qkv, cos, sin, qw, kw, 1e-6, hq, hkv, head_dim)
    cache_err = max(rel(kc.view(-1, hkv, head_dim)[slots], rk), rel(vc.view(-1, hkv, head_dim)[slots], rv))
    err["qk_norm_rope"] = max(rel(q, rq), rel(k, rk), rel(v, rv), cache_err)
    # paged decode: scattered pages, ragged lengths (one past a partition edge), a padding row of length 1
    kc, vc = rnd(blocks * 4, bs, hkv, head_dim), rnd(blocks * 4, bs, hkv, head_dim)
    perm = torch.randperm(blocks * 4, generator=gen)
    tables = perm[:4 * blocks].view(4, blocks).to(device=device, dtype=torch.int32)
    seq_lens = torch.tensor([1, 65, 190, blocks * bs], dtype=torch.int32, device=device)
    qd = rnd(4, hq, head_dim)
    got = paged_decode(qd, kc, vc, tables, seq_lens, head_dim ** -0.5)
    err["paged_decode"] = rel(got, ref_paged_decode(qd, kc, vc, tables, seq_lens, head_dim ** -0.5))
    short = tables[:, :1].contiguous(), torch.tensor([1, 5, 16, 9], dtype=torch.int32, device=device)  # one partition
    got = paged_decode(qd, kc, vc, *short, head_dim ** -0.5)
    err["paged_decode"] = max(err["paged_decode"], rel(got, ref_paged_decode(qd, kc, vc, *short, head_dim ** -0.5)))
    return err
