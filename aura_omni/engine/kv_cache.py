"""Paged KV cache: fixed-size blocks shared by all sequences of one model, handed out by a free list.

The cache for each attention layer is a pair of tensors [num_blocks, block_size, kv_heads, head_dim]
bound to the layer's `Attention.k_cache` / `v_cache`. A sequence owns a block table (list of block
ids); token position p lives in slot block_table[p // block_size] * block_size + p % block_size.

`allocate_kv_cache` is what the engine uses (its block bookkeeping is engine/block_manager.py);
`KVCache` + `CachedSequence` are the minimal standalone form, kept for simple drivers and tests.
"""

from dataclasses import dataclass, field

import torch

from aura_omni.layers.attention import Attention, AttentionMetadata


class BlockAllocator:
    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.free_blocks: list[int] = list(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    def allocate(self, n: int) -> list[int]:
        if n > len(self.free_blocks):
            raise MemoryError(f"KV cache exhausted: need {n} blocks, {len(self.free_blocks)} free")
        out, self.free_blocks = self.free_blocks[:n], self.free_blocks[n:]
        return out

    def free(self, blocks: list[int]) -> None:
        self.free_blocks.extend(blocks)


@dataclass
class CachedSequence:
    """Cache bookkeeping of one sequence: its blocks and how many tokens they hold."""

    block_table: list[int] = field(default_factory=list)
    num_cached: int = 0


def allocate_kv_cache(layers: list[Attention], num_blocks: int, block_size: int,
                      dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
    """Give every attention layer its [num_blocks, block_size, kv_heads, head_dim] K and V pages."""
    for layer in layers:
        shape = (num_blocks, block_size, layer.num_kv_heads, layer.head_dim)
        layer.k_cache = torch.zeros(shape, dtype=dtype, device=device)
        layer.v_cache = torch.zeros(shape, dtype=dtype, device=device)


def free_kv_cache(layers: list[Attention]) -> None:
    for layer in layers:
        layer.k_cache = layer.v_cache = None


class KVCache:
    def __init__(self, layers: list[Attention], num_blocks: int, block_size: int = 16,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        self.block_size = block_size
        self.device = torch.device(device)
        self.allocator = BlockAllocator(num_blocks)
        allocate_kv_cache(layers, num_blocks, block_size, dtype, self.device)

    def blocks_needed(self, seq: CachedSequence, new_tokens: int) -> int:
        total = seq.num_cached + new_tokens
        return max(0, -(-total // self.block_size) - len(seq.block_table))

    def reserve(self, seq: CachedSequence, new_tokens: int) -> None:
        seq.block_table.extend(self.allocator.allocate(self.blocks_needed(seq, new_tokens)))

    def release(self, seq: CachedSequence) -> None:
        self.allocator.free(seq.block_table)
        seq.block_table, seq.num_cached = [], 0

    def metadata(self, seqs: list[CachedSequence], query_lens: list[int]) -> AttentionMetadata:
        """Reserve room for each sequence's new tokens and describe the step; advances num_cached."""
        bs = self.block_size
        slots, cu = [], [0]
        for seq, q in zip(seqs, query_lens):
            self.reserve(seq, q)
            for p in range(seq.num_cached, seq.num_cached + q):
                slots.append(seq.block_table[p // bs] * bs + p % bs)
            cu.append(cu[-1] + q)
        width = max(len(s.block_table) for s in seqs)
        tables = torch.tensor([s.block_table + [0] * (width - len(s.block_table)) for s in seqs], dtype=torch.int32)
        context = [s.num_cached for s in seqs]
        for seq, q in zip(seqs, query_lens):
            seq.num_cached += q
        return AttentionMetadata(
            cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=self.device),
            query_lens=list(query_lens),
            context_lens=context,
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=self.device),
            block_tables=tables.to(self.device),
        )
