"""Paged KV cache pages: for each attention layer a pair of tensors [num_blocks, block_size, kv_heads, head_dim]
bound to the layer's `Attention.k_cache` / `v_cache`. A sequence owns a block table (list of block ids;
engine/block_manager.py hands them out); token position p lives in slot
block_table[p // block_size] * block_size + p % block_size.
"""

import torch

from aura_omni.layers.attention import Attention


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
