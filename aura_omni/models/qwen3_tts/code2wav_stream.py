"""Per-request Code2Wav decoder state, so a stream decoded chunk by chunk equals the full decode.

The decoder is fully causal (qwen3_tts.md §1.6), so it is frame-exact if each request keeps:
- every causal conv's last (k-1)*dilation inputs (zeros at the start = the conv's causal zero padding),
- every transposed conv's overlap tail (k - stride samples, without bias),
- the last sliding_window - 1 keys/values of each transformer layer, and the frame count (RoPE position).
A fresh state therefore *is* the full decode's starting point; `Code2Wav.decode` runs on one too.
"""

import logging
from collections import deque
from dataclasses import dataclass, field

import torch

from aura_omni.layers.device import upload_async

log = logging.getLogger(__name__)


@dataclass
class Code2WavStream:
    """Decoder state of B requests (B = 1 for one request). Tensors are batch-first."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    frames: torch.Tensor | None = None  # [B] long: frames decoded so far (= next RoPE position)

    @property
    def batch_size(self) -> int:
        return int(self.frames.shape[0])


class Code2WavSlots:
    """The decoder state of many streams in one batched `Code2WavStream`, one row (slot) per stream.

    A step gathers its streams' rows, decodes, and scatters them back: a few index kernels per state tensor however
    many streams there are, and fixed addresses a CUDA graph can capture (code2wav_graphs.py). Row 0 is scratch: the
    padding rows of a graphed step read and write it. Slots are given back from any thread (`release`: when a
    stream ends or its session is collected) and reused by the owning thread. A fresh row is the full decode's
    starting point: the rows handed out since the last decode are zeroed together before the next one
    (`reset_fresh`: one fill per state tensor, ~38 on the full-size codec, however many streams began; a burst of 32
    first chunks would otherwise make ~1,200 launches before its first step).
    """

    def __init__(self, model, capacity: int):
        self.model = model
        self.state = model.new_stream(capacity + 1)
        self.generation = 0  # bumped when the rows are reallocated: captured graphs read the old tensors
        self._free = list(range(capacity, 0, -1))
        self._released: deque[int] = deque()  # appended from any thread, drained by `acquire`
        self._fresh: list[int] = []  # handed out, not yet zeroed (`reset_fresh`)

    @property
    def capacity(self) -> int:
        return self.state.batch_size - 1

    @property
    def in_use(self) -> int:
        return self.capacity - len(self._free) - len(self._released)

    def acquire(self) -> int:
        while self._released:
            self._free.append(self._released.popleft())
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._fresh.append(slot)
        return slot

    def reset_fresh(self) -> None:
        """Zero the rows handed out since the last call. The owner calls it before every decode (never inside
        `decode`, which graphs capture: the fill would replay on every step)."""
        if not self._fresh:
            return
        rows = upload_async(torch.tensor(self._fresh, dtype=torch.long), self.state.frames.device)
        self._fresh = []
        for t in (*self.state.tensors.values(), self.state.frames):
            t.index_fill_(0, rows, 0)

    def release(self, slot: int) -> None:
        self._released.append(slot)

    def gather(self, slots: torch.Tensor) -> Code2WavStream:
        return Code2WavStream({k: t.index_select(0, slots) for k, t in self.state.tensors.items()},
                              self.state.frames.index_select(0, slots))

    def scatter(self, slots: torch.Tensor, state: Code2WavStream) -> None:
        for k, t in self.state.tensors.items():
            t.index_copy_(0, slots, state.tensors[k])
        self.state.frames.index_copy_(0, slots, state.frames)

    def decode(self, slots: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, 16] (on the decoder's device, in range) of the streams in `slots` -> [B, n * 1920]."""
        state = self.gather(slots)
        wav = self.model.forward(codes, state)
        self.scatter(slots, state)
        return wav

    def _grow(self) -> None:
        old, n = self.state, self.capacity
        log.warning("code2wav: all %d stream rows in use; doubling them (captured graphs are dropped)", n)
        self.state = self.model.new_stream(2 * n + 1)
        for k, t in old.tensors.items():
            self.state.tensors[k][:n + 1].copy_(t)
        self.state.frames[:n + 1].copy_(old.frames)
        self._free = list(range(2 * n, n, -1))
        self.generation += 1
