"""One launch for the whole attention of a decode step over a short paged context: q/k RMSNorm, RoPE, the K/V
cache write and the attention itself (the code predictor's steps: at most 16 positions, 80 steps a frame).

Unfused, that is `triton_ops.qk_norm_rope` then `triton_ops.paged_decode`, two launches per layer per step; at the
code predictor's sizes each launch costs more than its work. This kernel does the same arithmetic with the same
roundings (the norm and rotation of `qk_norm_rope`, one partition of `paged_decode` over the same key blocks; only
fp32 summation orders can differ): the new K/V go to the cache, a CTA barrier makes them visible, and the keys are
then read back from the pages like every other position.

One program per (sequence, KV head) takes the KV head's whole GQA group of query heads. Contexts longer than
`MAX_CONTEXT` keep the two-kernel path (its split over the context needs the second, reducing launch).
`self_check` compares it with `triton_ops`' torch references on a device.
"""

import torch

from aura_omni.layers import pdl, triton_ops
from aura_omni.layers.device import on_first_tensor_device

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines and CI: the unfused path runs instead
    triton = tl = None

AVAILABLE = triton is not None
MAX_CONTEXT = 64  # table width (tokens) the kernel takes: one block of keys, as `paged_decode`'s single partition


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


if AVAILABLE:
    from aura_omni.layers.pdl import begin
    from aura_omni.layers.triton_ops import attend_keys

    @triton.jit
    def _norm_rope(src, w_ptr, cos_row, sin_row, eps, rows, d, GROUP: tl.constexpr, D: tl.constexpr, dt):
        """Rows `rows` (heads) of D values at `src + rows * D`: RMSNorm then rotate-half RoPE, rounded like
        `_qk_norm_rope_kernel` (which works on the two halves; here each column reads its rotation partner)."""
        mask = rows[:, None] < GROUP
        partner = (d + D // 2) % D
        x = tl.load(src + rows[:, None] * D + d[None, :], mask=mask, other=0.0).to(tl.float32)
        xp = tl.load(src + rows[:, None] * D + partner[None, :], mask=mask, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)[:, None]
        n = ((x * r).to(dt).to(tl.float32) * tl.load(w_ptr + d).to(tl.float32)[None, :]).to(dt).to(tl.float32)
        n_p = ((xp * r).to(dt).to(tl.float32) * tl.load(w_ptr + partner).to(tl.float32)[None, :]).to(dt).to(tl.float32)
        c = tl.load(cos_row + d).to(dt).to(tl.float32)[None, :]
        s = tl.load(sin_row + d).to(dt).to(tl.float32)[None, :]
        sign = tl.where(d < D // 2, -1.0, 1.0)[None, :]
        return ((n * c).to(dt).to(tl.float32) + sign * (n_p * s).to(dt).to(tl.float32)).to(dt)

    @triton.jit(do_not_specialize=["stride_btb"])  # eager decode steps differ in table width: one variant
    def _short_attention_kernel(qkv_ptr, stride_tok, cos_ptr, sin_ptr, stride_cs, qw_ptr, kw_ptr, kc_ptr, vc_ptr,
                                slot_ptr, bt_ptr, sl_ptr, out_ptr, eps, scale, stride_kb, stride_kt, stride_kh,
                                stride_btb, stride_ob, stride_oh, HQ: tl.constexpr, HKV: tl.constexpr,
                                GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr, BS: tl.constexpr,
                                BLOCK_N: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr):
        begin(PDL)
        b = tl.program_id(0).to(tl.int64)
        kvh = tl.program_id(1)
        dt = out_ptr.dtype.element_ty
        d = tl.arange(0, D)
        g = tl.arange(0, GROUP_PAD)
        base = qkv_ptr + b * stride_tok
        cos_row, sin_row = cos_ptr + b * stride_cs, sin_ptr + b * stride_cs
        # the new K (one row) and V of this KV head into the cache
        one = tl.arange(0, 16)  # tl.dot-free, but 2-D helpers want a row axis: row 0 is the head, the rest masked
        k = _norm_rope(base + (HQ + kvh) * D, kw_ptr, cos_row, sin_row, eps, one, d, 1, D, dt)
        slot = tl.load(slot_ptr + b).to(tl.int64)
        at = (slot // BS) * stride_kb + (slot % BS) * stride_kt + kvh * stride_kh
        tl.store(kc_ptr + at + one[:, None] * 0 + d[None, :], k.to(kc_ptr.dtype.element_ty), mask=one[:, None] < 1)
        v = tl.load(base + (HQ + HKV + kvh) * D + d)
        tl.store(vc_ptr + at + d, v.to(vc_ptr.dtype.element_ty))
        tl.debug_barrier()  # the block's threads see the new K/V before reading the pages back
        q = _norm_rope(base + kvh * GROUP * D, qw_ptr, cos_row, sin_row, eps, g, d, GROUP, D, dt)
        seq_len = tl.load(sl_ptr + b).to(tl.int32)
        m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, D], tl.float32)
        qpos = tl.zeros([GROUP_PAD], tl.int32) + seq_len - 1  # the new token sees every key
        # as paged_decode's single partition: the same key blocks in the same order
        m_i, l_i, acc = attend_keys(0, seq_len, q, qpos, m_i, l_i, acc, kc_ptr, vc_ptr, bt_ptr + b * stride_btb,
                                    seq_len, kvh, d, scale, stride_kb, stride_kt, stride_kh, BS, BLOCK_N, IEEE, True,
                                    False)
        heads = kvh * GROUP + g
        tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :], (acc / l_i[:, None]).to(dt),
                 mask=g[:, None] < GROUP)


def fits(block_tables: torch.Tensor, block_size: int) -> bool:
    return block_tables.shape[1] * block_size <= MAX_CONTEXT


@on_first_tensor_device
def short_attention(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, q_weight: torch.Tensor,
                    k_weight: torch.Tensor, eps: float, hq: int, hkv: int, d: int, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, slots: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor,
                    scale: float) -> torch.Tensor:
    """qkv [B, (hq+2hkv)*d] of one new token per sequence -> attention output [B, hq, d]; the new K/V land at
    `slots`. seq_lens count the new token; the tables must `fit` (at most MAX_CONTEXT tokens wide)."""
    b = qkv.shape[0]
    group = hq // hkv
    out = torch.empty(b, hq, d, dtype=qkv.dtype, device=qkv.device)
    _short_attention_kernel[(b, hkv)](
        qkv, qkv.stride(0), cos, sin, cos.stride(0), q_weight, k_weight, k_cache, v_cache, slots, block_tables,
        seq_lens, out, eps, scale, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        out.stride(0), out.stride(1), HQ=hq, HKV=hkv, GROUP=group, GROUP_PAD=max(16, _pow2(group)), D=d,
        BS=k_cache.shape[1], BLOCK_N=MAX_CONTEXT, IEEE=qkv.dtype == torch.float32, num_warps=4,
        **pdl.flags(qkv.device))
    return out


def self_check(device: torch.device, dtype: torch.dtype, head_dim: int = 64, hq: int = 8, hkv: int = 2) -> float:
    """Max |kernel - (qk_norm_rope + paged decode) references| relative to their scale, cache writes included:
    ragged lengths over scattered pages, one of them a single token."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    rnd = lambda *s, scale=1.0: (torch.randn(*s, generator=gen) * scale).to(device, dtype)
    bs, blocks, b = 16, 12, 4
    qkv = rnd(b, (hq + 2 * hkv) * head_dim)
    ang = torch.arange(b, dtype=torch.float32)[:, None] * torch.rand(head_dim // 2, generator=gen)[None]
    cos, sin = torch.cat([ang, ang], -1).cos().to(device), torch.cat([ang, ang], -1).sin().to(device)
    qw, kw = rnd(head_dim, scale=0.5) + 1, rnd(head_dim, scale=0.5) + 1
    kc, vc = rnd(blocks, bs, hkv, head_dim), rnd(blocks, bs, hkv, head_dim)
    tables = torch.randperm(blocks, generator=gen)[:b * 3].view(b, 3).to(device=device, dtype=torch.int32)
    seq_lens = torch.tensor([1, 16, 17, 48], dtype=torch.int32, device=device)
    last = (seq_lens - 1).long()
    slots = tables.long().gather(1, (last // bs)[:, None])[:, 0] * bs + last % bs
    kc_ref, vc_ref = kc.clone(), vc.clone()
    got = short_attention(qkv, cos, sin, qw, kw, 1e-6, hq, hkv, head_dim, kc, vc, slots, tables, seq_lens,
                          head_dim ** -0.5)
    q, k, v = triton_ops.ref_qk_norm_rope(qkv, cos, sin, qw, kw, 1e-6, hq, hkv, head_dim)
    kc_ref.view(-1, hkv, head_dim)[slots] = k
    vc_ref.view(-1, hkv, head_dim)[slots] = v
    want = triton_ops.ref_paged_decode(q, kc_ref, vc_ref, tables, seq_lens, head_dim ** -0.5)
    if not torch.isfinite(got).all():
        return float("inf")
    err = (got.float() - want).abs().max() / want.abs().max().clamp_min(1e-6)
    cache = max((kc.float() - kc_ref.float()).abs().max(), (vc.float() - vc_ref.float()).abs().max())
    return float(max(err, cache / kc_ref.float().abs().max()))
