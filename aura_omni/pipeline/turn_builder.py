"""What a client asks of one turn -> a validated `TurnRequest`, shared by /v1/chat/completions and `Omni`.

Everything that can be refused is refused here, before any stage runs: unknown stages in
`sampling_params_list`, bad sampling values (incl. logit_bias ids outside AURA's vocabulary, which would
otherwise fail the shared engine step), TTS options (Base without a reference is refused in
milliseconds), undecodable media. The TTS request template, with the cloned voice's prompt computed
once, is then reused for every sentence of the reply.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import ASR, AURA, TALKER  # Code2Wav takes no sampling: its list entry is accepted, unused
from ..pipeline.constants import AURA_STOP_TOKEN_IDS
from ..pipeline.processors import PipelineRequestError, TTSOptions, as_bool, first_value, tts_options
from ..stages.engine_config import sampling_params
from ..pipeline.turn import TurnRequest
from .media_input import (MAX_REF_AUDIO_SECONDS, MEDIA_ERRORS, MediaPolicy, load_audio, load_image_input,
                          load_video_input)

# sampling_params_list keys the Talker honours -> TTSRequest fields
_TALKER_SAMPLING = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
                    "repetition_penalty": "repetition_penalty", "seed": "seed", "max_tokens": "max_new_tokens"}


@dataclass
class TurnSpec:
    """One turn as a client describes it, independent of the transport (HTTP or Python)."""

    audio: Any = None  # user speech: data URL / base64 / bytes / allowed path / (samples, rate)
    audio_is_base64: bool = False  # `audio` is OpenAI's input_audio.data: base64 only, never a path or URL
    vision: list[tuple[str, Any]] = field(default_factory=list)  # ("image" | "video", source) in message order
    text_parts: list[str] = field(default_factory=list)
    system_prompt: str | None = None  # from system messages; additional_information.aura_system_prompt wins
    history: list[tuple[str, str]] = field(default_factory=list)  # earlier (role, text) turns
    speak: bool | None = None  # None: speak when the deployment has TTS stages
    info: dict = field(default_factory=dict)  # vLLM-Omni additional_information
    voice: str | None = None  # OpenAI audio.voice: a CustomVoice speaker or a registered voice
    stage_sampling: list[dict | None] | None = None  # sampling_params_list, one entry per stage in order
    aura_sampling: dict = field(default_factory=dict)  # explicit top-level OpenAI fields: win for AURA
    timeout_s: float | None = None


class VoiceRegistry(Protocol):
    """Cloned voices by name (server/voices.py keeps them): `get` -> a voice with `.prompt`, or None."""

    def get(self, name: str) -> Any: ...


class _RegisteredNames:
    """`name in registered` against the voice registry (case-insensitive, like the registry)."""

    def __init__(self, voices: VoiceRegistry | None):
        self.voices = voices

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.voices is not None and self.voices.get(name) is not None


class TurnBuilder:
    def __init__(self, runtime, voices: VoiceRegistry | None = None, policy: MediaPolicy = MediaPolicy()):
        self.runtime, self.voices, self.policy = runtime, voices, policy

    def stage_entries(self, entries: list[dict | None] | None) -> dict[str, dict]:
        """sampling_params_list -> role -> that stage's dict; absent tail entries keep the YAML defaults."""
        stages = sorted(self.runtime.deploy.stages, key=lambda s: s.stage_id)
        entries = list(entries or [])
        if len(entries) > len(stages):
            raise PipelineRequestError(f"sampling_params_list has {len(entries)} entries; this deployment has "
                                       f"{len(stages)} stages ({', '.join(self.runtime.deploy.role_of(s) for s in stages)})")
        return {self.runtime.deploy.role_of(s): dict(e) for s, e in zip(stages, entries) if e}

    def aura_sampling(self, entry: dict, overrides: dict) -> dict:
        merged = {**entry, **overrides}
        aura = self.runtime.models.get(AURA)
        if aura is None:
            return merged
        params = sampling_params(aura.stage.default_sampling_params, merged, stop_token_ids=list(AURA_STOP_TOKEN_IDS))
        vocab = aura.model.config.vocab_size
        bad = sorted(t for t in params.logit_bias if not 0 <= t < vocab)
        if bad:
            raise PipelineRequestError(f"logit_bias: token id {bad[0]} is outside AURA's vocabulary (size {vocab})")
        return merged

    async def tts_template(self, opts: TTSOptions, info: dict, entry: dict, registered=None):
        """The Talker request for every sentence of this turn, with the cloned voice's prompt computed once.
        `registered`: the voice `opts.voice` named, fetched once when the options were checked."""
        from ..stages.tts import TTSRequest, TTSRequestError

        tts = self.runtime.models[TALKER]
        language = next((lang for lang in tts.languages if lang.lower() == opts.language.lower()), None)
        if language is None:
            raise PipelineRequestError(f"tts_language: unknown language {opts.language!r}; this checkpoint has "
                                       f"{sorted(tts.languages)}")
        stage = self.runtime.deploy.stage(TALKER)
        defaults = stage.default_sampling_params.model_dump(exclude_none=True)
        sampling = {ours: v for key, ours in _TALKER_SAMPLING.items()
                    if (v := entry.get(key, defaults.get(key))) is not None}
        if info.get("tts_max_new_tokens") is not None:
            sampling["max_new_tokens"] = opts.max_new_tokens
        sub = stage.subtalker_sampling_params
        if sub is not None:
            sampling.update({k: v for k, v in dict(subtalker_dosample=sub.do_sample, subtalker_temperature=sub.temperature,
                                                   subtalker_top_k=sub.top_k, subtalker_top_p=sub.top_p).items()
                             if v is not None})
        template = TTSRequest(task_type=opts.task_type, language=language, speaker=opts.speaker,
                              instruct=opts.instruct, non_streaming_mode=opts.non_streaming_mode, **sampling)
        if opts.task_type == "Base":
            if opts.ref_audio is not None:
                try:
                    wav, sr = await asyncio.to_thread(load_audio, opts.ref_audio, self.policy, MAX_REF_AUDIO_SECONDS)
                except MEDIA_ERRORS as e:
                    raise PipelineRequestError(f"tts_ref_audio: {e}") from None
                if len(wav) / sr > MAX_REF_AUDIO_SECONDS:
                    raise PipelineRequestError(f"tts_ref_audio: reference audio is {len(wav) / sr:.1f} s; at most "
                                               f"{MAX_REF_AUDIO_SECONDS:.0f} s")
                try:
                    voice = await self.runtime.voice_prompt(wav, sr, opts.ref_text, opts.x_vector_only)
                except TTSRequestError as e:
                    raise PipelineRequestError(f"tts_ref_audio: {e}") from None
            else:
                if registered is None:
                    raise PipelineRequestError(f"voice: {opts.voice!r} is not a registered voice (was it deleted?)")
                voice = registered.prompt
            template = dataclasses.replace(template, voice=voice)
        tts.validate(dataclasses.replace(template, text="check"))  # TTSRequestError: speaker, sampling, ...
        return template

    async def build(self, spec: TurnSpec, request_id: str) -> TurnRequest:
        info = spec.info or {}
        speak = (TALKER in self.runtime.models) if spec.speak is None else spec.speak
        # missing stages first: refused before any work (the probe carries stand-ins for audio and template)
        self.runtime.pipeline.check(TurnRequest(request_id, audio=spec.audio, speak=speak, tts=speak or None))
        entries = self.stage_entries(spec.stage_sampling)
        aura_sampling = self.aura_sampling(entries.get(AURA, {}), spec.aura_sampling)
        opts = registered = None
        if speak:  # cheap option checks (Base without a reference fails here, in milliseconds)
            opts = tts_options(info, checkpoint_type=self.runtime.models[TALKER].model_type,
                               registered_voices=_RegisteredNames(self.voices), voice=spec.voice)
            # keep the voice object: a DELETE while the media below decodes must not pull it from under us
            registered = self.voices.get(opts.voice) if self.voices is not None and opts.voice else None
        self.policy.limits.check_counts(sum(kind == "image" for kind, _ in spec.vision),
                                        sum(kind == "video" for kind, _ in spec.vision))
        audio = None
        if spec.audio is not None:
            audio = await asyncio.to_thread(load_audio, spec.audio, self.policy, None, spec.audio_is_base64)
        vision = [await asyncio.to_thread(self._vision, kind, source) for kind, source in spec.vision]
        template = await self.tts_template(opts, info, entries.get(TALKER, {}), registered) if speak else None
        return TurnRequest(
            request_id, audio=audio, vision=vision, text_parts=list(spec.text_parts), history=list(spec.history),
            system_prompt=first_value(info.get("aura_system_prompt")) or spec.system_prompt,
            is_speech=as_bool(info["is_speech"]) if info.get("is_speech") is not None else True,
            speak=speak, tts=template, tts_pass_token_ids=bool(opts and opts.pass_token_ids),
            asr_sampling=entries.get(ASR), aura_sampling=aura_sampling,
            asr_language=first_value(info.get("asr_language")), asr_context=first_value(info.get("asr_context")),
            timeout_s=spec.timeout_s)

    def _vision(self, kind: str, source: Any):
        aura = self.runtime.models.get(AURA)
        checkpoint = getattr(getattr(aura, "stage", None), "model", None)
        if kind == "image":
            return load_image_input(source, self.policy, checkpoint)
        if kind == "video":
            return load_video_input(source, self.policy, checkpoint)
        raise PipelineRequestError(f"unknown vision input kind {kind!r}")

