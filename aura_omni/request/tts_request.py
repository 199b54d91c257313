"""The one way a Talker request is built, whichever API asked: `/v1/audio/speech`, the chat's
`additional_information` and `Omni` keyword arguments each describe a `TTSAsk` (with the request's own names
for its fields, so errors name them), and `build_tts_request` turns it into the `TTSRequest` template every
sentence of a reply reuses.

Two steps, so a chat turn refuses cheaply before decoding any media: `check_tts` (milliseconds: task type,
language, speaker, reference present, token cap) and `finish_tts` (the reference audio decoded by the one
loader the caller passes, its clone prompt computed once, the result validated by the checkpoint).

One set of defaults: the task type follows the loaded checkpoint; `max_new_tokens` defaults to the deploy's
Talker `max_tokens` and is capped by it and by the server limit (`talker_token_cap`); sampling comes from the
Talker stage's `default_sampling_params` and `subtalker_sampling_params`, overridden by the request.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from ..deploy import Stage
from ..media.audio import AudioDecodeError
from ..media.limits import Limits, MediaError
from ..stages.deploy_settings import SAMPLING_KEYS
from ..stages.tts import TTSRequest, TTSRequestError
from ..pipeline.constants import DEFAULT_CUSTOM_VOICE_SPEAKER
from ..pipeline.processors import PipelineRequestError, normalize_speaker

TASK_ALIASES = {"base": "Base", "customvoice": "CustomVoice", "custom_voice": "CustomVoice",
                "voicedesign": "VoiceDesign", "voice_design": "VoiceDesign"}
TALKER_SAMPLING = ("temperature", "top_k", "top_p", "repetition_penalty", "seed")  # request keys -> TTSRequest


@dataclass(frozen=True)
class TTSAsk:
    """What a client asked of the Talker. `params` maps a field to the request's own name for it (errors)."""

    task_type: str | None = None
    language: str | None = None
    voice: str | None = None  # a CustomVoice speaker, or a registered (cloned) voice for Base
    instruct: str | None = None
    ref_audio: Any = None  # base64 / data URL / allowed path / bytes / (samples, rate)
    ref_text: str | None = None
    x_vector_only: bool = False
    max_new_tokens: int | None = None
    non_streaming_mode: bool | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)  # TALKER_SAMPLING keys
    params: Mapping[str, str] = field(default_factory=dict)

    def param(self, name: str) -> str:
        return self.params.get(name, name)


@dataclass(frozen=True)
class TalkerContext:
    """What building a request needs of the deployment (the caller's runtime, voices and media policy)."""

    tts: Any  # stages.tts.Qwen3TTS: model_type, speakers, languages, validate()
    stage: Stage  # the deploy's Talker stage
    max_new_tokens: int  # default and cap (talker_token_cap)
    voices: Any = None  # registry: get(name) -> RegisteredVoice | None
    load_reference: Callable[[Any], tuple[Any, int]] | None = None  # blocking: source -> (float32 mono, rate)
    voice_prompt: Callable[..., Awaitable[Any]] | None = None  # (wav, rate, ref_text, x_vector_only) -> prompt


@dataclass(frozen=True)
class TTSPlan:
    template: TTSRequest  # everything but the voice
    reference: Any = None  # reference audio to clone from
    registered: Any = None  # the registered voice, fetched once (a DELETE meanwhile does not pull it away)


def sampling_field(message: str) -> str | None:
    """The sampling field a range check's message starts with ("top_p must be ..."), for `param`."""
    word = message.split(" ", 1)[0]
    return word if word in SAMPLING_KEYS or word in TALKER_SAMPLING else None


def talker_token_cap(stage: Stage | None, limits: Limits) -> int:
    """The deploy's Talker `max_tokens` (also the default), never above the server's `max_tts_new_tokens`."""
    deploy = stage.default_sampling_params.max_tokens if stage is not None else None
    return min(deploy, limits.max_tts_new_tokens) if deploy else limits.max_tts_new_tokens


def _match(name: str, choices, what: str, param: str) -> str:
    for c in choices or ():
        if c.lower() == name.strip().lower():
            return c
    raise PipelineRequestError(f"{param}: unknown {what} {name!r}; send one of {', '.join(sorted(choices or []))}",
                               param=param, code=f"unknown_{what}")


def _voice_name(ask: TTSAsk, voices) -> tuple[str | None, Any]:
    name = (ask.voice or "").strip() or None
    return name, (voices.get(name) if voices is not None and name else None)


def _implied_task(ask: TTSAsk, tts, name: str | None, registered) -> str:
    """The task type of a request that names none: the one checkpoint's, or, where several are deployed, Base for a
    reference or a registered voice and CustomVoice for one of its speakers."""
    served = tts.task_types
    if len(served) == 1:
        return served[0]
    if "Base" in served and (ask.ref_audio is not None or registered is not None):
        return "Base"
    if "CustomVoice" in served and (name is None or name.lower() in {s.lower() for s in tts.speakers or []}):
        return "CustomVoice"
    return "Base" if "Base" in served else served[0]


def check_tts(ask: TTSAsk, ctx: TalkerContext) -> TTSPlan:
    """Everything about the request that can be refused without decoding audio (PipelineRequestError)."""
    served = ctx.tts.task_types
    name, registered = _voice_name(ask, ctx.voices)
    if ask.task_type is not None:
        task = TASK_ALIASES.get(str(ask.task_type).replace(" ", "").lower())
        if task is None:
            raise PipelineRequestError(f"{ask.param('task_type')}: unknown task type {ask.task_type!r}; send Base, "
                                       f"CustomVoice or VoiceDesign", param=ask.param("task_type"),
                                       code="unsupported_task_type")
    else:
        task = _implied_task(ask, ctx.tts, name, registered)
    if task not in served:
        raise PipelineRequestError(f"{ask.param('task_type')}: {task} needs a Qwen3-TTS {task} checkpoint; this "
                                   f"deployment serves {' and '.join(served)}: send one of them or leave the field "
                                   f"out", param=ask.param("task_type"), code="unsupported_task_type")
    tts = ctx.tts.for_task(task)
    language = _match(ask.language, tts.languages, "language", ask.param("language")) if ask.language else "auto"
    if ask.max_new_tokens is not None and not 1 <= ask.max_new_tokens <= ctx.max_new_tokens:
        raise PipelineRequestError(f"{ask.param('max_new_tokens')}: at most {ctx.max_new_tokens} for this deployment "
                                   f"(got {ask.max_new_tokens}); send 1 to {ctx.max_new_tokens}",
                                   param=ask.param("max_new_tokens"), code="limit_exceeded")
    defaults = ctx.stage.default_sampling_params
    sampling = {k: getattr(defaults, k) for k in TALKER_SAMPLING if getattr(defaults, k) is not None}
    sampling.update({k: v for k, v in ask.sampling.items() if k in TALKER_SAMPLING and v is not None})
    sub = ctx.stage.subtalker_sampling_params
    if sub is not None:
        sampling.update({k: v for k, v in dict(subtalker_dosample=sub.do_sample, subtalker_temperature=sub.temperature,
                                               subtalker_top_k=sub.top_k, subtalker_top_p=sub.top_p).items()
                         if v is not None})
    instruct = (ask.instruct or "").strip() or None
    speaker = reference = None
    if task == "Base":
        if ask.ref_audio is not None and not (isinstance(ask.ref_audio, str) and not ask.ref_audio.strip()):
            registered = None  # an inline reference wins over `voice` (OpenAI's SDK always sends one)
            if not ask.x_vector_only and not (ask.ref_text or "").strip():
                raise PipelineRequestError(
                    f"{ask.param('ref_text')}: in-context cloning needs the transcript of the reference audio; send "
                    f"{ask.param('ref_text')}, or set {ask.param('x_vector_only')}: true", param=ask.param("ref_text"),
                    code="missing_ref_text")
            reference = ask.ref_audio
        elif registered is None:
            presets = sorted(ctx.tts.speakers or [])  # a CustomVoice Talker deployed beside this one
            if not name:
                got = "no voice was given"
            elif presets:
                got = f"{name!r} is neither a registered voice nor a preset speaker ({', '.join(presets)})"
            else:
                got = (f"{name!r} is not a registered voice (preset speakers such as Vivian need a CustomVoice "
                       f"checkpoint, which this deployment does not serve)")
            raise PipelineRequestError(
                f"{ask.param('voice')}: a Base checkpoint clones a reference voice and {got}; send "
                f"{ask.param('ref_audio')} (with {ask.param('ref_text')}) or register a voice with "
                f"POST /v1/audio/voices", param=ask.param("voice"), code="missing_reference")
        instruct = None
    elif task == "CustomVoice":
        if registered is not None:
            raise PipelineRequestError(f"{ask.param('voice')}: {name!r} is a cloned voice, and cloning needs a Base "
                                       f"checkpoint; send one of the speakers of GET /v1/audio/voices",
                                       param=ask.param("voice"), code="unsupported_task_type")
        speaker = normalize_speaker(_match(name or DEFAULT_CUSTOM_VOICE_SPEAKER, tts.speakers, "speaker",
                                           ask.param("voice")))
    else:  # VoiceDesign: the voice is described in words
        registered = None
        if not instruct:
            raise PipelineRequestError(f"{ask.param('instruct')}: VoiceDesign needs a description of the voice in "
                                       f"words", param=ask.param("instruct"), code="missing_instructions")
    known = {f.name for f in dataclasses.fields(TTSRequest)}
    template = TTSRequest(task_type=task, language=language, speaker=speaker, instruct=instruct,
                          non_streaming_mode=ask.non_streaming_mode,
                          max_new_tokens=ask.max_new_tokens or ctx.max_new_tokens,
                          **{k: v for k, v in sampling.items() if k in known})
    return TTSPlan(template, reference=reference, registered=registered)


async def finish_tts(plan: TTSPlan, ask: TTSAsk, ctx: TalkerContext) -> TTSRequest:
    """The plan with its voice resolved (reference decoded and cloned), validated by the checkpoint."""
    template = plan.template
    if plan.reference is not None:
        try:
            wav, sr = await asyncio.to_thread(ctx.load_reference, plan.reference)
        except (MediaError, AudioDecodeError) as e:
            raise PipelineRequestError(f"{ask.param('ref_audio')}: {e}", param=ask.param("ref_audio"),
                                       code="invalid_audio") from None
        try:
            voice = await ctx.voice_prompt(wav, sr, (ask.ref_text or "").strip() or None, ask.x_vector_only)
        except TTSRequestError as e:  # unusable reference audio (NaN, too short, ...)
            raise PipelineRequestError(f"{ask.param('ref_audio')}: {e}; send a clear recording of the voice, a few "
                                       f"seconds long", param=ask.param("ref_audio"), code="invalid_audio") from None
        template = dataclasses.replace(template, voice=voice)
    elif plan.registered is not None:
        template = dataclasses.replace(template, voice=plan.registered.prompt)
    try:
        ctx.tts.validate(dataclasses.replace(template, text="check"))  # sampling values the checkpoint refuses
    except TTSRequestError as e:
        raise PipelineRequestError(f"{e}; send a value in range", param=sampling_field(str(e))) from None
    return template


async def build_tts_request(ask: TTSAsk, ctx: TalkerContext) -> TTSRequest:
    return await finish_tts(check_tts(ask, ctx), ask, ctx)
