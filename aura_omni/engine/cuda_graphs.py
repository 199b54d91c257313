"""CUDA graphs for decode steps: the backbone over B one-token sequences, captured per batch size.

A decode step of a small batch is hundreds of tiny kernel launches; replaying a captured graph makes
it one launch. Inputs live in static buffers sized for the largest captured batch; a batch of b
sequences replays the graph of the smallest captured size >= b, the extra rows pointing at a
scratch KV block (`pad_slot`) so they never touch a real sequence's cache. The attention inside is
the host-sync-free paged decode of layers/attention.py, gathering up to `max_blocks` pages per row.
"""

import logging

import torch

from aura_omni.layers.attention import AttentionMetadata
from aura_omni.models.qwen3 import Qwen3Model

log = logging.getLogger(__name__)


class DecodeGraphs:
    def __init__(self, backbone: Qwen3Model, batch_sizes: list[int], max_blocks: int, pad_block: int,
                 block_size: int, hidden_size: int, dtype: torch.dtype, device: torch.device, mrope: bool):
        self.backbone = backbone
        self.batch_sizes = sorted(batch_sizes)
        self.max_blocks = max_blocks
        self.pad_block = pad_block
        self.block_size = block_size
        n = self.batch_sizes[-1]
        self.embeds = torch.zeros(n, hidden_size, dtype=dtype, device=device)
        self.positions = torch.zeros((3, n) if mrope else (n,), dtype=torch.long, device=device)
        self.slot_mapping = torch.full((n,), pad_block * block_size, dtype=torch.long, device=device)
        self.block_tables = torch.full((n, max_blocks), pad_block, dtype=torch.int32, device=device)
        self.seq_lens = torch.ones(n, dtype=torch.int32, device=device)
        self.cu = torch.arange(n + 1, dtype=torch.int32, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self._capture(device)

    def _meta(self, b: int) -> AttentionMetadata:
        return AttentionMetadata(self.cu[:b + 1], [1] * b, [1] * b, self.slot_mapping[:b], self.block_tables[:b],
                                 self.seq_lens[:b], self.max_blocks * self.block_size)

    @torch.inference_mode()
    def _capture(self, device: torch.device) -> None:
        pool = None
        for b in reversed(self.batch_sizes):  # largest first, so smaller graphs reuse its memory pool
            pos = self.positions[..., :b]
            for _ in range(2):  # warm-up outside the graph (lazy inits, cuBLAS workspaces)
                self.backbone(self.embeds[:b], pos, self._meta(b))
            torch.cuda.synchronize(device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[b] = self.backbone(self.embeds[:b], pos, self._meta(b))
            pool = graph.pool()
            self.graphs[b] = graph
        log.info("captured decode CUDA graphs for batch sizes %s (up to %d tokens of context)",
                 self.batch_sizes, self.max_blocks * self.block_size)

    def fits(self, batch: int, max_blocks: int) -> bool:
        return batch <= self.batch_sizes[-1] and max_blocks <= self.max_blocks

    def run(self, embeds: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        b = embeds.shape[0]
        g = next(s for s in self.batch_sizes if s >= b)
        self.embeds[:b].copy_(embeds)
        self.positions[..., :b].copy_(positions)
        self.slot_mapping[:b].copy_(meta.slot_mapping)
        self.slot_mapping[b:g].fill_(self.pad_block * self.block_size)
        w = meta.block_tables.shape[1]
        self.block_tables[:b, :w].copy_(meta.block_tables)
        self.block_tables[:b, w:].fill_(self.pad_block)
        self.block_tables[b:g].fill_(self.pad_block)
        self.seq_lens[:b].copy_(meta.seq_lens)
        self.seq_lens[b:g].fill_(1)
        self.graphs[g].replay()
        return self.outputs[g][:b]
