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
import functools
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..deploy import ASR, AURA, TALKER  # Code2Wav takes no sampling: its list entry is accepted, unused
from ..media.limits import LimitError, Limits
from .additional_information import AdditionalInformation
from ..pipeline.constants import AURA_STOP_TOKEN_IDS, DEFAULT_TTS_LANGUAGE
from ..pipeline.processors import PipelineRequestError
from ..stages.deploy_settings import sampling_params
from .tts_request import (TALKER_SAMPLING, TalkerContext, check_tts, finish_tts, sampling_field,
                                    talker_token_cap)
from ..pipeline.tool_calls import TOOL_CALL_TOKEN_ID, ToolUse
from ..pipeline.turn import TurnRequest
from ..engine.grammar import Grammar, GrammarError
from ..media.request_media import (MEDIA_ERRORS, MediaPolicy, load_audio, load_image_input, load_reference_audio,
                                   load_video_input)


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
    played: bool = True  # the reply's audio is played as it comes (streamed); False: taken whole (TTSRequest.played)
    info: dict = field(default_factory=dict)  # vLLM-Omni additional_information (AdditionalInformation keys)
    voice: str | None = None  # OpenAI audio.voice: a CustomVoice speaker or a registered voice
    info_param: str = "additional_information"  # where the client put `info` ("" for keyword arguments)
    voice_param: str = "audio.voice"  # where the client put `voice`
    stage_sampling: list[dict | None] | None = None  # sampling_params_list, one entry per stage in order
    aura_sampling: dict = field(default_factory=dict)  # explicit top-level OpenAI fields: win for AURA
    timeout_s: float | None = None
    tool_use: ToolUse | None = None  # tools, tool_choice, parallel_tool_calls
    output_schema: dict | None = None  # response_format: the reply is JSON valid under this schema
    output_schema_param: str = "response_format"
    # where each input sits in the request, for errors (`messages[0].content[1].image_url`)
    audio_param: str = "audio"
    vision_params: list[str] = field(default_factory=list)
    content_param: str = "content"  # the user turn as a whole


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

    @property
    def limits(self) -> Limits:
        return self.policy.limits

    def talker_context(self) -> TalkerContext:
        """How this server builds Talker requests: its checkpoint, deploy defaults and cap, voices, reference loader."""
        stage = self.runtime.deploy.stage(TALKER)
        return TalkerContext(tts=self.runtime.models[TALKER], stage=stage,
                             max_new_tokens=talker_token_cap(stage, self.limits), voices=self.voices,
                             load_reference=functools.partial(load_reference_audio, policy=self.policy),
                             voice_prompt=self.runtime.voice_prompt)

    def stage_entries(self, entries: list[dict | None] | None) -> dict[str, tuple[int, dict]]:
        """sampling_params_list -> role -> (index, that stage's dict); absent tail entries keep the YAML defaults."""
        stages = sorted(self.runtime.deploy.stages, key=lambda s: s.stage_id)
        entries = list(entries or [])
        if len(entries) > len(stages):
            raise PipelineRequestError(
                f"sampling_params_list has {len(entries)} entries; this deployment has {len(stages)} stages "
                f"({', '.join(self.runtime.deploy.role_of(s) for s in stages)}): send at most one entry per stage",
                param="sampling_params_list")
        return {self.runtime.deploy.role_of(s): (i, dict(e)) for i, (s, e) in enumerate(zip(stages, entries)) if e}

    def aura_sampling(self, entry: tuple[int, dict] | None, overrides: dict) -> dict:
        index, values = entry or (None, {})
        merged = {**values, **overrides}
        for key in merged.get("logit_bias") or {}:
            if not str(key).lstrip("-").isdigit():
                raise PipelineRequestError(f"logit_bias: {key!r} is not a token id; send token ids as keys "
                                           f"(e.g. {{\"151669\": -100}})", param="logit_bias")
        param = "max_tokens" if "max_tokens" in overrides else f"sampling_params_list[{index}].max_tokens"
        self.limits.check_tokens(merged.get("max_tokens"), self.limits.max_aura_tokens, param)
        aura = self.runtime.models.get(AURA)
        if aura is None:
            return merged
        try:
            params = sampling_params(aura.stage.default_sampling_params, merged,
                                     stop_token_ids=list(AURA_STOP_TOKEN_IDS))
        except (ValueError, TypeError) as e:  # the engine's own range checks of the merged values
            raise PipelineRequestError(f"{e}; send a value in range", param=sampling_field(str(e))) from None
        vocab = aura.model.config.vocab_size
        bad = sorted(t for t in params.logit_bias if not 0 <= t < vocab)
        if bad:
            raise PipelineRequestError(f"logit_bias: token id {bad[0]} is outside AURA's vocabulary (size {vocab}); "
                                       f"send ids from 0 to {vocab - 1}", param="logit_bias")
        return merged

    def asr_sampling(self, entry: tuple[int, dict] | None) -> dict | None:
        if entry is None:
            return None
        index, values = entry
        self.limits.check_tokens(values.get("max_tokens"), self.limits.max_asr_tokens,
                                 f"sampling_params_list[{index}].max_tokens")
        return values

    def tts_ask(self, info: AdditionalInformation, spec: TurnSpec, entry: tuple[int, dict] | None):
        """The turn's Talker request as asked: additional_information, the Talker's sampling_params_list entry, the
        OpenAI `audio.voice`. The entry's max_tokens counts when tts_max_new_tokens is not given."""
        index, values = entry or (None, {})
        ask = info.tts_ask(spec.voice, {k: values[k] for k in TALKER_SAMPLING if k in values},
                           default_language=DEFAULT_TTS_LANGUAGE,  # vLLM-Omni aura2tts speaks English by default
                           prefix=spec.info_param, voice_param=spec.voice_param)
        if values.get("max_tokens") is not None:
            param = f"sampling_params_list[{index}].max_tokens"
            entry_ask = dataclasses.replace(ask, max_new_tokens=values["max_tokens"],
                                            params={**ask.params, "max_new_tokens": param})
            check_tts(entry_ask, self.talker_context())  # in range even where tts_max_new_tokens wins
            if ask.max_new_tokens is None:
                ask = entry_ask
        return ask

    async def build(self, spec: TurnSpec, request_id: str) -> TurnRequest:
        info = AdditionalInformation.parse(spec.info)
        speak = (TALKER in self.runtime.models) if spec.speak is None else spec.speak
        # missing stages first: refused before any work (the probe carries stand-ins for audio and template)
        self.runtime.pipeline.check(TurnRequest(request_id, audio=spec.audio, speak=speak, tts=speak or None))
        entries = self.stage_entries(spec.stage_sampling)
        aura_sampling = self.aura_sampling(entries.get(AURA), spec.aura_sampling)
        await self.constrain(aura_sampling, spec)
        asr_sampling = self.asr_sampling(entries.get(ASR))
        ask = plan = talker = None
        if speak:  # cheap checks first: Base without a reference fails here, in milliseconds
            talker = self.talker_context()
            ask = self.tts_ask(info, spec, entries.get(TALKER))
            plan = check_tts(ask, talker)
        try:
            self.limits.check_counts(sum(kind == "image" for kind, _ in spec.vision),
                                     sum(kind == "video" for kind, _ in spec.vision))
        except MEDIA_ERRORS as e:
            raise PipelineRequestError(f"{spec.content_param}: {e}; send fewer", param=spec.content_param) from None
        audio = None
        if spec.audio is not None:
            try:
                audio = await asyncio.to_thread(load_audio, spec.audio, self.policy, None, spec.audio_is_base64)
            except MEDIA_ERRORS as e:
                raise PipelineRequestError(f"{spec.audio_param}: {e}", param=spec.audio_param) from None
        vision = []
        for i, (kind, source) in enumerate(spec.vision):
            param = spec.vision_params[i] if i < len(spec.vision_params) else f"{kind}[{i}]"
            try:
                vision.append(await asyncio.to_thread(self._vision, kind, source))
            except MEDIA_ERRORS as e:
                raise PipelineRequestError(f"{param}: {e}", param=param) from None
        self.check_vision_totals(vision, spec.content_param)
        template = dataclasses.replace(await finish_tts(plan, ask, talker), played=spec.played) if speak else None
        return TurnRequest(
            request_id, audio=audio, vision=vision, text_parts=list(spec.text_parts), history=list(spec.history),
            system_prompt=info.aura_system_prompt or spec.system_prompt,
            is_speech=info.is_speech if info.is_speech is not None else True,
            speak=speak, tts=template, tts_pass_token_ids=info.tts_pass_token_ids,
            asr_sampling=asr_sampling, aura_sampling=aura_sampling,
            asr_language=info.asr_language, asr_context=info.asr_context, timeout_s=spec.timeout_s,
            tool_use=spec.tool_use)

    async def constrain(self, sampling: dict, spec: TurnSpec) -> None:
        """The turn's grammar into AURA's sampling (`grammar`): a forced tool choice, else a response_format schema.
        Each schema is checked first, so one the compiler cannot take is a 400 naming its path; the grammar is then
        compiled (and cached) here, off the request's first token. Under tool_choice "none" the <tool_call> token is
        banned."""
        tools = spec.tool_use
        if tools is not None and tools.choice == "none":
            sampling["logit_bias"] = {**(sampling.get("logit_bias") or {}), str(TOOL_CALL_TOKEN_ID): float("-inf")}
        grammar, schemas = None, []
        if tools is not None and (grammar := tools.grammar()) is not None:
            schemas = [(f"tools[{i}].function.parameters", f.get("parameters")) for i, f in enumerate(tools.functions())
                       if tools.choice == "required" or f.get("name") == tools.function]
        elif spec.output_schema is not None:
            grammar = Grammar.json_schema(spec.output_schema)
            schemas = [(spec.output_schema_param, spec.output_schema)]
        if grammar is None:
            return
        compiler = getattr(self.runtime.models.get(AURA), "grammars", None)  # None: a remote stage checks it itself
        if compiler is not None:
            try:
                for param, schema in schemas:
                    if schema is not None:
                        await asyncio.to_thread(compiler.check_schema, schema, param)
                await asyncio.to_thread(compiler.compile, grammar)
            except GrammarError as e:  # a schema's own path, else the field that asked for the grammar
                param = e.path if e.path != "$" else ("tool_choice" if spec.output_schema is None or tools
                                                      and tools.grammar() else spec.output_schema_param)
                raise PipelineRequestError(f"{param}: this schema cannot be used for constrained decoding: {e}",
                                           param=param, code="invalid_schema") from None
        sampling["grammar"] = grammar

    def check_vision_totals(self, vision: list, param: str) -> None:
        """Frames and pixels (as AURA sees them, after resizing) summed over the request's images and videos."""
        frames = sum(v.frames.shape[0] for v in vision if v.kind == "video" and v.frames is not None)
        if frames > self.limits.max_frames_per_request:
            raise LimitError(f"the request's videos keep {frames} frames; at most {self.limits.max_frames_per_request} "
                             f"per request: send shorter or fewer videos", param=param)
        pixels = sum(v.frames.shape[0] * v.frames.shape[-2] * v.frames.shape[-1] for v in vision if v.frames is not None)
        if pixels > self.limits.max_pixels_per_request:
            raise LimitError(f"the request's images and videos come to {pixels} pixels after resizing; at most "
                             f"{self.limits.max_pixels_per_request} per request: send fewer or smaller ones", param=param)

    def _vision(self, kind: str, source: Any):
        aura = self.runtime.models.get(AURA)
        checkpoint = getattr(getattr(aura, "stage", None), "model", None)
        if kind == "image":
            return load_image_input(source, self.policy, checkpoint)
        if kind == "video":
            return load_video_input(source, self.policy, checkpoint)
        raise PipelineRequestError(f"unknown vision input kind {kind!r}; send image or video")
