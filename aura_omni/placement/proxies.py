"""Stand-ins in the API process for the stage objects that live in Ray actors: the same async methods and attributes
the runtime, the orchestrator, the server and realtime sessions use, carrying plain data to and from the replicas.

    AsrProxy   ~ asr.service.AsrService          atranscribe, transcribe, languages, stats
    AuraProxy  ~ pipeline.aura_stage.AuraPipelineStage   generate (streamed AuraDelta), stage, model.config, stats
    TtsProxy   ~ stages.tts.Qwen3TTS             astream, frames, validate, create_voice_prompt, model_type, speakers,
                                                 languages, config, defaults, stats

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


class TtsProxy(StageProxy):
    # The checkpoint's rules, run here: the facade's own code over the config and defaults the actor reported.
    model_type = Qwen3TTS.model_type
    speakers = Qwen3TTS.speakers
    languages = Qwen3TTS.languages
    sample_rate = Qwen3TTS.sample_rate
    validate = Qwen3TTS.validate
    _check_text_ids = Qwen3TTS._check_text_ids
    _sampling = Qwen3TTS._sampling

    def __init__(self, replicas: ReplicaSet, info: dict):
        super().__init__(replicas, info)
        self.config, self.defaults = info["config"], info["defaults"]

    async def astream(self, req: TTSRequest, initial_chunk_frames: int = 1, chunk_frames: int = 25,
                      request_id: str | None = None) -> AsyncIterator[np.ndarray]:
        """24 kHz float32 chunks; Talker and Code2Wav run in the same replica, only the samples cross."""
        async for chunk in self.replicas.stream("speak", _request_id("tts", request_id), req, initial_chunk_frames,
                                                chunk_frames):
            yield chunk

    async def frames(self, req: TTSRequest, request_id: str | None = None) -> AsyncIterator[torch.Tensor]:
        """Codec frames [16] (long, host) as the replica's Talker produces them."""
        async for frame in self.replicas.stream("frames", _request_id("tts", request_id), req):
            yield torch.from_numpy(frame)

    def create_voice_prompt(self, wav: np.ndarray, sr: int, ref_text: str | None = None, x_vector_only: bool = False):
        """Blocking (the runtime calls it on a worker thread): a cloned voice, made by one replica."""
        return self.replicas.call_blocking("create_voice_prompt", np.asarray(wav), int(sr), ref_text, x_vector_only)
