"""The body of a stage's Ray actor: it loads one stage object (the ASR service, the AURA stage, or the Qwen3-TTS facade
with its Talker and Code2Wav loops), warms it, and serves its requests. Plain data in and out: audio clips, prompt
turns and vision frames, Talker requests; Transcripts, text deltas with token ids, codec frames, 24 kHz samples.

No Ray here: `ray_stages.py` wraps this class with `ray.remote`. Ray re-runs `__init__` when it restarts the actor, so
a restarted replica is loaded and warmed before it takes requests. Inside the actor the host supervises its loops as
the runtime does in process: a loop that dies is restarted after RESTART_DELAY_S, and one whose GPU failed (a CUDA
error that poisons the context) ends the actor's process, for Ray to start it afresh. Cancelling a method's Ray task
cancels its coroutine, which leaves the stage loop's `submit` and aborts the request there (stages/loop.py).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import threading
import time
import uuid
from typing import Any, AsyncIterator, Callable

import numpy as np

from aura_omni.deploy import ASR, AURA, TALKER
from aura_omni.models.qwen3_tts.text_stream import TextFeed
from aura_omni.stages.supervision import Supervisor

log = logging.getLogger(__name__)

ENDED_KEPT = 4096  # streamed-text requests remembered after they end, so their late pieces are dropped
# Stage loops a stage object owns, by attribute (the AURA and ASR stages: `loop`; the TTS facade: two).
LOOP_ATTRIBUTES = ("loop", "talker_loop", "code2wav_loop")


def run_in_thread(coroutine) -> Any:
    """Run a coroutine to the end on a fresh event loop in a thread of its own (whatever loop the caller is on)."""
    out: dict[str, Any] = {}

    def main():
        try:
            out["value"] = asyncio.run(coroutine)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["error"] = e

    thread = threading.Thread(target=main, name="stage-host-warm-up")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


class StageHost:
    """`load(deploy, stage, device, dtype, load_format)` and `warm({role: model}, deploy, all_graphs)` come from
    pipeline/runtime.py (`load_stage`, `warm_models`): the same code that loads and warms the stage in process."""

    def __init__(self, deploy, stage_id: int, load: Callable | None, warm: Callable, device: str, dtype: str | None,
                 load_format: str | None, all_graphs: bool = True, model: Any = None):
        """`model`: the stage loaded already (a stage process loads its stages side by side first), else `load` loads
        it."""
        stage = deploy.stage_with_id(stage_id)
        self.role = deploy.role_of(stage)
        self.device = device
        self.model = model if model is not None else load(deploy, stage, device, dtype, load_format)
        self.started = uuid.uuid4().hex  # differs after every restart
        t = time.perf_counter()
        run_in_thread(warm({self.role: self.model}, deploy, all_graphs=all_graphs))
        self.warm_s = time.perf_counter() - t
        self.loops = {loop.name: loop for loop in (getattr(self.model, a, None) for a in LOOP_ATTRIBUTES)
                      if loop is not None}
        supervisor = Supervisor(on_device_lost=self._device_lost)
        for loop in self.loops.values():
            supervisor.supervise(loop)
        self.feeds: dict[str, _Feed] = {}  # streamed-text requests by id (their feeds may come before them)
        self.ended: collections.OrderedDict[str, None] = collections.OrderedDict()  # recent ones: late feeds dropped

    @staticmethod
    def _device_lost(loop) -> None:
        """A loop's GPU failed (its requests already failed): end this process for Ray to restart the actor, up to
        its `max_restarts`; a loop that died otherwise is restarted by the supervisor after RESTART_DELAY_S."""
        log.critical("stage %s: its GPU failed; ending this actor's process for Ray to restart it", loop.name)
        threading.Timer(0.2, os._exit, args=(1,)).start()  # the failed requests' answers leave first

    def inject_fault(self, loop: str, kind: str) -> None:
        """Tests only: `StageLoop.inject_fault` on one of this replica's loops."""
        self.loops[loop].inject_fault(kind)

    # ---- about the replica --------------------------------------------------------------------------
    def info(self) -> dict:
        """What the proxies need of the stage object (configs, speakers, languages) and where it runs."""
        import aura_omni

        out = {"role": self.role, "pid": os.getpid(), "started": self.started, "device": self.device,
               "warm_s": self.warm_s, "loops": sorted(self.loops), "aura_omni_file": aura_omni.__file__}
        model = self.model
        if self.role == TALKER:  # the Qwen3-TTS facade
            out.update(config=model.config, defaults=model.defaults, tokenizer=model.tokenizer,
                       has_codec=model.code2wav is not None)
        elif self.role == AURA:
            out.update(model_config=model.model.config)
        elif self.role == ASR:
            out.update(languages=model.languages)
        return out

    def busy(self) -> bool:
        """Whether any of the replica's loops holds a request (queued or in flight)."""
        return any(s.get("queued") or s.get("in_flight") for s in (loop.stats() for loop in self.loops.values()))

    def stats(self) -> dict:
        """Every loop's published counters (never waits for a step), its latency histograms and the start token (a new
        one: restarted)."""
        return {"started": self.started, "loops": {name: loop.stats() for name, loop in self.loops.items()},
                "latencies": {name: loop.latencies() for name, loop in self.loops.items()}}

    # ---- requests ---------------------------------------------------------------------------------------
    async def transcribe(self, request_id: str, audios: list[tuple[np.ndarray, int]], options: dict) -> list:
        """ASR: clips -> Transcripts (AsrService.atranscribe)."""
        audios = [(np.array(wav), sr) for wav, sr in audios]  # Ray hands numpy arrays over read-only
        return await self.model.atranscribe(audios, request_id=request_id, **options)

    async def generate(self, request_id: str, prompt, vision: list, sampling: dict | None) -> AsyncIterator:
        """AURA: prompt turns + vision -> AuraDelta (text, token ids) as decoded."""
        async for delta in self.model.generate(prompt, vision, request_id=request_id, sampling=sampling):
            yield delta

    async def prefill_prefix(self, request_id: str, prompt, vision: list) -> int:
        """AURA: the prompt through its vision into this replica's prefix cache (AuraPipelineStage.prefill_prefix)."""
        return await self.model.prefill_prefix(prompt, vision, request_id=request_id)

    async def speak(self, request_id: str, req, initial_chunk_frames: int, chunk_frames: int,
                    feed: tuple[list[int], bool] | None = None) -> AsyncIterator:
        """TTS: a Talker request -> 24 kHz float32 chunks (its codec frames stay inside this actor). `feed`: the text
        fed so far (ids, ended) of a request whose text arrives while it is spoken; the rest comes by `feed_text`."""
        if feed is not None:
            req = dataclasses.replace(req, text_feed=TextFeed(*feed))
            self.feeds.setdefault(request_id, _Feed()).start(self.model, request_id, req)
        try:
            async for chunk in self.model.astream(req, initial_chunk_frames, chunk_frames, request_id=request_id):
                yield np.asarray(chunk, dtype=np.float32)
        finally:
            if self.feeds.pop(request_id, None) is not None:
                self.ended[request_id] = None
                while len(self.ended) > ENDED_KEPT:
                    self.ended.popitem(last=False)

    def feed_text(self, request_id: str, number: int, ids: list[int], end: bool) -> None:
        """The `number`-th piece of a streamed text (Ray may deliver them out of order; they are applied in order)."""
        if request_id not in self.ended:
            self.feeds.setdefault(request_id, _Feed()).add(number, ids, end)

    async def frames(self, request_id: str, req) -> AsyncIterator:
        """TTS: a Talker request -> codec frames, int64 [16] each."""
        async for frame in self.model.frames(req, request_id):
            yield frame.cpu().numpy()

    async def create_voice_prompt(self, wav: np.ndarray, sample_rate: int, ref_text: str | None,
                                  x_vector_only: bool):
        """TTS (Base): a cloned voice from reference audio, on a worker thread (the actor's loop keeps serving)."""
        return await asyncio.to_thread(self.model.create_voice_prompt, np.array(wav), sample_rate, ref_text,
                                       x_vector_only)  # a writable copy: Ray hands numpy arrays over read-only


class _Feed:
    """The pieces of one streamed text, applied to its request in order once the request is here."""

    def __init__(self):
        self.pending: dict[int, tuple[list[int], bool]] = {}
        self.next = 0
        self.target = None  # (facade, request id, request) once `speak` has it

    def start(self, model, request_id: str, req) -> None:
        self.target = (model, request_id, req)
        self._apply()

    def add(self, number: int, ids: list[int], end: bool) -> None:
        self.pending[number] = (ids, end)
        self._apply()

    def _apply(self) -> None:
        if self.target is None:
            return
        model, request_id, req = self.target
        while self.next in self.pending:
            ids, end = self.pending.pop(self.next)
            self.next += 1
            model.feed_text(request_id, req, ids, end)
