"""Attention over a flattened ("varlen") batch, with an optional paged KV cache.

Every model forward sees tokens of several sequences concatenated on one axis ([N, ...]);
`AttentionMetadata` says where each sequence's new tokens start, how many tokens it already has
cached, and which cache slots the new K/V go to. The engine builds the metadata; models only pass
it through. Without a cache (`slot_mapping is None`) every sequence attends causally to its own
new tokens only: that is the plain prefill used by parity tests and the code predictor.

The KV cache of one layer is two tensors [num_blocks, block_size, num_kv_heads, head_dim] that the
engine allocates and assigns to `Attention.k_cache` / `Attention.v_cache`.

Backends (chosen once per process by `set_attention_backend`, see aura_omni/layers/attention_backend.py):
- the per-sequence SDPA loop below is the reference and runs everywhere (CPU, CI);
- when the engine sets `seq_lens` (a device tensor), decode-only batches take a batched paged decode
  (gather the block tables, one masked SDPA call) that never syncs with the host, so CUDA graphs can
  capture it;
- on CUDA, torch's flash `varlen_attn` handles cache-less mixed-length prefill, and, where it accepts
  `block_table` (torch >= 2.13), every cached step (prefill chunks and decode) straight from the pages;
  without `block_table` (torch 2.11), a cached step that is not pure decode (prefix-cached turns,
  chunked prefill, prefill next to decodes) gathers every sequence's keys with one index (`kv_slots`,
  built once per step by the engine) and makes one flash call for the whole batch;
- on CUDA with Triton, pure decode reads the pages in place (layers/triton_ops.py `paged_decode`);
- a step described by device tensors alone (`query_tiles` set: graph-captured prefill) runs
  layers/triton_prefill.py, or its torch reference off CUDA.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers import attention_backend as backend


@dataclass
class AttentionMetadata:
    cu_seqlens_q: torch.Tensor  # [B+1] int32: offsets of each sequence's new tokens in the flat axis
    query_lens: list[int]  # new tokens per sequence (host copy)
    context_lens: list[int]  # tokens already in the cache per sequence, before this step (host copy)
    slot_mapping: torch.Tensor | None = None  # [N] int64 cache slot per new token; None = no cache
    block_tables: torch.Tensor | None = None  # [B, max_blocks] int32 cache blocks of each sequence
    seq_lens: torch.Tensor | None = None  # [B] int32 on device: context + new tokens (engine-built steps)
    max_seq_len: int = 0  # host copy of max(seq_lens), for the flash kernels
    # cached steps on torch without paged varlen: cache slot of every key (context + new) of every sequence,
    # sequence after sequence, and their offsets [B+1] int32 (engine-built; None elsewhere)
    kv_slots: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    # set for a step described by the device tensors alone (a graph-captured prefill, engine/prefill_graphs.py):
    # its (sequence, tile) list for layers/triton_prefill.py; the host lists above then describe nothing
    query_tiles: torch.Tensor | None = None

    def __post_init__(self):  # host facts asked by every layer: computed once per step
        static = self.query_tiles is not None
        self._decode = not static and all(q == 1 for q in self.query_lens)
        self._has_context = static or any(self.context_lens)

    @property
    def is_decode(self) -> bool:
        return self._decode

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def is_uniform_prefill(self) -> bool:
        """All sequences start empty and have the same length: one batched SDPA call suffices."""
        return not any(self.context_lens) and len(set(self.query_lens)) == 1

    @staticmethod
    def prefill(seq_lens: list[int], device: torch.device | str = "cpu") -> "AttentionMetadata":
        """Cache-less causal attention over whole sequences."""
        cu = torch.zeros(len(seq_lens) + 1, dtype=torch.int32)
        cu[1:] = torch.tensor(seq_lens, dtype=torch.int32).cumsum(0)
        return AttentionMetadata(cu.to(device), list(seq_lens), [0] * len(seq_lens))


class Attention(nn.Module):
    """Scaled dot-product attention with GQA; K/V written to and read from the paged cache if bound."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float | None = None):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale if scale is not None else head_dim**-0.5
        self.k_cache: torch.Tensor | None = None
        self.v_cache: torch.Tensor | None = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata,
                kv_written: bool = False) -> torch.Tensor:
        """q: [N, Hq, D], k/v: [N, Hkv, D] -> [N, Hq*D]. `kv_written`: the caller already stored k/v in the cache."""
        n = q.shape[0]
        use_cache = meta.slot_mapping is not None and self.k_cache is not None
        if use_cache:
            kc = self.k_cache.view(-1, self.num_kv_heads, self.head_dim)
            vc = self.v_cache.view(-1, self.num_kv_heads, self.head_dim)
            if not kv_written:
                kc.index_copy_(0, meta.slot_mapping, k.to(kc.dtype))
                vc.index_copy_(0, meta.slot_mapping, v.to(vc.dtype))
            if meta.seq_lens is not None:
                if meta.query_tiles is not None:
                    return backend.paged_prefill(q, self.k_cache, self.v_cache, meta, self.scale).reshape(n, -1)
                if backend.paged_varlen_enabled(q):
                    return backend.paged_varlen(q, self.k_cache, self.v_cache, meta, self.scale).reshape(n, -1)
                if meta.is_decode:
                    if backend.triton_decode_enabled(q):
                        return backend.triton_paged_decode(q, self.k_cache, self.v_cache, meta, self.scale).reshape(n, -1)
                    return self._paged_decode(q, meta).reshape(n, -1)
                if meta.kv_slots is not None and meta._has_context and backend.varlen_cached_enabled(q):
                    keys, values = kc.index_select(0, meta.kv_slots), vc.index_select(0, meta.kv_slots)
                    return backend.varlen_cached(q, keys, values, meta, self.scale).reshape(n, -1)
        if not use_cache or not meta._has_context:
            # flash first on CUDA: SDPA's cuDNN backend builds a plan per new prompt length (~60 ms each)
            if backend.varlen_enabled(q):
                return backend.varlen_prefill(q, k, v, meta, self.scale).reshape(n, -1)
            if meta.is_uniform_prefill:
                out = self._uniform_prefill(q, k, v, meta.num_seqs)
                return out.reshape(n, -1)
        out = torch.empty_like(q)
        starts = meta.cu_seqlens_q.tolist()
        for i, (qlen, ctx) in enumerate(zip(meta.query_lens, meta.context_lens)):
            s, e = starts[i], starts[i] + qlen
            if use_cache and ctx:
                keys, values = self._gather(meta.block_tables[i], ctx + qlen)
            else:
                keys, values = k[s:e], v[s:e]
            out[s:e] = self._attend(q[s:e], keys, values, ctx)
        return out.reshape(n, -1)

    def _paged_decode(self, q: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """One new token per sequence over its whole cached context: gather pages, mask past seq_lens.

        No host syncs (shapes come from block_tables), so a CUDA graph can capture it.
        """
        b = q.shape[0]
        blocks = meta.block_tables.long()  # [B, W]
        width = blocks.shape[1] * self.k_cache.shape[1]
        keys = self.k_cache[blocks].view(b, width, self.num_kv_heads, self.head_dim).transpose(1, 2)
        values = self.v_cache[blocks].view(b, width, self.num_kv_heads, self.head_dim).transpose(1, 2)
        valid = torch.arange(width, device=q.device)[None, :] < meta.seq_lens[:, None]  # [B, W*bs]
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2), keys.to(q.dtype), values.to(q.dtype), attn_mask=valid[:, None, None, :],
            scale=self.scale, enable_gqa=self.num_heads != self.num_kv_heads,
        )
        return out.squeeze(2)

    def _gather(self, block_table: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        block_size = self.k_cache.shape[1]
        nblocks = (length + block_size - 1) // block_size
        blocks = block_table[:nblocks].long()
        keys = self.k_cache[blocks].reshape(-1, self.num_kv_heads, self.head_dim)[:length]
        values = self.v_cache[blocks].reshape(-1, self.num_kv_heads, self.head_dim)[:length]
        return keys, values

    def _uniform_prefill(self, q, k, v, num_seqs: int) -> torch.Tensor:
        b = num_seqs
        q = q.view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, -1, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, -1, self.num_kv_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q, k.to(q.dtype), v.to(q.dtype), is_causal=q.shape[2] > 1, scale=self.scale,
            enable_gqa=self.num_heads != self.num_kv_heads,
        )
        return out.transpose(1, 2)

    def _attend(self, q, keys, values, context_len: int) -> torch.Tensor:
        """Causal attention of q (positions context_len..) over keys/values (positions 0..)."""
        qlen, klen = q.shape[0], keys.shape[0]
        qh = q.transpose(0, 1).unsqueeze(0)
        kh = keys.to(q.dtype).transpose(0, 1).unsqueeze(0)
        vh = values.to(q.dtype).transpose(0, 1).unsqueeze(0)
        mask = None
        if qlen > 1:
            qpos = torch.arange(context_len, context_len + qlen, device=q.device)
            mask = torch.arange(klen, device=q.device)[None, :] <= qpos[:, None]
        out = F.scaled_dot_product_attention(
            qh, kh, vh, attn_mask=mask, scale=self.scale, enable_gqa=self.num_heads != self.num_kv_heads
        )
        return out[0].transpose(0, 1)
