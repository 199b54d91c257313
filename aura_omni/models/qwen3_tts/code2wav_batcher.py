"""Concurrent audio streams share Code2Wav forwards.

Every TTS stream decodes its own chunks (`Qwen3TTS.stream`, one thread per stream); at 16 streams that is 16
small decoder forwards per chunk period, each a few hundred launches. Here a stream's thread queues its chunk,
and whichever waiting thread finds no decode running takes every queued chunk and decodes those of equal length
in one batched step (`Code2Wav.decode_stream_batch`: rows at different positions are fine), then wakes the
others. A lone stream decodes at once, unbatched, so c=1 pays nothing.
"""

import threading
from collections import defaultdict
from dataclasses import dataclass

import torch

from aura_omni.models.qwen3_tts.code2wav_stream import Code2WavStream


@dataclass
class _Chunk:
    state: Code2WavStream
    codes: torch.Tensor  # [n, 16] on the decoder's device
    wav: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False


class Code2WavBatcher:
    def __init__(self, code2wav, max_batch: int = 32):
        self.code2wav = code2wav
        self.max_batch = max_batch
        self._cv = threading.Condition()
        self._queue: list[_Chunk] = []
        self._decoding = False  # a thread is decoding queued chunks (outside the lock)

    def decode(self, state: Code2WavStream, codes: torch.Tensor) -> torch.Tensor:
        """Samples [n * 1920] of this stream's next n frames; `state` advances (as `Code2Wav.decode_stream`)."""
        chunk = _Chunk(state, codes)
        with self._cv:
            self._queue.append(chunk)
            while True:
                if chunk.done:
                    break
                if self._decoding:
                    self._cv.wait()
                    continue
                self._decoding, batch, self._queue = True, self._queue, []
                self._cv.release()
                try:
                    self._run(batch)
                finally:
                    self._cv.acquire()
                    for c in batch:  # an interrupted run must not leave its streams waiting forever
                        if not c.done:
                            c.error, c.done = RuntimeError("Code2Wav decode was interrupted"), True
                    self._decoding = False
                    self._cv.notify_all()
        if chunk.error is not None:
            raise chunk.error
        return chunk.wav

    def _run(self, chunks: list[_Chunk]) -> None:
        """Decode queued chunks: those of equal length together, up to max_batch rows a forward, shortest first (a new
        stream's first chunk is its first audio); each forward's streams are woken as soon as it is done."""
        by_length: dict[int, list[_Chunk]] = defaultdict(list)
        for c in chunks:
            by_length[c.codes.shape[0]].append(c)
        for _, group in sorted(by_length.items()):
            for at in range(0, len(group), self.max_batch):
                part = group[at:at + self.max_batch]
                try:
                    if len(part) == 1 or part[0].codes.shape[0] == 0:
                        for c in part:
                            c.wav = self.code2wav.decode_stream(c.state, c.codes)
                    else:
                        codes = torch.stack([c.codes for c in part])
                        for c, row in zip(part, self.code2wav.decode_stream_batch([c.state for c in part], codes)):
                            c.wav = row
                except Exception as e:  # noqa: BLE001 - every stream of the failed forward gets the error
                    for c in part:
                        c.error = e
                with self._cv:
                    for c in part:
                        c.done = True
                    self._cv.notify_all()
