"""CUDA graphs for the backbone of prefill steps (prompt chunks, prefix-cached turns, decodes beside them), one per
padded token count.

An eager prefill of a few hundred tokens is host-bound: a layer is ~12 launches of tens of microseconds of host
time each, so a prefix-cached AURA turn spent ~20 ms issuing ~10 ms of GPU work. A graph captured at T tokens
replays any step of at most T tokens and `max_seqs` sequences: the step's embeddings, positions, DeepStack
features and integer inputs are copied into static buffers, rows past its tokens are padding whose K/V go to
the scratch page, and attention is layers/triton_prefill.py, which reads only device tensors (its tile list
is built here on the host with the other integer inputs). DeepStack (AURA)
features sit in a dense [layers, T, H] buffer that is zero outside the visual rows (adding zero is exact).

The graphs share one set of buffers sized for the largest T (each graph reads a prefix). Without `capture` (CPU,
tests) `run` calls the same step on the same buffers eagerly, which is how CI checks everything but the capture.
"""

import logging
import time

import numpy as np
import torch

from aura_omni.layers import cuda_graph, triton_prefill
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.layers.device import on_device, upload_into
from aura_omni.models.qwen3 import DeepStack, Qwen3Model

log = logging.getLogger(__name__)


def graph_sizes(limit: int) -> list[int]:
    """Token counts that get a graph, up to `limit`: 1, 2, 4, 8, 16, every 32 up to 256, every 64 above. A step
    pads to the next one: at most 31 rows up to 256 tokens (steps that small are host-bound anyway), under 25%
    above; 17 graphs for 512 tokens."""
    sizes = [n for n in (1, 2, 4, 8, 16) if n < limit]
    sizes += list(range(32, min(limit, 256) + 1, 32)) + list(range(320, limit + 1, 64))
    if not sizes or sizes[-1] < limit:
        sizes.append(limit)
    return sizes


class PrefillGraphs:
    def __init__(self, backbone: Qwen3Model, sizes: list[int], max_seqs: int, max_blocks: int, pad_block: int,
                 block_size: int, dtype: torch.dtype, device: torch.device, deepstack_layers: int = 0,
                 capture: bool = True):
        cfg = backbone.config
        self.backbone = backbone
        self.sizes = sorted(sizes)
        self.max_seqs, self.max_blocks = max_seqs, max_blocks
        self.pad_slot, self.block_size = pad_block * block_size, block_size
        self.device = device
        top = self.sizes[-1]
        self.embeds = torch.zeros(top, cfg.hidden_size, dtype=dtype, device=device)
        self.positions = torch.zeros((3, top) if cfg.mrope_section else (top,), dtype=torch.long, device=device)
        self.deepstack = torch.zeros(deepstack_layers, top, cfg.hidden_size, dtype=dtype, device=device)
        self._deepstack_dirty = False
        self.rows = torch.arange(top, device=device)
        self.tile_tokens = triton_prefill.block_m(cfg.num_attention_heads, cfg.num_key_value_heads)
        # the integer inputs: one host blob, one copy; each section 16-byte aligned (Triton specialises on it)
        shapes = {"slots": ((top,), np.int64), "cu": ((max_seqs + 1,), np.int32), "seq_lens": ((max_seqs,), np.int32),
                  "tiles": ((triton_prefill.max_tiles(top, max_seqs, self.tile_tokens), 2), np.int32),
                  "tables": ((max_seqs, max_blocks), np.int32)}  # last: a step uploads only its rows
        offsets, at = {}, 0
        for name, (shape, dtype) in shapes.items():
            offsets[name] = at
            at += -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // 16) * 16
        self._host = np.zeros(at, dtype=np.uint8)
        self._blob = torch.zeros(at, dtype=torch.uint8, device=device)
        self._tables_at = offsets["tables"]
        self._in, dev = {}, {}
        for name, (shape, dtype) in shapes.items():
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            self._in[name] = self._host[offsets[name]:offsets[name] + size].view(dtype).reshape(shape)
            part = self._blob[offsets[name]:offsets[name] + size]
            dev[name] = part.view(getattr(torch, np.dtype(dtype).name)).view(shape)
        self.slots, self.cu, self.seq_lens, self.tiles, self.tables = (dev[k] for k in shapes)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        if capture:
            self._capture()

    def _step(self, t: int) -> torch.Tensor:
        tiles = self.tiles[:triton_prefill.max_tiles(t, self.max_seqs, self.tile_tokens)]
        meta = AttentionMetadata(self.cu, [t], [1], self.slots[:t], self.tables, self.seq_lens,
                                 self.max_blocks * self.block_size, query_tiles=tiles)
        deepstack = None
        if self.deepstack.shape[0]:
            deepstack = DeepStack(self.rows[:t], [f[:t] for f in self.deepstack])
        return self.backbone(self.embeds[:t], self.positions[..., :t], meta, deepstack)

    @torch.inference_mode()
    def _capture(self) -> None:
        start, pool = time.perf_counter(), None
        self.stream = cuda_graph.private_stream(self.device)
        cuda_graph.owns(self, self.graphs, [self.stream])
        with on_device(self.device):
            self._fill_idle()
            for t in reversed(self.sizes):  # largest first: the smaller graphs reuse its memory pool
                self.graphs[t], self.outputs[t] = cuda_graph.capture(lambda: self._step(t), self.device, self.stream,
                                                                     pool)
                pool = self.graphs[t].pool()
        log.info("captured prefill CUDA graphs for %d token counts up to %d (%d sequences) in %.2f s",
                 len(self.sizes), self.sizes[-1], self.max_seqs, time.perf_counter() - start)

    def _fill_idle(self) -> None:
        """Inputs of a step with no sequences (what the captures run over): every row is padding."""
        self._in["slots"][:] = self.pad_slot
        tiles = self._in["tiles"]
        tiles[:] = triton_prefill.query_tiles(np.zeros(0, np.int64), self.tile_tokens, len(tiles))
        self._blob.copy_(torch.from_numpy(self._host))

    def size_for(self, tokens: int, seqs: int, width: int) -> int | None:
        """The graph (token count) that runs a step of this shape, or None (eager)."""
        if seqs > self.max_seqs or width > self.max_blocks or tokens > self.sizes[-1]:
            return None
        return next(t for t in self.sizes if t >= tokens)

    def run(self, t: int, slots: np.ndarray, cu: np.ndarray, seq_lens: np.ndarray, tables: np.ndarray,
            embeds: torch.Tensor, positions: torch.Tensor, deepstack: DeepStack | None) -> torch.Tensor:
        """The backbone's hidden states [tokens, H] of one step through graph t (a static buffer: read it before the
        next run). slots [tokens]; cu [n+1]; seq_lens [n]; tables [n, <= max_blocks] (numpy)."""
        tokens, n = int(cu[-1]), len(seq_lens)
        v = self._in
        v["slots"][:tokens] = slots
        v["slots"][tokens:t] = self.pad_slot
        v["cu"][:n + 1] = cu
        v["cu"][n + 1:] = tokens  # absent sequences have no queries
        v["seq_lens"][:n] = seq_lens
        v["tiles"][:] = triton_prefill.query_tiles(np.diff(cu), self.tile_tokens, len(v["tiles"]))
        v["tables"][:n, :tables.shape[1]] = tables  # entries past a row's length are never read
        with on_device(self.device):
            used = self._tables_at + 4 * n * self.max_blocks
            upload_into(self._blob[:used], torch.from_numpy(self._host[:used]))  # the host buffer is reused
            self.embeds[:tokens].copy_(embeds)
            self.positions[..., :tokens].copy_(positions)
            if deepstack is not None or self._deepstack_dirty:
                self.deepstack.zero_()
                self._deepstack_dirty = deepstack is not None
                if deepstack is not None:
                    for layer, features in zip(self.deepstack, deepstack.features):
                        layer.index_copy_(0, deepstack.positions, features.to(layer.dtype))
            if t in self.graphs:
                self.graphs[t].replay()
                return self.outputs[t][:tokens]
            return self._step(t)[:tokens]
