"""Batched Code2Wav steps replayed from CUDA graphs, one per (batch bucket, window length).

Eagerly, a Code2Wav step is ~600 launches (8 transformer layers, 4 upsampling blocks of SnakeBeta and dilated
convolutions, the state's gathers and scatters): at one stream and one frame, the first audio of a request, the
host is the bound. A graph per shape takes the launches off the host. The streams' rows are gathered from and
scattered back to `Code2WavSlots` inside the graph, so a replay is: copy the slot ids and codes in, replay, read the
waveform out. A batch is padded up to its bucket with the scratch slot; a window's buckets go up to the streams a step
of its length takes (`Code2WavBatch`: more of the short first windows than of steady ones). Other lengths (a stream's
last, shorter chunk; an ICL reference priming the state) are decoded as consecutive pieces of captured lengths, largest
first: the decoder is causal and carries its state across pieces, so this equals one decode of the whole (20 frames =
16 + 4).

cuDNN picks each convolution's algorithm by timing the candidates while a graph is captured (`cudnn.benchmark`):
the heuristic choice makes a batched fp32 step about 3x slower on an H200. The flag is process-wide, so it is set only
around captures, which the warm start does before the server takes requests. Graphs share one memory pool (steps
never overlap: one loop thread, one stream).
"""

import logging

import torch

from aura_omni.layers import cuda_graph
from aura_omni.layers.device import upload_into
from aura_omni.models.qwen3_tts.code2wav_batch import Code2WavBatch
from aura_omni.models.qwen3_tts.code2wav_stream import Code2WavSlots

log = logging.getLogger(__name__)


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to and including max_batch."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


class Code2WavGraphs:
    def __init__(self, slots: Code2WavSlots, windows: list[int], batch: Code2WavBatch):
        self.slots = slots
        top = max(windows)  # and every power of two below the largest, so any length is a sum of captured ones
        self.windows = sorted(set(windows) | {1 << k for k in range(top.bit_length()) if 1 << k < top})
        # window -> its batch buckets: a step takes windows of the schedule; the other lengths are only pieces of one
        # stream's (an ICL reference priming its row), so they need one stream's graph
        self.buckets = {n: batch_buckets(batch.streams(n)) if n in windows else [1] for n in self.windows}
        self.device = slots.state.frames.device
        self._graphs: dict[tuple[int, int], tuple] = {}
        self.later = False  # the larger buckets are captured in the background: no request waits for a capture
        self._generation = slots.generation
        self._pool = None
        self._stream = cuda_graph.private_stream(self.device)
        self.close = cuda_graph.owns(self, self._graphs, [self._stream])  # reset every graph, give the stream back

    def __len__(self) -> int:
        return len(self._graphs)

    def pieces(self, frames: int, windows: list[int] | None = None) -> list[int]:
        """Lengths of `windows` (default: every captured length) that add up to `frames`, largest first."""
        out, left = [], frames
        for w in reversed(windows or self.windows):
            while left >= w:
                out.append(w)
                left -= w
        return out

    def covers(self, batch: int, frames: int) -> bool:
        return frames > 0 and all(batch <= self.buckets[n][-1] for n in set(self.pieces(frames)))

    def decode(self, slots: list[int], codes: torch.Tensor) -> torch.Tensor:
        """Like `Code2WavSlots.decode` for a covered shape: codes [B, n, 16] -> [B, n * 1920]. While graphs are
        captured `later`, only lengths a lone stream's graphs hold are used (the rest come in the background)."""
        out, at = [], 0
        for n in self.pieces(codes.shape[1], self._ready_windows() if self.later else None):
            out.append(self._replay_rows(slots, codes[:, at:at + n]))
            at += n
        return out[0] if len(out) == 1 else torch.cat(out, dim=1)

    def _replay_rows(self, slots: list[int], codes: torch.Tensor) -> torch.Tensor:
        """One piece for any number of streams: while the larger buckets are captured `later` (in the background,
        after the server is ready), or past the largest bucket of its length (a length only one stream's pieces use,
        in a batch while the schedule's own lengths are still to come), the rows go through the largest captured
        bucket in turns; else a missing graph is captured now."""
        b, n = codes.shape[0], codes.shape[1]
        bucket = next((k for k in self.buckets[n] if k >= b), None)
        if bucket is not None and ((bucket, n) in self._graphs or not self.later):
            return self._replay(slots, codes)
        smaller = [k for k in self.buckets[n] if k < b and (k, n) in self._graphs]
        k = smaller[-1] if smaller else None if bucket is not None else self.buckets[n][-1]
        if k is None:
            return self._replay(slots, codes)
        return torch.cat([self._replay(slots[i:i + k], codes[i:i + k]) for i in range(0, b, k)])

    def _replay(self, slots: list[int], codes: torch.Tensor) -> torch.Tensor:
        b, n = codes.shape[0], codes.shape[1]
        if self._generation != self.slots.generation:  # the rows moved: every graph reads freed tensors
            cuda_graph.drop(self._graphs)  # before the stream captures again
            self._generation = self.slots.generation
        bucket = next(k for k in self.buckets[n] if k >= b)
        entry = self._graphs.get((bucket, n)) or self._capture(bucket, n)
        graph, ids, codes_in, wav = entry
        ids.zero_()  # padding rows -> the scratch slot
        upload_into(ids[:b], torch.tensor(slots, dtype=torch.long))
        codes_in[b:].zero_()
        upload_into(codes_in[:b], codes)
        graph.replay()
        return wav[:b].clone()

    def capture_all(self) -> None:
        """Every (bucket, window) graph now, so no request pays a capture."""
        while self.capture_next():
            pass

    def missing(self, max_bucket: int | None = None, max_window: int | None = None) -> list[tuple[int, int]]:
        """(bucket, window) pairs not captured yet, smallest bucket first: whatever is captured at a time, every
        smaller bucket is, so a batch can always go through a captured one in turns (`_replay_rows`)."""
        return sorted((b, n) for n in self.windows for b in self.buckets[n]
                      if (b, n) not in self._graphs and (max_bucket is None or b <= max_bucket)
                      and (max_window is None or n <= max_window))

    def _ready_windows(self) -> list[int]:
        """Window lengths a lone stream's graph holds (1 is always among them once the warm start ran)."""
        return [n for n in self.windows if (1, n) in self._graphs] or self.windows

    def capture_next(self, max_bucket: int | None = None, max_window: int | None = None) -> bool:
        """One graph not captured yet (of a bucket up to `max_bucket`, a window up to `max_window`); False when there
        is none. Captured one loop call at a time, each well under the stall watchdog's limit."""
        missing = self.missing(max_bucket, max_window)
        if missing:
            self._capture(*missing[0])
        self.later = bool(self.missing()) and (self.later or max_bucket is not None)
        return bool(missing)

    def _capture(self, bucket: int, n: int):
        ids = torch.zeros(bucket, dtype=torch.long, device=self.device)
        codes_in = torch.zeros(bucket, n, 16, dtype=torch.long, device=self.device)
        with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False,
                                        allow_tf32=torch.backends.cudnn.allow_tf32):
            graph, wav = cuda_graph.capture(lambda: self.slots.decode(ids, codes_in), self.device, self._stream,
                                             self._pool)
        self._pool = graph.pool()
        entry = self._graphs[(bucket, n)] = (graph, ids, codes_in, wav)
        log.debug("code2wav graph captured for %d streams x %d frames", bucket, n)
        return entry
