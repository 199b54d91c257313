"""Stand-ins in the API process for the stage objects that live in Ray actors: the same async methods and attributes
the runtime, the orchestrator, the server and realtime sessions use, carrying plain data to and from the replicas.

    AsrProxy   ~ stages.asr.service.AsrService   atranscribe, transcribe, languages, stats
    AuraProxy  ~ stages.aura.stage.AuraPipelineStage   generate (streamed AuraDelta), prefill_prefix, stage,
                                                 model.config, stats
    TtsProxy   ~ stages.tts.Qwen3TTS             astream (text whole, or fed while spoken: feed_text), frames, validate,
                                                 create_voice_prompt, model_type, speakers, languages, text_tokens,
                                                 config, defaults, stats (several Talker stages: a TalkerSet of them)

Request checks that need only the checkpoint's config run here, with the facade's own code (TtsProxy.validate), so a
bad request is refused before anything crosses the network.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, AsyncIterator

import numpy as np
import torch

from aura_omni.placement import session_key
from aura_omni.placement.replicas import ReplicaSet
from aura_omni.stages.tts import Qwen3TTS, TTSRequest

_ids = itertools.count()


def _request_id(role: str, given: str | None) -> str:
    return given or f"{role}-ray-{next(_ids)}"


@dataclasses.dataclass(frozen=True)
class RemoteModel:
    """What callers read of a model that lives in an actor: its config (AURA's vocabulary size, ...)."""

    config: Any


class StageProxy:
    def __init__(self, replicas: ReplicaSet, info: dict):
        self.replicas = replicas
        self.info = info  # the first replica's `StageHost.info()`

    def stats(self) -> dict[str, dict]:
        """Offline and tests: every replica's loops' counters as last polled (`talker/0`, ...)."""
        return self.replicas.stage_stats()

    def close(self) -> None:
        """The placement owns the actors (RayPlacement.close)."""


class AsrProxy(StageProxy):
    @property
    def languages(self):
        return self.info["languages"]

    async def atranscribe(self, audios: list[tuple[np.ndarray, int]], language: str | None = None,
                          context: str | None = None, max_new_tokens: int | None = None, temperature: float = 0.0,
                          seed: int | None = None, request_id: str | None = None) -> list:
        options = dict(language=language, context=context, max_new_tokens=max_new_tokens, temperature=temperature,
                       seed=seed)
        return await self.replicas.call("transcribe", _request_id("asr", request_id), list(audios), options)

    def transcribe(self, audios: list[tuple[np.ndarray, int]], language: str | None = None, context: str | None = None,
                   max_new_tokens: int | None = None, temperature: float = 0.0, seed: int | None = None) -> list:
        options = dict(language=language, context=context, max_new_tokens=max_new_tokens, temperature=temperature,
                       seed=seed)
        return self.replicas.call_blocking("transcribe", _request_id("asr", None), list(audios), options)


def _host_vision(v):
    """A vision input as it crosses: its uint8 frames (the host recomputes patches), not float32 patches as well."""
    if getattr(v, "frames", None) is not None and getattr(v, "_pixels", None) is not None:
        return dataclasses.replace(v, _pixels=None)
    return v


class AuraProxy(StageProxy):
    def __init__(self, replicas: ReplicaSet, info: dict, stage):
        super().__init__(replicas, info)
        self.stage = stage  # the deploy's AURA stage (checkpoint, default sampling)
        self.model = RemoteModel(info["model_config"])

    async def generate(self, prompt, vision: list, *, request_id: str, sampling: dict | None = None) -> AsyncIterator:
        """AuraDelta as the replica decodes; a realtime session's requests stay on one replica (its prefix cache)."""
        vision = [_host_vision(v) for v in vision]
        async for delta in self.replicas.stream("generate", request_id, prompt, vision, sampling,
                                                session=session_key.get()):
            yield delta

    async def prefill_prefix(self, prompt, vision: list, *, request_id: str) -> int:
        """The prompt through its vision into the prefix cache of the replica the turn's request will use (the
        orchestrator keys a turn without a session by its own id)."""
        return await self.replicas.call("prefill_prefix", request_id, prompt, [_host_vision(v) for v in vision],
                                        session=session_key.get())


class TtsProxy(StageProxy):
    # The checkpoint's rules, run here: the facade's own code over the config, defaults and tokenizer the actor reported.
    model_type = Qwen3TTS.model_type
    speakers = Qwen3TTS.speakers
    languages = Qwen3TTS.languages
    sample_rate = Qwen3TTS.sample_rate
    task_types = Qwen3TTS.task_types
    validate = Qwen3TTS.validate
    text_tokens = Qwen3TTS.text_tokens
    _check_text_ids = Qwen3TTS._check_text_ids
    _sampling = Qwen3TTS._sampling

    def __init__(self, replicas: ReplicaSet, info: dict):
        super().__init__(replicas, info)
        self.config, self.defaults, self.tokenizer = info["config"], info["defaults"], info["tokenizer"]
        self._feeds: dict[str, list] = {}  # request id -> [its replica, next feed number] (streamed text)

    def for_task(self, task_type: str) -> "TtsProxy":
        return self

    @property
    def facades(self) -> list["TtsProxy"]:
        return [self]

    async def astream(self, req: TTSRequest, initial_chunk_frames: int = 1, chunk_frames: int = 25,
                      request_id: str | None = None) -> AsyncIterator[np.ndarray]:
        """24 kHz float32 chunks; Talker and Code2Wav run in the same replica, only the samples cross. Text that
        arrives while it is spoken (`req.text_feed`) follows through `feed_text`, to the same replica."""
        request_id = _request_id("tts", request_id)
        feed = None
        if req.text_feed is not None:  # the feed so far goes with the request, the rest after it (no await between)
            feed, req = req.text_feed.snapshot(), dataclasses.replace(req, text_feed=None)
        replica = self.replicas.pick()
        if feed is not None:
            self._feeds[request_id] = [replica, 0]
        try:
            async for chunk in self.replicas.stream("speak", request_id, req, initial_chunk_frames, chunk_frames, feed,
                                                    replica=replica):
                yield chunk
        finally:
            self._feeds.pop(request_id, None)

    def feed_text(self, request_id: str, req: TTSRequest, ids: list[int], end: bool = False) -> None:
        """More body ids of a running streamed-text request (and its end), sent to its replica in order."""
        req.text_feed.put(ids, end)  # what a request not yet sent will take with it
        sent = self._feeds.get(request_id)
        if sent is not None:
            replica, number = sent
            sent[1] += 1
            replica.actor.tell("feed_text", request_id, number, list(ids), end)

    async def frames(self, req: TTSRequest, request_id: str | None = None) -> AsyncIterator[torch.Tensor]:
        """Codec frames [16] (long, host) as the replica's Talker produces them."""
        async for frame in self.replicas.stream("frames", _request_id("tts", request_id), req):
            yield torch.from_numpy(frame)

    def create_voice_prompt(self, wav: np.ndarray, sr: int, ref_text: str | None = None, x_vector_only: bool = False):
        """Blocking (the runtime calls it on a worker thread): a cloned voice, made by one replica."""
        return self.replicas.call_blocking("create_voice_prompt", np.asarray(wav), int(sr), ref_text, x_vector_only)
