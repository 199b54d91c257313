"""Paged prefill attention in Triton: any cached step (prefix-cached prompts, chunks, decodes among them) read
straight from the KV pages, with no host sync, so a CUDA graph can capture a whole prefill step.

Sequence b's new queries are rows cu_seqlens_q[b]..cu_seqlens_q[b+1] of q; they sit at the end of its
seq_lens[b] keys (already written to the pages) and attend causally. One program takes one tile, BLOCK_M query
tokens of one sequence, times the query heads of one KV head (GQA groups share each K/V load), and one of
SPLIT parts of the keys the tile sees: a turn of a long conversation has few tiles (a few hundred new tokens)
over many keys (the whole history), and one program per tile would leave most SMs idle. A part is at least
_MIN_PART keys, so short contexts use one part and the other programs exit; every part writes its softmax
partials (running max, sum, weighted values), which `triton_ops`' decode reduce combines (empty parts carry a
-inf max and are skipped). Keys every query of the tile sees (all but the last blocks) are read with no mask.

The tiles come as a device list of (sequence, tile) pairs (`query_tiles`) whose length only bounds the step, so
a graph captured at a padded token count replays any step that fits: entries past the step's tiles hold -1 and
exit, and rows past cu_seqlens_q[-1] (padding) hold garbage that no real row reads.
`ref_paged_prefill` is the torch reference (and the path off CUDA); `self_check` compares the two on a device.
"""

import numpy as np
import torch
import torch.nn.functional as F

from aura_omni.layers import pdl, triton_ops
from aura_omni.layers.device import on_first_tensor_device

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines and CI: the torch reference runs instead
    triton = tl = None

AVAILABLE = triton is not None
_ROWS = 128  # query rows (tokens x heads of a group) per program
_BLOCK_N = 64  # keys per inner iteration
_SPLIT = 4  # key parts per tile
_MIN_PART = 256  # keys: shorter parts cost more in partials than they gain in parallelism


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


if AVAILABLE:
    from aura_omni.layers.pdl import begin
    from aura_omni.layers.triton_ops import attend_keys

    @triton.jit
    def _paged_prefill_kernel(q_ptr, kc_ptr, vc_ptr, m_ptr, l_ptr, acc_ptr, cu_ptr, sl_ptr, bt_ptr, tiles_ptr, scale,
                              stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_btb,
                              HQ: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                              D: tl.constexpr, BS: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
                              MIN_PART: tl.constexpr, IEEE: tl.constexpr, PIPELINE: tl.constexpr, PDL: tl.constexpr):
        begin(PDL)
        kvh = tl.program_id(1)
        part = tl.program_id(2)
        b = tl.load(tiles_ptr + 2 * tl.program_id(0)).to(tl.int64)
        tile = tl.load(tiles_ptr + 2 * tl.program_id(0) + 1)
        if b >= 0:
            q_start = tl.load(cu_ptr + b).to(tl.int32)
            q_len = tl.load(cu_ptr + b + 1).to(tl.int32) - q_start
            seq_len = tl.load(sl_ptr + b).to(tl.int32)
            context = seq_len - q_len
            r = tl.arange(0, BLOCK_M * GROUP_PAD)
            tok = tile * BLOCK_M + r // GROUP_PAD  # query token within the sequence
            head = kvh * GROUP + r % GROUP_PAD
            valid = (tok < q_len) & (r % GROUP_PAD < GROUP)
            # a padded row attends like the sequence's last token, so its softmax stays finite; it is not stored
            qpos = context + tl.minimum(tok, q_len - 1)
            d = tl.arange(0, D)
            rows = (q_start + tok).to(tl.int64)
            end = tl.minimum(seq_len, context + (tile + 1) * BLOCK_M)  # the tile's last query sees keys < end
            part_len = tl.maximum(MIN_PART, tl.cdiv(tl.cdiv(end, SPLIT), BLOCK_N) * BLOCK_N)
            lo = part * part_len
            hi = tl.minimum(lo + part_len, end)
            # keys below the tile's first query are seen by all its rows: whole blocks of them need no mask
            bulk = tl.maximum(lo, tl.minimum(hi, (context + tile * BLOCK_M) // BLOCK_N * BLOCK_N))
            m_i = tl.full([BLOCK_M * GROUP_PAD], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_M * GROUP_PAD], tl.float32)
            acc = tl.zeros([BLOCK_M * GROUP_PAD, D], tl.float32)
            at = (rows * HQ + head) * SPLIT + part
            if lo < end:
                q = tl.load(q_ptr + rows[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                            mask=valid[:, None], other=0.0)
                table = bt_ptr + b * stride_btb
                m_i, l_i, acc = attend_keys(lo, bulk, q, qpos, m_i, l_i, acc, kc_ptr, vc_ptr, table, end, kvh, d,
                                            scale, stride_kb, stride_kt, stride_kh, BS, BLOCK_N, IEEE, False, PIPELINE)
                m_i, l_i, acc = attend_keys(bulk, hi, q, qpos, m_i, l_i, acc, kc_ptr, vc_ptr, table, end, kvh, d,
                                            scale, stride_kb, stride_kt, stride_kh, BS, BLOCK_N, IEEE, True, PIPELINE)
                tl.store(acc_ptr + at[:, None] * D + d[None, :], acc, mask=valid[:, None])
            tl.store(m_ptr + at, m_i, mask=valid)  # an empty part: max -inf, sum 0; the reduce skips its values
            tl.store(l_ptr + at, l_i, mask=valid)


def block_m(num_heads: int, num_kv_heads: int) -> int:
    """Query tokens per tile for this head layout (a tile holds _ROWS rows of tokens x padded GQA group)."""
    return max(1, _ROWS // _pow2(num_heads // num_kv_heads))


def query_tiles(query_lens: np.ndarray, tile_tokens: int, size: int) -> np.ndarray:
    """[size, 2] int32 (sequence, tile) of every tile of `tile_tokens` queries, then (-1, 0) rows."""
    per_seq = -(-query_lens // tile_tokens)
    seqs = np.repeat(np.arange(len(query_lens)), per_seq)
    out = np.full((size, 2), -1, dtype=np.int32)
    out[:, 1] = 0
    out[:len(seqs), 0] = seqs
    out[:len(seqs), 1] = np.arange(len(seqs)) - np.repeat(np.cumsum(per_seq) - per_seq, per_seq)
    return out


def max_tiles(tokens: int, seqs: int, tile_tokens: int) -> int:
    """Most tiles a step of `tokens` queries over `seqs` sequences can have."""
    return tokens // tile_tokens + seqs


@on_first_tensor_device
def paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  seq_lens: torch.Tensor, block_tables: torch.Tensor, scale: float, tiles: torch.Tensor
                  ) -> torch.Tensor:
    """q [N, Hq, D]; caches [blocks, bs, Hkv, D]; cu_seqlens_q [B+1], seq_lens [B], block_tables [B, W] and the
    `query_tiles` of block_m(Hq, Hkv) tokens [T, 2], int32 on the device -> [N, Hq, D]."""
    n, hq, d = q.shape
    _, bs, hkv, _ = k_cache.shape
    group = hq // hkv
    m = torch.empty(n * hq * _SPLIT, dtype=torch.float32, device=q.device)
    l_ = torch.empty_like(m)
    acc = torch.empty(n * hq * _SPLIT * d, dtype=torch.float32, device=q.device)
    _paged_prefill_kernel[(tiles.shape[0], hkv, _SPLIT)](
        q, k_cache, v_cache, m, l_, acc, cu_seqlens_q, seq_lens, block_tables, tiles, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        HQ=hq, GROUP=group, GROUP_PAD=_pow2(group), BLOCK_M=block_m(hq, hkv), D=d, BS=bs, BLOCK_N=_BLOCK_N,
        SPLIT=_SPLIT, MIN_PART=_MIN_PART, IEEE=q.dtype == torch.float32, PIPELINE=not triton_ops.INTERPRETED,
        num_warps=8, **pdl.flags(q.device))
    return triton_ops.reduce_parts(m, l_, acc, torch.empty_like(q), _SPLIT)


def supports(head_dim: int) -> bool:
    """Power-of-two head_dim >= 16 (tl.arange / tl.dot)."""
    return AVAILABLE and head_dim >= 16 and head_dim & (head_dim - 1) == 0


def ref_paged_prefill(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale) -> torch.Tensor:
    """The same semantics in torch, one sequence at a time (host syncs: CPU and checks only). Rows outside every
    sequence come back as zeros."""
    out = torch.zeros_like(q)
    bs, hkv, d = k_cache.shape[1:]
    cu, lens = cu_seqlens_q.tolist(), seq_lens.tolist()
    for i, n in enumerate(lens):
        s, e = cu[i], cu[i + 1]
        if e == s:
            continue
        blocks = block_tables[i, :-(-n // bs)].long()
        keys = k_cache[blocks].reshape(-1, hkv, d)[:n].transpose(0, 1)[None].to(q.dtype)
        vals = v_cache[blocks].reshape(-1, hkv, d)[:n].transpose(0, 1)[None].to(q.dtype)
        qpos = torch.arange(n - (e - s), n, device=q.device)
        mask = torch.arange(n, device=q.device)[None, :] <= qpos[:, None]
        o = F.scaled_dot_product_attention(q[s:e].transpose(0, 1)[None], keys, vals, attn_mask=mask, scale=scale,
                                           enable_gqa=True)
        out[s:e] = o[0].transpose(0, 1)
    return out


def self_check(device: torch.device, dtype: torch.dtype, head_dim: int = 64, hq: int = 8, hkv: int = 2) -> float:
    """Max |kernel - reference| relative to the reference's scale, over a ragged batch: a prefix-cached prompt
    longer than one tile over a context split into parts, with a tile across a part boundary (its first rows see no
    key of the second part), a cold one, a decode row, a padded (empty) sequence and padding rows at the end."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=gen).to(device, dtype)
    bs, blocks = 16, 64
    kc, vc = rnd(blocks, bs, hkv, head_dim), rnd(blocks, bs, hkv, head_dim)
    tables = torch.randint(0, blocks, (4, 48), generator=gen).to(device=device, dtype=torch.int32)
    qlens, contexts = [37, 20, 1, 0], [240, 0, 129, 0]  # rows 240..271: part 2 starts at 256
    cu = torch.tensor([0, 37, 57, 58, 58], dtype=torch.int32, device=device)
    seq_lens = torch.tensor([c + n for c, n in zip(contexts, qlens)], dtype=torch.int32, device=device)
    q = rnd(64, hq, head_dim)
    tile = block_m(hq, hkv)
    tiles = torch.from_numpy(query_tiles(np.array(qlens), tile, max_tiles(64, 4, tile))).to(device)
    got = paged_prefill(q, kc, vc, cu, seq_lens, tables, head_dim ** -0.5, tiles)[:58].float()
    want = ref_paged_prefill(q.float(), kc.float(), vc.float(), cu, seq_lens, tables, head_dim ** -0.5)[:58]
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))
