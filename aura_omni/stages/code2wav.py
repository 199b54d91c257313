"""The Code2Wav stage's engine: codec chunks of concurrent streams, decoded together.

A request is one chunk of one stream (`Code2WavChunk`); its single output is the chunk's 24 kHz samples on the host.
A stream's decoder state (`Code2WavStream`: conv tails, attention window, frame count) lives in its `Code2WavSession`
and is made on the loop thread at the stream's first chunk, so every tensor of it belongs to the stage's stream.
Each step decodes the chunks of one length (shortest first: a new stream's first chunk is its first audio), up to
`max_batch` streams in one forward; a lone chunk takes the unbatched path, so c=1 pays nothing for batching.
"""

from dataclasses import dataclass, field

import numpy as np
import torch

from aura_omni.stages.loop import StageOutput


@dataclass
class Code2WavSession:
    """One stream's decoder state; `context` codes (an ICL voice's reference) prime it before its first chunk."""

    context: torch.Tensor | None = None  # [F, 16] long on the host
    state: object = None  # Code2WavStream, made by the stage


@dataclass
class Code2WavChunk:
    session: Code2WavSession
    codes: torch.Tensor  # [n, 16] long on the host


@dataclass
class _Pending:
    chunk: Code2WavChunk
    codes: torch.Tensor = field(default=None)  # on the decoder's device


class Code2WavStageEngine:
    def __init__(self, code2wav, max_batch: int = 32):
        self.code2wav = code2wav
        self.device = next(code2wav.parameters()).device
        self.max_batch = max_batch
        self._pending: dict[str, _Pending] = {}
        self.decoded_frames = 0

    def add(self, request_id: str, chunk: Code2WavChunk) -> None:
        s = chunk.session
        if s.state is None:
            s.state = self.code2wav.new_stream()
            if s.context is not None and s.context.shape[0]:
                self.code2wav.decode_stream(s.state, s.context.to(self.device))  # context only: not this audio
        self._pending[request_id] = _Pending(chunk, chunk.codes.to(self.device))

    def abort(self, request_id: str) -> None:
        self._pending.pop(request_id, None)

    def has_work(self) -> bool:
        return bool(self._pending)

    def step(self) -> list[StageOutput]:
        shortest = min(p.codes.shape[0] for p in self._pending.values())
        rids = [r for r, p in self._pending.items() if p.codes.shape[0] == shortest][:self.max_batch]
        part = [self._pending.pop(r) for r in rids]
        try:
            if len(part) == 1 or shortest == 0:
                wavs = [self.code2wav.decode_stream(p.chunk.session.state, p.codes) for p in part]
            else:
                wavs = list(self.code2wav.decode_stream_batch([p.chunk.session.state for p in part],
                                                              torch.stack([p.codes for p in part])))
        except Exception as e:  # noqa: BLE001 - the streams of this forward fail; the others go on
            return [StageOutput(r, e, True) for r in rids]
        self.decoded_frames += shortest * len(part)
        return [StageOutput(r, w.float().cpu().numpy().astype(np.float32, copy=False), True)
                for r, w in zip(rids, wavs)]

    def stats(self) -> dict[str, float]:
        return {"running": 0, "waiting": len(self._pending), "decoded_frames": self.decoded_frames}
