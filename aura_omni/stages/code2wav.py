"""The Code2Wav stage's engine: codec chunks of concurrent streams, decoded together.

A request is one chunk of one stream (`Code2WavChunk`); its single output is the chunk's 24 kHz samples on the host.
A stream's decoder state (conv tails, attention window, frame count) is one row of the stage's `Code2WavSlots`, taken
on the loop thread at the stream's first chunk and given back when its `Code2WavSession` is closed (the stream ended
or its client left: `Qwen3TTS.astream`'s `finally`) or collected. A stream may queue its next chunk while one is
decoded: its chunks are decoded in order, one per step. Each step decodes the chunks of one length among each
stream's first (shortest first: a new stream's first chunk is its first audio), as many as one step of that length
takes, in one forward (`Code2WavBatch`: up to max_num_seqs streams within a budget of frames, so more short first
windows than steady ones). A stream's last chunk, shorter than its windows, is decoded padded up to the next window
length and its samples trimmed: the decoder is causal, so the padding changes none of them, and the chunk joins other
streams' windows in one forward instead of taking steps of its own (with lengths spread, every stream ends on a length
no other stream has). On CUDA every step replays captured graphs (`Code2WavGraphs`: one per window length of the codec
schedule and batch bucket); on the CPU, or with `enforce_eager`, it runs eagerly on the same rows.

Stepping as soon as any chunk is waiting is what a lone stream needs, but under load with requests of spread lengths
the streams' windows come at different times, and a step then decodes two or three of them: each step costs the GPU
the Talker shares a few milliseconds, whatever its rows. A stream's later windows have time to spare: once the Talker
runs faster than real time, the audio already sent lasts well past the next window. With a batch wait (the deploy's
`codec_batch_wait_ms`, 250 ms; its effect on throughput is in docs/benchmarks.md), a chunk may wait up to that long for other
streams' to fill the step, but never past PLAYBACK_MARGIN_S before its stream's audio sent so far runs out (as played
from its first chunk on). A stream's first chunk never waits, nor does a lone stream's or a whole file's (not played
as it comes: `TTSRequest.played`). `ready_in` tells the loop how long. A step takes the group of the most pressing
chunk and fills the step with others of that length: first audio goes first, except before a later chunk whose audio
runs out within URGENT_S, which goes in the order of when it became so against the first chunks' arrivals (session
29: with first windows always first, a burst of 128 new streams admitted over a few Talker steps kept 8 earlier
streams' second windows waiting until 33 ms after their first 160 ms had played); then the other later chunks, the
one due first.
"""

import math
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from aura_omni.layers.device import download, upload_async
from aura_omni.models.qwen3_tts.code2wav_batch import Code2WavBatch
from aura_omni.models.qwen3_tts.code2wav_graphs import Code2WavGraphs
from aura_omni.models.qwen3_tts.codec_config import SAMPLES_PER_FRAME
from aura_omni.models.qwen3_tts.code2wav_stream import Code2WavSlots
from aura_omni.stages.loop_metrics import LatencyHistogram
from aura_omni.stages.stage_engine import StageOutput


@dataclass
class Code2WavSession:
    """One stream; `context` codes (an ICL voice's reference) prime its decoder row before its first chunk."""

    context: torch.Tensor | None = None  # [F, 16] long on the host
    slot: int | None = None  # its row in the stage's Code2WavSlots
    slots: Code2WavSlots | None = field(default=None, repr=False)
    release: weakref.finalize | None = field(default=None, repr=False)
    audio_end: float | None = None  # when the audio decoded so far has played out (perf_counter), from the first chunk
    may_wait: bool = True  # its later windows may wait for others' (batch wait); not a whole file's (TTSRequest.played)

    def close(self) -> None:
        """The stream has ended: its row goes back to the stage now (else when the session is collected, which a
        reference cycle, e.g. through an abandoned generator, can put off for minutes)."""
        if self.release is not None:
            self.release()


@dataclass
class Code2WavChunk:
    session: Code2WavSession
    codes: torch.Tensor  # [n, 16] long on the host
    last: bool = False  # the stream's last chunk: its decoder row is not used after it


def window_schedule(initial: int, steady: int) -> list[int]:
    """The lengths of a stream's Code2Wav windows: `initial` frames, then twice as many each time up to `steady`
    (which repeats). A small first window is quick audio; doubling keeps the audio already sent longer than the
    time the next window takes the Talker (1 frame is 80 ms of audio; 25 frames take longer than that)."""
    out = [initial]
    while out[-1] < steady:
        out.append(min(2 * out[-1], steady))
    return out


class FrameChunks:
    """A stream's codec frames gathered into Code2Wav windows whose lengths follow `window_schedule`."""

    def __init__(self, initial: int, steady: int):
        if initial < 1 or steady < 1:
            raise ValueError("initial_chunk_frames and chunk_frames must be >= 1")
        self.windows, self.pending = window_schedule(min(initial, steady), steady), []

    def add(self, frame: torch.Tensor) -> torch.Tensor | None:
        """The next window [n, 16] once this frame completes it."""
        self.pending.append(frame)
        if len(self.pending) < self.windows[0]:
            return None
        if len(self.windows) > 1:
            self.windows.pop(0)
        return self.rest()

    def rest(self) -> torch.Tensor | None:
        """The frames not yet in a window (the stream's last, shorter one), if any."""
        codes, self.pending = (torch.stack(self.pending) if self.pending else None), []
        return codes


# a waiting chunk steps at the latest this long before its stream's audio runs out: a step or two queued ahead of it,
# its own, and the way to the listener
PLAYBACK_MARGIN_S = 0.15
# a later chunk goes before first chunks that came after this long before its stream's audio runs out: the step
# running, its own, and the way to the listener
URGENT_S = 0.08
SECONDS_PER_FRAME = 1 / 12.5  # of audio: 12.5 codec frames a second


# graphs captured before the server is ready: one stream's windows of 1 and 2 frames, which any window decodes as
# pieces of (cuDNN times each graph's convolutions as it is captured: seconds for all lengths)
ESSENTIAL_BUCKET, ESSENTIAL_WINDOW = 1, 2


def slot_capacity(max_streams: int) -> int:
    """Rows made up front: open streams (one per Talker seat, and the stage's batch may be smaller), plus ones just
    ended whose rows are not back yet. Rows are added when these run out, but that drops every captured graph (they
    read the old rows), so there are plenty (5 MB a row in fp32)."""
    return max(64, 2 * max_streams)


class Code2WavStageEngine:
    def __init__(self, code2wav, max_batch: int = 32, max_frames: int | None = None):
        self.code2wav = code2wav
        self.device = next(code2wav.parameters()).device
        self.batch = Code2WavBatch(max_batch, max_frames)
        self.slots = Code2WavSlots(code2wav, slot_capacity(max_batch))
        self.graphs: Code2WavGraphs | None = None
        self._pending: dict[str, Code2WavChunk] = {}
        self._arrived: dict[str, float] = {}  # when each pending chunk came
        self.windows: list[int] = []  # the window lengths of the codec schedule, which a last chunk is padded up to
        self.batch_wait_s = 0.0  # the deploy's codec_batch_wait_ms (configure)
        self.decoded_frames = 0
        # a stream's first window, from its taking to its samples, apart from the stage's first output of every chunk
        # (later windows may wait for a fuller step by design): the loop publishes it as the stage's `first_window`
        self.latency = {"first_window": LatencyHistogram()}

    def configure(self, max_batch: int, windows: list[int], cuda_graphs: bool, batch_wait_s: float = 0.0,
                  max_frames: int | None = None, max_streams: int = 0) -> None:
        """The deploy's batch bound (streams, frames) and batch wait, and graphs for its window lengths (CUDA only);
        `max_streams`: how many streams may be open at once (the Talker's seats). On the loop thread, before it serves;
        the rows are made anew in the decoder's (possibly new) dtype."""
        self.batch, self.windows = Code2WavBatch(max_batch, max_frames), sorted(set(windows))
        self.batch_wait_s = batch_wait_s
        if self.graphs is not None:
            self.graphs.close()
        self.slots = Code2WavSlots(self.code2wav, slot_capacity(max(max_batch, max_streams)))
        self.graphs = (Code2WavGraphs(self.slots, windows, self.batch)
                       if cuda_graphs and self.device.type == "cuda" else None)

    def capture_next_graph(self, max_bucket: int | None = None, when_idle: bool = False,
                           max_window: int | None = None) -> bool:
        """Capture one graph not captured yet, of a bucket up to `max_bucket` and a window up to `max_window`; False
        when there is none, or with `when_idle` while a stream is open (a capture holds the loop for about a second).
        The warm start captures a lone stream's short windows (`ESSENTIAL_BUCKET`, `ESSENTIAL_WINDOW`) before the
        server is ready, the rest after it."""
        if self.graphs is None or when_idle and (self._pending or self.slots.in_use):
            return False
        return self.graphs.capture_next(max_bucket, max_window)

    def graphs_missing(self) -> int:
        return len(self.graphs.missing()) if self.graphs is not None else 0

    def add(self, request_id: str, chunk: Code2WavChunk) -> None:
        s = chunk.session
        if s.slots is not self.slots:  # the stream's first chunk
            s.slot, s.slots = self.slots.acquire(), self.slots
            s.release = weakref.finalize(s, self.slots.release, s.slot)
            if s.context is not None and s.context.shape[0]:  # context only: not this audio
                self._decode([s.slot], self._host_codes(s.context)[None])
        self._pending[request_id] = Code2WavChunk(s, self._host_codes(chunk.codes), chunk.last)
        self._arrived[request_id] = time.perf_counter()

    def abort(self, request_id: str) -> None:
        self._pending.pop(request_id, None)
        self._arrived.pop(request_id, None)

    def has_work(self) -> bool:
        return bool(self._pending)

    def ready_in(self) -> float:
        """Seconds to wait for more chunks before the next step (0: step now)."""
        if not self.batch_wait_s or not self._pending:
            return 0.0
        heads = self._heads()
        if (len(heads) >= self.slots.in_use  # every open stream has a chunk waiting: no more will come
                or any(n >= self.batch.streams(length)
                       for length, n in Counter(self._length(c) for _, c in heads).items())):
            return 0.0
        return max(0.0, min(self._due(r, c) for r, c in heads) - time.perf_counter())

    def step(self) -> list[StageOutput]:
        groups: dict[int, list[tuple[str, Code2WavChunk]]] = {}  # window length -> streams' first pending chunks
        for rid, c in self._heads():
            groups.setdefault(self._length(c), []).append((rid, c))
        if self.batch_wait_s:  # the group of the most pressing chunk, the fuller on a tie
            now = time.perf_counter()
            length = min(groups, key=lambda n: (min(self._pressing(r, c, now) for r, c in groups[n]), -len(groups[n])))
        else:
            length = min(groups)  # shortest first: a new stream's first chunk is its first audio
        rids = [r for r, _ in groups[length][:self.batch.streams(length)]]
        part = [self._pending.pop(r) for r in rids]
        arrived = [self._arrived.pop(r) for r in rids]
        if length == 0:
            return [StageOutput(r, np.zeros(0, np.float32), True) for r in rids]
        codes = torch.zeros(len(part), length, part[0].codes.shape[1], dtype=torch.long)  # code 0 pads last chunks
        for i, c in enumerate(part):
            codes[i, :c.codes.shape[0]] = c.codes
        try:
            wavs = self._decode([c.session.slot for c in part], codes)
        except Exception as e:  # noqa: BLE001 - the streams of this forward fail; the others go on
            return [StageOutput(r, e, True) for r in rids]
        self.decoded_frames += sum(c.codes.shape[0] for c in part)
        host = download(wavs.float())
        now = time.perf_counter()
        for c, at in zip(part, arrived):  # played from its first chunk on; after a gap, from now
            if c.session.audio_end is None:
                self.latency["first_window"].observe(now - at)
            c.session.audio_end = max(c.session.audio_end or now, now) + c.codes.shape[0] * SECONDS_PER_FRAME
        # copies, not views: a view would hold the step's pinned block for as long as its stream keeps the chunk (a
        # whole file, for a request that is not streamed), and the pinned allocator would make new blocks meanwhile
        return [StageOutput(r, host[i, :c.codes.shape[0] * SAMPLES_PER_FRAME].copy(), True)
                for i, (r, c) in enumerate(zip(rids, part))]

    def _due(self, rid: str, chunk: Code2WavChunk) -> float:
        """When a waiting chunk must step: after the batch wait, or before its stream's audio runs out; a stream's
        first chunk, and every chunk of a whole file, at once."""
        end = chunk.session.audio_end
        if end is None or not chunk.session.may_wait:
            return -math.inf
        return min(self._arrived[rid] + self.batch_wait_s, end - PLAYBACK_MARGIN_S)

    def _pressing(self, rid: str, chunk: Code2WavChunk, now: float) -> tuple[int, float]:
        """A step's order among the waiting chunks (least first): first chunks, a whole file's, and later chunks whose
        audio runs out within URGENT_S, by when each became so (a first chunk when it arrived: nobody hears anything
        of it yet); then the other later chunks, by when they are due."""
        end = chunk.session.audio_end
        if end is None or not chunk.session.may_wait:
            return 0, self._arrived[rid]
        if end - URGENT_S <= now:
            return 0, end - URGENT_S
        return 1, self._due(rid, chunk)

    def _heads(self) -> list[tuple[str, Code2WavChunk]]:
        """Each stream's first pending chunk (its chunks decode in order), in arrival order."""
        heads: dict[int, tuple[str, Code2WavChunk]] = {}
        for rid, chunk in self._pending.items():
            heads.setdefault(id(chunk.session), (rid, chunk))
        return list(heads.values())

    def _length(self, chunk: Code2WavChunk) -> int:
        """The frames a step decodes for this chunk: a last chunk's padded up to the next window length."""
        n = chunk.codes.shape[0]
        return next((w for w in self.windows if w >= n), n) if chunk.last and n else n

    def _host_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """A chunk's codes, checked, kept on the host until its step uploads the step's codes in one copy (a copy
        back to the host per chunk to build the step would wait for the stream each time)."""
        return self.code2wav.check_codes(codes, device=torch.device("cpu"))

    def _decode(self, slots: list[int], codes: torch.Tensor) -> torch.Tensor:
        """The rows `slots` decode `codes` [B, n, 16] (long, on the host)."""
        with torch.inference_mode():
            self.slots.reset_fresh()  # the rows of streams begun since the last decode, zeroed together
            if self.graphs is not None and self.graphs.covers(*codes.shape[:2]):
                return self.graphs.decode(slots, codes)
            return self.slots.decode(upload_async(torch.tensor(slots), self.device), upload_async(codes, self.device))

    def stats(self) -> dict[str, float]:
        return {"running": 0, "waiting": len(self._pending), "decoded_frames": self.decoded_frames,
                "streams": self.slots.in_use, "graphs_pending": self.graphs_missing()}
