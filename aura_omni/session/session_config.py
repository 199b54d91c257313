"""A realtime session's settings: `session.update` (GA nested or beta flat shape) -> `SessionConfig`.

A new session starts from its dialect's defaults (`SessionConfig.for_session`): OpenAI's (server VAD, 24 kHz input)
or vLLM-Omni duplex's (push-to-talk, 16 kHz input, `ack_only`). Only the fields a client sends change. OpenAI's
values are served: `semantic_vad` is the server VAD with a silence wait set by its eagerness, and OpenAI voice names
are aliases of Talker voices (`voice_aliases`). What this server cannot do is refused with the field's name (an input
or output rate it does not serve) rather than ignored; tools are checked as OpenAI checks them (session/tools.py); fields that change nothing here (tracing, noise
reduction, input transcription model) are accepted and echoed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..media.wire_audio import G711, G711_RATE
from ..request.additional_information import AdditionalInformation
from ..pipeline.constants import ASR_SAMPLE_RATE, TTS_SAMPLE_RATE
from ..pipeline.processors import PipelineRequestError
from .errors import ClientError
from .tools import TOOL_KEYS, tool_settings

INPUT_SAMPLE_RATES = (16000, 24000)  # pcm16 input the session resamples to ASR's 16 kHz
OPENAI_INPUT_SAMPLE_RATE = 24000  # OpenAI Realtime's pcm16 is 24 kHz
PCM_FORMATS = ("pcm16", "pcm_s16le", "s16le", "audio/pcm")
GA_G711 = {"audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}  # GA format type -> the beta name used here
G711_GA = {name: kind for kind, name in GA_G711.items()}
DEFAULT_MAX_FRAMES = 2  # AURA sees the latest 2 frames per turn (vLLM-Omni aura duplex input)
FRAME_FILTER_THRESHOLD = 0.95  # vLLM-Omni frame_filter_threshold: a frame at least this similar is dropped
MAX_FRAMES_LIMIT = 16  # vLLM-Omni max_frames_per_round
PLAYBACK_POLICIES = ("ack_only", "commit_all_on_done")
# semantic_vad: the silence that ends a turn, by eagerness ("auto" is OpenAI's default and means medium); high
# answers as soon as server_vad's default, low lets the user pause mid-sentence
EAGERNESS_SILENCE_MS = {"high": 500, "medium": 800, "auto": 800, "low": 1500}
# OpenAI's realtime voices -> Qwen3-TTS CustomVoice presets (English: Ryan, Aiden; Chinese-native voices that also
# speak English: Vivian, Serena, Uncle_Fu), by the voice's register; the deploy key `voice_aliases` replaces it
OPENAI_VOICE_ALIASES = {"alloy": "vivian", "ash": "ryan", "ballad": "uncle_fu", "coral": "serena", "echo": "aiden",
                        "sage": "serena", "shimmer": "vivian", "verse": "ryan", "marin": "vivian", "cedar": "aiden"}


class SessionConfigError(ValueError):
    def __init__(self, param: str, message: str, code: str = "invalid_value"):
        super().__init__(f"{param}: {message}")
        self.param, self.code = param, code


@dataclass(frozen=True)
class TurnDetection:
    """OpenAI `server_vad` (defaults are OpenAI's), or `semantic_vad`: the same Silero VAD whose end-of-turn silence
    follows `eagerness` (EAGERNESS_SILENCE_MS); both drive session/vad.py with `threshold` and `silence_duration_ms`."""

    type: str = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    eagerness: str | None = None  # semantic_vad only

    def to_json(self) -> dict:
        both = {"type": self.type, "create_response": self.create_response,
                "interrupt_response": self.interrupt_response}
        if self.type == "semantic_vad":
            return {**both, "eagerness": self.eagerness}
        return {**both, "threshold": self.threshold, "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms}


def session_voice_aliases(configured: Mapping[str, str] | None, speakers: Iterable[str] | None
                          ) -> dict[str, str | None]:
    """The voice aliases of this deployment, lower-cased. The deploy's `voice_aliases` apply as written (a speaker or
    a registered voice); without it OPENAI_VOICE_ALIASES applies where the Talker has those presets, and elsewhere
    (a Base voice-clone Talker) an OpenAI voice name means the session's default voice (None)."""
    if configured is not None:
        return {name.lower(): voice for name, voice in configured.items()}
    presets = {s.lower() for s in speakers or ()}
    return {name: preset if preset in presets else None for name, preset in OPENAI_VOICE_ALIASES.items()}


@dataclass(frozen=True)
class SessionConfig:
    instructions: str | None = None  # AURA's system prompt (extra_body.aura_system_prompt wins)
    voice: str | None = None  # what the Talker speaks with: a CustomVoice speaker or a registered voice
    voice_name: str | None = None  # the voice as the client named it (an alias resolves to `voice`), echoed
    speak: bool = True  # output modalities include audio
    modalities: tuple[str, ...] | None = None  # output modalities as the client set them, echoed as sent
    input_audio_format: str = "pcm16"  # pcm16, g711_ulaw or g711_alaw (at 8 kHz), what an append holds by default
    input_sample_rate: int = OPENAI_INPUT_SAMPLE_RATE
    output_audio_format: str = "pcm16"  # pcm16 at 24 kHz, or G.711 at 8 kHz
    turn_detection: TurnDetection | None = None  # None: push-to-talk (the client commits)
    temperature: float | None = None  # AURA's
    max_output_tokens: int | None = None  # AURA's max_tokens; None: the deploy default
    info: dict = field(default_factory=dict)  # additional_information keys from extra_body
    stage_sampling: list | None = None  # extra_body.sampling_params_list
    auto_response: bool = False  # a commit without create_response answers too
    max_frames: int = DEFAULT_MAX_FRAMES
    frame_filter_threshold: float = FRAME_FILTER_THRESHOLD
    playback_commit_policy: str = "commit_all_on_done"
    transcription: dict | None = None  # echoed; ASR always transcribes
    voice_aliases: Mapping[str, str | None] = field(default_factory=dict)  # session_voice_aliases()
    tools: tuple[dict, ...] = ()  # flat realtime function tools (session/tools.py)
    tool_choice: str | dict = "auto"
    parallel_tool_calls: bool | None = None  # None: one call per reply

    @classmethod
    def for_session(cls, *, duplex: bool, speak: bool = True, voice_aliases: Mapping[str, str] | None = None,
                    speakers: Iterable[str] | None = None) -> SessionConfig:
        """A new session's settings. OpenAI sessions (GA and beta) start as OpenAI's do: server VAD, 24 kHz pcm16 input,
        a finished reply counts whole; duplex sessions keep vLLM-Omni's: push-to-talk, 16 kHz, `ack_only`.
        `voice_aliases` is the deploy key, `speakers` the Talker's presets."""
        aliases = session_voice_aliases(voice_aliases, speakers)
        if duplex:
            return cls(speak=speak, input_sample_rate=ASR_SAMPLE_RATE, turn_detection=None,
                       playback_commit_policy="ack_only", voice_aliases=aliases)
        return cls(speak=speak, input_sample_rate=OPENAI_INPUT_SAMPLE_RATE, turn_detection=TurnDetection(),
                   playback_commit_policy="commit_all_on_done", voice_aliases=aliases)

    def with_update(self, session: Any, where: str = "session") -> SessionConfig:
        """The settings after a session.update's `session` (or, `where` "response", one response.create's)."""
        if not isinstance(session, dict):
            raise SessionConfigError(where, "must be an object")
        audio = _obj(session.get("audio"), "session.audio")
        audio_in = _obj(audio.get("input"), "session.audio.input")
        audio_out = _obj(audio.get("output"), "session.audio.output")
        changes: dict[str, Any] = {}
        if "instructions" in session:
            changes["instructions"] = _text(session["instructions"], "session.instructions")
        voice = audio_out.get("voice", session.get("voice"))
        if isinstance(voice, dict):
            voice = voice.get("id")
        if voice is not None:
            name = _text(voice, "session.audio.output.voice" if "voice" in audio_out else "session.voice")
            changes["voice_name"] = name
            changes["voice"] = self.voice_aliases.get(name.strip().lower(), name)
        modalities = session.get("output_modalities", session.get("modalities"))
        if modalities is not None:
            if not isinstance(modalities, list) or not modalities or not set(modalities) <= {"text", "audio"}:
                raise SessionConfigError("session.output_modalities", f"must be a list of 'text' and 'audio' "
                                         f"(got {modalities!r})")
            changes["speak"] = "audio" in modalities
            changes["modalities"] = tuple(modalities)
        fmt_in = _input_format(audio_in.get("format"), session.get("input_audio_format"))
        if fmt_in is not None:
            changes["input_audio_format"], changes["input_sample_rate"] = fmt_in
        fmt_out = _output_format(audio_out.get("format"), session.get("output_audio_format"))
        if fmt_out is not None:
            changes["output_audio_format"] = fmt_out
        if "turn_detection" in audio_in:
            changes["turn_detection"] = _turn_detection(audio_in["turn_detection"], "session.audio.input.turn_detection")
        elif "turn_detection" in session:
            changes["turn_detection"] = _turn_detection(session["turn_detection"], "session.turn_detection")
        if "transcription" in audio_in or "input_audio_transcription" in session:
            changes["transcription"] = audio_in.get("transcription", session.get("input_audio_transcription"))
        if session.get("temperature") is not None:
            changes["temperature"] = _number(session["temperature"], "session.temperature", 0.0, 2.0)
        tokens = session.get("max_output_tokens", session.get("max_response_output_tokens"))
        if tokens is not None:
            changes["max_output_tokens"] = None if tokens == "inf" else int(
                _number(tokens, "session.max_output_tokens", 1, math.inf, integer=True))
        if any(k in session for k in TOOL_KEYS):
            try:
                changes.update(tool_settings(session, self.tools, self.tool_choice, where))
            except ClientError as e:
                raise SessionConfigError(e.param, str(e).removeprefix(f"{e.param}: "), e.code) from None
        if "extra_body" in session:
            changes.update(_extra_body(session["extra_body"], self.info))
        return dataclasses.replace(self, **changes)

    @property
    def system_prompt(self) -> str | None:
        return self.instructions

    @property
    def output_sample_rate(self) -> int:
        return G711_RATE if self.output_audio_format in G711 else TTS_SAMPLE_RATE

    def input_format_json(self) -> dict:
        return _ga_format(self.input_audio_format, self.input_sample_rate)

    def output_format_json(self) -> dict:
        return _ga_format(self.output_audio_format, self.output_sample_rate)

    def turn_detection_json(self) -> dict | None:
        return self.turn_detection.to_json() if self.turn_detection else None

    def extra_body_json(self) -> dict:
        return {**self.info, "auto_response": self.auto_response, "max_frames": self.max_frames,
                "frame_filter_threshold": self.frame_filter_threshold,
                "playback_commit_policy": self.playback_commit_policy,
                **({"sampling_params_list": self.stage_sampling} if self.stage_sampling else {})}

    def to_json(self, session_id: str, model: str) -> dict:
        """The effective session in the GA nested shape with the beta flat fields beside it (the duplex dialect's;
        an OpenAI session gets its own dialect's shape only, session/dialects/)."""
        modalities = list(self.modalities) if self.modalities else ["text", "audio"] if self.speak else ["text"]
        turn = self.turn_detection_json()
        return {
            "object": "realtime.session", "type": "realtime", "id": session_id, "model": model,
            "instructions": self.instructions or "",
            "output_modalities": modalities, "modalities": modalities,
            "audio": {"input": {"format": self.input_format_json(), "turn_detection": turn,
                                "transcription": self.transcription},
                      "output": {"format": self.output_format_json(), "voice": self.voice_name or self.voice}},
            "voice": self.voice_name or self.voice, "input_audio_format": self.input_audio_format,
            "output_audio_format": self.output_audio_format,
            "input_sample_rate_hz": self.input_sample_rate, "output_sample_rate_hz": self.output_sample_rate,
            "turn_detection": turn, "input_audio_transcription": self.transcription,
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens if self.max_output_tokens is not None else "inf",
            "max_response_output_tokens": self.max_output_tokens if self.max_output_tokens is not None else "inf",
            "tools": list(self.tools), "tool_choice": self.tool_choice, "extra_body": self.extra_body_json(),
        }


# ------------------------------------------------------------------------------------------------ field parsers

def _obj(value: Any, param: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SessionConfigError(param, "must be an object")
    return value


def _text(value: Any, param: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise SessionConfigError(param, f"must be a string (got {type(value).__name__})")
    return value


def _number(value: Any, param: str, lo: float, hi: float, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and float(value) != int(value)):
        raise SessionConfigError(param, f"must be {'an integer' if integer else 'a number'} (got {value!r})")
    if not lo <= value <= hi:
        raise SessionConfigError(param, f"must be in [{lo}, {hi}] (got {value!r})")
    return value


def _ga_format(name: str, rate: int) -> dict:
    return {"type": G711_GA[name]} if name in G711_GA else {"type": "audio/pcm", "rate": rate}


def _input_format(ga: Any, beta: Any) -> tuple[str, int] | None:
    """(format, rate) of the session's input audio, if the update names it."""
    if ga is not None:
        fmt = _obj(ga, "session.audio.input.format")
        kind = fmt.get("type", "audio/pcm")
        if isinstance(kind, str) and kind in GA_G711:
            return GA_G711[kind], G711_RATE
        if kind != "audio/pcm":
            raise SessionConfigError("session.audio.input.format.type", f"input is audio/pcm, audio/pcmu or "
                                     f"audio/pcma (got {kind!r})", "unsupported_audio_format")
        return "pcm16", check_input_rate(fmt.get("rate", OPENAI_INPUT_SAMPLE_RATE), "session.audio.input.format.rate")
    if beta is not None:
        if beta in G711:
            return beta, G711_RATE
        if beta not in PCM_FORMATS:
            raise SessionConfigError("session.input_audio_format", f"input is pcm16, g711_ulaw or g711_alaw "
                                     f"(got {beta!r})", "unsupported_audio_format")
        return "pcm16", OPENAI_INPUT_SAMPLE_RATE
    return None


def check_input_rate(rate: Any, param: str) -> int:
    if isinstance(rate, bool) or not isinstance(rate, int) or rate not in INPUT_SAMPLE_RATES:
        raise SessionConfigError(param, f"input audio must be 16000 or 24000 Hz pcm16 (got {rate!r})",
                                 "unsupported_sample_rate")
    return rate


def _output_format(ga: Any, beta: Any) -> str | None:
    """The session's output format, if the update names it."""
    if ga is not None:
        fmt = _obj(ga, "session.audio.output.format")
        kind = fmt.get("type", "audio/pcm")
        if isinstance(kind, str) and kind in GA_G711:
            return GA_G711[kind]
        if kind != "audio/pcm" or fmt.get("rate", TTS_SAMPLE_RATE) != TTS_SAMPLE_RATE:
            raise SessionConfigError("session.audio.output.format", "output is audio/pcm at 24000 Hz, audio/pcmu or "
                                     "audio/pcma", "unsupported_audio_format")
        return "pcm16"
    if beta is not None:
        if beta in G711:
            return beta
        if beta not in PCM_FORMATS:
            raise SessionConfigError("session.output_audio_format", f"output is pcm16, g711_ulaw or g711_alaw "
                                     f"(got {beta!r})", "unsupported_audio_format")
        return "pcm16"
    return None


def _turn_detection(value: Any, param: str) -> TurnDetection | None:
    """OpenAI's turn_detection object (null: push-to-talk); fields left out take OpenAI's defaults."""
    if value is None:
        return None
    value = _obj(value, param)
    kind = value.get("type", "server_vad")
    kw: dict[str, Any] = {"type": kind}
    if kind == "semantic_vad":
        eagerness = value.get("eagerness") or "auto"
        if eagerness not in EAGERNESS_SILENCE_MS:
            raise SessionConfigError(f"{param}.eagerness", f"must be one of low, medium, high, auto (got "
                                     f"{eagerness!r})")
        kw.update(eagerness=eagerness, silence_duration_ms=EAGERNESS_SILENCE_MS[eagerness])
    elif kind == "server_vad":
        for key, lo, hi in (("threshold", 0.0, 1.0), ("prefix_padding_ms", 0, 10_000),
                            ("silence_duration_ms", 0, 10_000)):
            if value.get(key) is not None:
                kw[key] = _number(value[key], f"{param}.{key}", lo, hi, integer=key != "threshold")
    else:
        raise SessionConfigError(f"{param}.type", f"must be server_vad or semantic_vad, or turn_detection null for "
                                 f"push-to-talk (got {kind!r})", "unsupported_turn_detection")
    for key in ("create_response", "interrupt_response"):
        if value.get(key) is not None:
            if not isinstance(value[key], bool):
                raise SessionConfigError(f"{param}.{key}", "must be true or false")
            kw[key] = value[key]
    return TurnDetection(**kw)


def _extra_body(value: Any, info: dict) -> dict:
    """extra_body: the chat endpoint's additional_information keys and sampling_params_list, plus session options."""
    body = dict(_obj(value, "session.extra_body"))
    out: dict[str, Any] = {}
    if "sampling_params_list" in body:
        entries = body.pop("sampling_params_list")
        if entries is not None and (not isinstance(entries, list)
                                    or not all(e is None or isinstance(e, dict) for e in entries)):
            raise SessionConfigError("session.extra_body.sampling_params_list", "must be a list of objects (one per "
                                     "stage) or null")
        out["stage_sampling"] = entries
    if "auto_response" in body:
        out["auto_response"] = bool(body.pop("auto_response"))
    if "max_frames" in body:
        out["max_frames"] = int(_number(body.pop("max_frames"), "session.extra_body.max_frames", 1, MAX_FRAMES_LIMIT,
                                        integer=True))
    if "frame_filter_threshold" in body:
        out["frame_filter_threshold"] = float(_number(body.pop("frame_filter_threshold"),
                                                      "session.extra_body.frame_filter_threshold", 0.0, 1.0))
    if "playback_commit_policy" in body:
        policy = body.pop("playback_commit_policy")
        if policy not in PLAYBACK_POLICIES:
            raise SessionConfigError("session.extra_body.playback_commit_policy", f"must be one of "
                                     f"{list(PLAYBACK_POLICIES)} (got {policy!r})")
        out["playback_commit_policy"] = policy
    nested = body.pop("additional_information", None)  # also accepted nested, as the chat request spells it
    body.update(_obj(nested, "session.extra_body.additional_information"))
    out["info"] = {**info, **body}
    try:  # typed as on the chat endpoint: a misspelt key is refused by name at session.update
        AdditionalInformation.parse(out["info"])
    except PipelineRequestError as e:
        key = (e.param or "").removeprefix("additional_information.")
        raise SessionConfigError(f"session.extra_body.{key}", str(e).removeprefix(f"{key}: ")) from None
    return out
