"""The Qwen3-ASR audio encoder's transformer layers replayed from CUDA graphs, one per (windows, width) bucket.

An ASR step that takes new clips runs the encoder's 24 layers, ~13 launches each, eagerly: ~300 launches whatever
the clips, and a stage thread takes the interpreter lock back at every one. Beside a busy event loop and the other
stages' threads, that made a one-clip ASR step last ~97 ms on an H200 for a few ms of device work (32 sessions
committing together, docs/benchmarks.md, session 22). Here the layers of a step are one replay.

A step's windows [W, width, D] are copied into a static buffer padded to the bucket's window count (powers of two up
to `max_windows`) and width (32, 64 or the full 8-second window); every key past a window's length is masked, and
the padding windows (length 1) are computed and never read. A bucket not captured yet, or a step beyond the largest,
runs the same padded layers eagerly; without `capture` (CPU, tests) every step does, which is how CI checks all but
the capture. Graphs are captured one at a time (`capture_next`, ~0.16 s each on an H200): a lone clip's before the
server is ready, the others in its first lull after (pipeline/warmup.py), as Code2Wav's are.
"""

import logging
import time

import torch
from torch import nn

from aura_omni.layers import cuda_graph

log = logging.getLogger(__name__)

WIDTHS = (32, 64)  # padded window widths below the full window (a 3 s clip's 39 tokens pad to 64)


def window_buckets(max_windows: int) -> list[int]:
    """1, 2, 4, ... up to the first power of two >= max_windows."""
    sizes = [1]
    while sizes[-1] < max_windows:
        sizes.append(2 * sizes[-1])
    return sizes


class EncoderLayerGraphs:
    def __init__(self, layers: nn.ModuleList, window_tokens: int, max_windows: int, dtype: torch.dtype,
                 device: torch.device, capture: bool):
        self.layers = layers
        self.device = torch.device(device)
        self.counts = window_buckets(max_windows)
        self.widths = sorted({w for w in WIDTHS if w < window_tokens} | {window_tokens})
        d_model = layers[0].self_attn.q_proj.in_features
        self.x = torch.zeros(self.counts[-1], self.widths[-1], d_model, dtype=dtype, device=self.device)
        self.lens = torch.ones(self.counts[-1], dtype=torch.long, device=self.device)
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.capture = capture
        self._pool = None
        self._streams: list = []
        if capture:
            cuda_graph.owns(self, self.graphs, self._streams)

    def __call__(self, windows: torch.Tensor, lens: torch.Tensor) -> torch.Tensor | None:
        """windows [W, width, D], lens [W] (keys per window, on the device) -> the layers' output [W, width, D] (a
        view of a static buffer: read it before the next call), or None when no bucket holds the step."""
        w, width, _ = windows.shape
        count = next((c for c in self.counts if c >= w), None)
        padded = next((p for p in self.widths if p >= width), None)
        if count is None or padded is None:
            return None
        self.x[:w, :width].copy_(windows)
        self.lens[:w].copy_(lens)
        self.lens[w:count].fill_(1)
        entry = self.graphs.get((count, padded))
        out = entry[1] if entry is not None else self._layers(count, padded)
        if entry is not None:
            entry[0].replay()
        return out[:w, :width]

    def _layers(self, count: int, width: int) -> torch.Tensor:
        x = self.x[:count, :width]
        key_mask = torch.arange(width, device=self.device)[None, :] < self.lens[:count, None]
        for layer in self.layers:
            x = layer(x, key_mask)
        return x

    def missing(self, max_windows: int | None = None) -> list[tuple[int, int]]:
        """(windows, width) buckets not captured yet, of at most `max_windows` windows, the largest first (the pool's
        blocks then fit every later one)."""
        if not self.capture:
            return []
        return [(c, w) for c in reversed(self.counts) for w in reversed(self.widths)
                if (c, w) not in self.graphs and (max_windows is None or c <= max_windows)]

    def capture_next(self, max_windows: int | None = None) -> bool:
        """Capture one missing bucket's graph; False when none is left."""
        todo = self.missing(max_windows)
        if not todo:
            return False
        count, width = todo[0]
        if not self._streams:
            self._streams.append(cuda_graph.private_stream(self.device))
        t0 = time.perf_counter()
        with torch.inference_mode():
            graph, out = cuda_graph.capture(lambda: self._layers(count, width), self.device, self._streams[0],
                                            self._pool)
        self._pool = graph.pool()
        self.graphs[(count, width)] = (graph, out)
        log.debug("ASR encoder graph of %d windows x %d captured in %.0f ms", count, width,
                  1000 * (time.perf_counter() - t0))
        return True
