"""The Qwen3-VL vision encoder replayed from CUDA graphs, one per grid layout.

A live session sends frames of one size every turn, so its encoder calls repeat one layout; run eagerly,
the encoder's ~700 small launches are host-bound (about 30 ms for two 640x480 frames on an H200, for a
few ms of device work). A layout is captured the second time it is seen, so one-off sizes stay eager;
at most `max_graphs` are kept (least recently used dropped). Calls are serialised: a graph's input and
output buffers are shared, and outputs are copied out before the next replay.

Each kept graph has a capture stream of its own, and a dropped graph is reset before its stream captures the next:
graphs that share a capture stream share its cuBLAS workspace, which torch frees when one of them goes
(layers/cuda_graph.py).
"""

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

from aura_omni.layers import cuda_graph
from aura_omni.layers.device import on_device
from aura_omni.models.qwen3_vl_vision import Qwen3VLVisionEncoder, VisionLayout

log = logging.getLogger(__name__)


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    pixels: torch.Tensor  # the graph's input buffer
    layout: VisionLayout  # position embeddings and rotary tables the graph reads
    outputs: tuple[torch.Tensor, list[torch.Tensor]]
    stream: torch.cuda.Stream  # its private capture stream


class VisionGraphs:
    def __init__(self, encoder: Qwen3VLVisionEncoder, max_graphs: int = 4):
        self.encoder = encoder
        self.max_graphs = max_graphs
        self.device = encoder.pos_embed.weight.device
        self._graphs: OrderedDict[tuple, _Graph] = OrderedDict()
        self._seen: OrderedDict[tuple, None] = OrderedDict()  # layouts met once (bounded)
        self._lock = threading.Lock()
        self._pool = None
        self._streams: list[torch.cuda.Stream] = []  # capture streams of dropped graphs, free for the next capture
        self._owned: list[torch.cuda.Stream] = []  # every capture stream it took, given back when it is collected
        cuda_graph.owns(self, self._graphs, self._owned)

    def __call__(self, pixel_values: torch.Tensor, grids) -> tuple[torch.Tensor, list[torch.Tensor]]:
        grids = tuple(tuple(int(v) for v in g) for g in grids)
        key = (grids, tuple(pixel_values.shape), pixel_values.dtype)
        if pixel_values.shape[0] != sum(t * h * w for t, h, w in grids):
            return self.encoder(pixel_values, list(grids))  # raises the encoder's error
        with self._lock, on_device(self.device):
            entry = self._graphs.get(key)
            if entry is None:
                if key not in self._seen:
                    self._seen[key] = None
                    while len(self._seen) > 64:
                        self._seen.popitem(last=False)
                    return self.encoder(pixel_values, list(grids))
                entry = self._capture(key, pixel_values, grids)
            self._graphs.move_to_end(key)
            entry.pixels.copy_(pixel_values)
            entry.graph.replay()
            embeds, deepstack = entry.outputs
            return embeds.clone(), [d.clone() for d in deepstack]

    def _capture(self, key: tuple, pixel_values: torch.Tensor, grids) -> _Graph:
        layout = self.encoder.prepare(list(grids))
        pixels = torch.empty(pixel_values.shape, dtype=pixel_values.dtype, device=self.device)
        pixels.copy_(pixel_values)
        while len(self._graphs) >= self.max_graphs:  # drop the least recently used first: its stream is reused
            _, dropped = self._graphs.popitem(last=False)
            cuda_graph.reset([dropped.graph])
            self._streams.append(dropped.stream)
            del dropped  # its graph is destroyed now, not after the capture below
        if not self._streams:
            self._owned.append(cuda_graph.private_stream(self.device))
            self._streams.append(self._owned[-1])
        stream = self._streams.pop()
        graph, outputs = cuda_graph.capture(lambda: self.encoder.run(pixels, layout), self.device, stream, self._pool)
        self._pool = graph.pool()
        entry = self._graphs[key] = _Graph(graph, pixels, layout, outputs, stream)
        log.info("vision encoder graph captured for grids %s", list(grids))
        return entry
