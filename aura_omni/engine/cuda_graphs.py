"""CUDA graphs for decode steps, captured per batch size.

A decode step of a small batch is hundreds of tiny kernel launches; replaying a captured graph makes
it one launch. For a plain causal LM (`CausalLMAdapter`) the graph holds the whole step: token
embedding, backbone, final norm, LM head and the greedy argmax; other adapters (the Talker) get the
backbone over the embeddings they build. Each captured size b has one static device buffer of step
inputs (ids, positions, cache slots, sequence lengths, block tables) that the runner fills with one
host-to-device copy; a batch of b' <= b sequences replays the smallest captured b, its padding rows
pointing at a scratch KV block (`pad_block`) so they never touch a real sequence's cache. Attention
inside is the host-sync-free paged decode of layers/attention.py over up to `max_blocks` pages per row.
"""

import logging
from typing import Callable

import numpy as np
import torch

from aura_omni.layers import cuda_graph
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.layers.device import on_device

log = logging.getLogger(__name__)


class StepLayout:
    """Byte layout of one decode step's inputs for b rows: ids, positions, slots (int64), seq_lens, tables (int32)."""

    def __init__(self, b: int, width: int):
        self.b, self.width = b, width
        sizes = [("ids", 8 * b), ("positions", 8 * b), ("slots", 8 * b), ("seq_lens", 4 * b), ("tables", 4 * b * width)]
        self.offsets, at = {}, 0
        for name, size in sizes:
            self.offsets[name] = (at, size)
            at += -(-size // 8) * 8  # keep every section 8-byte aligned
        self.nbytes = at

    def views(self, blob):
        """numpy or torch views of each section of a uint8 blob."""
        out = {}
        for name, (at, size) in self.offsets.items():
            part = blob[at:at + size]
            if isinstance(part, np.ndarray):
                part = part.view(np.int64 if name in ("ids", "positions", "slots") else np.int32)
            else:
                part = part.view(torch.int64 if name in ("ids", "positions", "slots") else torch.int32)
            out[name] = part.reshape(self.b, self.width) if name == "tables" else part
        return out


class DecodeGraphs:
    def __init__(self, step: Callable[[torch.Tensor, torch.Tensor, AttentionMetadata], tuple[torch.Tensor, ...]],
                 batch_sizes: list[int], max_blocks: int, pad_block: int, block_size: int, device: torch.device,
                 embeds_shape: tuple[int, torch.dtype] | None = None, mrope: bool = False):
        """`step(inputs, positions, meta)` -> output tensors; inputs are token ids and 1-D positions, or, when
        the adapter builds its own inputs, embeddings [b, H] of `embeds_shape = (H, dtype)` and its positions
        ([b], or [3, b] with `mrope`)."""
        self.step = step
        self.batch_sizes = sorted(batch_sizes)
        self.max_blocks = max_blocks
        self.pad_block = pad_block
        self.block_size = block_size
        self.device = device
        self.embeds_shape = embeds_shape
        self.layouts = {b: StepLayout(b, max_blocks) for b in self.batch_sizes}
        self.blobs: dict[int, torch.Tensor] = {}
        # two pinned host blobs per size, filled in turn: with async scheduling the previous step's upload may not have
        # run yet when the next step is filled
        self.host_blobs: dict[int, list[torch.Tensor]] = {}
        self._turn: dict[int, int] = {}
        self.inputs: dict[int, dict[str, torch.Tensor]] = {}
        self.embeds: dict[int, torch.Tensor] = {}
        self.positions: dict[int, torch.Tensor] = {}
        self.mrope = mrope
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, tuple[torch.Tensor, ...]] = {}
        self._capture()

    def _meta(self, b: int) -> AttentionMetadata:
        v = self.inputs[b]
        return AttentionMetadata(torch.arange(b + 1, dtype=torch.int32, device=self.device), [1] * b, [1] * b,
                                 v["slots"], v["tables"], v["seq_lens"], self.max_blocks * self.block_size)

    def _run_step(self, b: int):
        v = self.inputs[b]
        if self.embeds_shape is not None:
            return self.step(self.embeds[b], self.positions[b], self._meta(b))
        return self.step(v["ids"], v["positions"], self._meta(b))

    @torch.inference_mode()
    def _capture(self) -> None:
        pool, self.stream = None, cuda_graph.private_stream(self.device)
        cuda_graph.owns(self, self.graphs, [self.stream])
        for b in reversed(self.batch_sizes):  # largest first, so smaller graphs reuse its memory pool
            layout = self.layouts[b]
            self.host_blobs[b] = [torch.zeros(layout.nbytes, dtype=torch.uint8).pin_memory() for _ in range(2)]
            self._turn[b] = 0
            self.fill(b, [], [], [], [], [])
            self.blobs[b] = self.host_blobs[b][self._turn[b]].to(self.device)
            self.inputs[b] = layout.views(self.blobs[b])
            if self.embeds_shape is not None:
                hidden, dtype = self.embeds_shape
                self.embeds[b] = torch.zeros(b, hidden, dtype=dtype, device=self.device)
                self.positions[b] = torch.zeros((3, b) if self.mrope else (b,), dtype=torch.long, device=self.device)
            self.graphs[b], self.outputs[b] = cuda_graph.capture(lambda: self._run_step(b), self.device,
                                                                 self.stream, pool, warmups=2)
            pool = self.graphs[b].pool()
        log.info("captured decode CUDA graphs for batch sizes %s (up to %d tokens of context)",
                 self.batch_sizes, self.max_blocks * self.block_size)

    def fits(self, batch: int, max_blocks: int) -> bool:
        return batch <= self.batch_sizes[-1] and max_blocks <= self.max_blocks

    def size_for(self, batch: int) -> int:
        return next(s for s in self.batch_sizes if s >= batch)

    def fill(self, g: int, ids: list[int], positions: list[int], slots: list[int], seq_lens: list[int],
             tables: list[list[int]]) -> None:
        """Write the first len(ids) rows of graph g's host inputs; the rest become padding rows."""
        self._turn[g] ^= 1
        v = self.layouts[g].views(self.host_blobs[g][self._turn[g]].numpy())
        n = len(seq_lens)
        if ids:
            v["ids"][:n] = ids
        v["ids"][n:] = 0
        v["positions"][:n] = positions
        v["positions"][n:] = 0
        v["slots"][:n] = slots
        v["slots"][n:] = self.pad_block * self.block_size
        v["seq_lens"][:n] = seq_lens
        v["seq_lens"][n:] = 1
        t = v["tables"]
        t.fill(self.pad_block)
        for i, row in enumerate(tables):
            t[i, :len(row)] = row

    def run(self, g: int, embeds: torch.Tensor | None = None, positions: torch.Tensor | None = None,
            ids: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        """Upload graph g's filled host inputs (one copy) and replay it; returns its static outputs (g rows).
        `ids`: (rows, token ids) on the device that replace the filled ids (inputs not yet known on the host)."""
        with on_device(self.device):
            return self._replay(g, embeds, positions, ids)

    def _replay(self, g: int, embeds: torch.Tensor | None, positions: torch.Tensor | None,
                ids: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, ...]:
        self.blobs[g].copy_(self.host_blobs[g][self._turn[g]], non_blocking=True)
        if ids is not None:
            self.inputs[g]["ids"].index_copy_(0, *ids)
        if embeds is not None:
            self.embeds[g][:embeds.shape[0]].copy_(embeds)
            self.positions[g][..., :embeds.shape[0]].copy_(positions)
        self.graphs[g].replay()
        return self.outputs[g]
