"""Stage input processors: pure functions from one stage's output (plus the request) to the next stage's input.

asr2aura  : ASR Transcript + vision items + request text -> AURA prompt turns (AuraPrompt)
aura2tts  : AURA reply -> silent gate, cleaned text or wrapped token ids, TTS options
Behaviour follows vLLM-Omni's aura_omni processors (merged G1 format; G4 cleaning rules), with the
deviations noted inline where the upstream behaviour is a known bug.
"""

import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

from aura_omni.asr.transcript import Transcript
from aura_omni.pipeline.constants import (
    CODEC_FRAME_RATE,
    DEFAULT_AURA_SYSTEM_PROMPT,
    DEFAULT_CUSTOM_VOICE_SPEAKER,
    DEFAULT_TTS_LANGUAGE,
    DEFAULT_TTS_MAX_NEW_TOKENS,
    QWEN_IM_END_ID,
    QWEN_IM_START_ID,
    QWEN_NEWLINE_ID,
    SILENT_TEXT,
    TTS_ASSISTANT_PREFIX_IDS,
    TTS_ASSISTANT_SUFFIX_IDS,
)
from aura_omni.pipeline.prompt_tokens import AuraPrompt, PromptTurn


class PipelineRequestError(ValueError):
    """A request the pipeline cannot serve as asked (the server answers 400 before any stage runs)."""


# ---------------------------------------------------------------------------------------------- values

def first_value(value: Any, default: Any = None) -> Any:
    """additional_information values may be scalars or lists: take element 0 of a list."""
    if isinstance(value, (list, tuple)):
        return value[0] if value else default
    return default if value is None else value


def as_bool(value: Any) -> bool:
    value = first_value(value, False)
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return bool(value)


def text_value(info: dict, key: str, default: str | None = None) -> str | None:
    """First value of a text field; anything but a string (a number, an object) is a client error."""
    value = first_value(info.get(key), default)
    if value is not None and not isinstance(value, str):
        raise PipelineRequestError(f"{key} must be a string (got {type(value).__name__})")
    return value


def normalize_speaker(name: str | None) -> str:
    """'vivian'/'VIVIAN' -> 'Vivian'; names with '_' (Uncle_Fu, Ono_Anna) are kept as given."""
    name = (name or "").strip()
    if not name or "_" in name:
        return name
    return name[0].upper() + name[1:].lower()


# ---------------------------------------------------------------------------------------------- asr2aura

# Prompt-structure tokens: text from clients (typed text, history) or from ASR never carries them, so a turn
# cannot close its own user message, open a system one, or add vision slots that shift the real images.
CONTROL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|vision_end|>",
                  "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")


def strip_control_tokens(text: str) -> str:
    for token in CONTROL_TOKENS:
        text = text.replace(token, "")
    return text


# A past turn: (role, text) or (role, text, vision kinds shown in that turn, placed before its text).
HistoryTurn = tuple[str, str] | tuple[str, str, Sequence[str]]


def asr2aura(
    transcript: Transcript | None,
    *,
    vision_items: Sequence[str] = (),
    text_parts: Sequence[str] = (),
    system_prompt: str | None = None,
    history: Sequence[HistoryTurn] = (),
    is_speech: bool = True,
) -> AuraPrompt:
    """The AURA prompt for one user turn as structured ChatML turns (the merged upstream format; its ids are built by
    pipeline/prompt_tokens.py, never by tokenising a rendered string).

    transcript: ASR's result (None without audio). vision_items: "image"/"video" per media item in message order;
    one placeholder each (upstream emits one for all items, which mismatches the processor when there are several).
    Text from the transcript, the request and the history is stripped of prompt-structure tokens (CONTROL_TOKENS).
    """
    said = transcript.text.strip() if transcript is not None and is_speech else ""
    words = strip_control_tokens("\n".join(p for p in [said, *(t.strip() for t in text_parts)] if p))
    system = system_prompt if system_prompt else DEFAULT_AURA_SYSTEM_PROMPT
    past = [PromptTurn(turn[0], strip_control_tokens(turn[1]), tuple(turn[2]) if len(turn) > 2 else ())
            for turn in history]
    return AuraPrompt((PromptTurn("system", system), *past, PromptTurn("user", words, tuple(vision_items))))


# ---------------------------------------------------------------------------------------------- aura2tts

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<think>.*\Z", re.IGNORECASE | re.DOTALL)
_CHATML_MARKERS = ("<|im_end|>", "<|im_start|>", "<|endoftext|>")


def strip_assistant_text(text: str | None) -> str:
    """Drop <think> blocks (closed or trailing-open), stray </think> and ChatML markers; keep <|silent|>."""
    text = _THINK_BLOCK.sub("", text or "")
    text = _THINK_OPEN.sub("", text)
    text = re.sub(r"</think>", "", text, flags=re.IGNORECASE)
    for marker in _CHATML_MARKERS:
        text = text.replace(marker, "")
    return text.strip()


def is_effectively_silent(text: str | None) -> bool:
    """Empty or exactly <|silent|> after cleaning: no TTS for this turn."""
    if not isinstance(text, str):
        return False
    cleaned = strip_assistant_text(text)
    return cleaned == "" or cleaned == SILENT_TEXT


def is_silent_prefix(text: str) -> bool:
    """A streamed reply that may still turn into <|silent|> (e.g. '<|sil'): hold it back."""
    stripped = text.strip()
    return bool(stripped) and SILENT_TEXT.startswith(stripped) and stripped != SILENT_TEXT


def wrap_tts_token_ids(aura_ids: Sequence[int]) -> list[int]:
    """AURA reply ids -> the Talker's assistant template ids; [] when no content remains."""
    ids = [int(i) for i in aura_ids]
    if ids[:3] == list(TTS_ASSISTANT_PREFIX_IDS):
        ids = ids[3:]
    if QWEN_IM_END_ID in ids:
        ids = ids[: ids.index(QWEN_IM_END_ID)]
    while ids and ids[-1] in (QWEN_IM_START_ID, QWEN_IM_END_ID, QWEN_NEWLINE_ID):
        ids.pop()
    if not ids:
        return []
    return [*TTS_ASSISTANT_PREFIX_IDS, *ids, *TTS_ASSISTANT_SUFFIX_IDS]


TASK_TYPES = {"base": "Base", "customvoice": "CustomVoice", "custom_voice": "CustomVoice",
              "voicedesign": "VoiceDesign", "voice_design": "VoiceDesign"}
CHECKPOINT_TASK_TYPE = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}


@dataclass(frozen=True)
class TTSOptions:
    """Per-request Talker settings, fixed when the request arrives and reused for every sentence."""

    task_type: str
    language: str
    speaker: str | None = None
    instruct: str | None = None
    ref_audio: Any = None  # base64 / data URL / (wav, sr): decoded by the TTS stage
    ref_text: str | None = None
    x_vector_only: bool = False
    voice: str | None = None  # a registered (cloned) voice name
    max_new_tokens: int = DEFAULT_TTS_MAX_NEW_TOKENS
    non_streaming_mode: bool | None = None
    pass_token_ids: bool = False


def tts_options(
    info: dict | None,
    *,
    checkpoint_type: str,
    registered_voices: Sequence[str] = (),
    voice: str | None = None,
) -> TTSOptions:
    """TTS options from `additional_information` (and the OpenAI `audio.voice`), validated up front.

    The default task type follows the loaded Talker checkpoint. Base needs a reference: tts_ref_audio with
    tts_ref_text (in-context clone), tts_ref_audio with tts_x_vector_only_mode, or a registered voice.
    """
    info = info or {}
    raw_task = first_value(info.get("tts_task_type"))
    if raw_task is None:
        task_type = CHECKPOINT_TASK_TYPE[checkpoint_type]
    else:
        task_type = TASK_TYPES.get(str(raw_task).replace(" ", "").lower())
        if task_type is None:
            raise PipelineRequestError(f"tts_task_type must be Base, CustomVoice or VoiceDesign (got {raw_task!r})")
    if task_type != CHECKPOINT_TASK_TYPE[checkpoint_type]:
        raise PipelineRequestError(
            f"tts_task_type {task_type} needs a {task_type} Qwen3-TTS checkpoint; this deployment loads a "
            f"{CHECKPOINT_TASK_TYPE[checkpoint_type]} one"
        )
    language = text_value(info, "tts_language", DEFAULT_TTS_LANGUAGE)
    instruct = text_value(info, "tts_instruct") or None
    max_new = first_value(info.get("tts_max_new_tokens"), DEFAULT_TTS_MAX_NEW_TOKENS)
    try:
        max_new = int(max_new)
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON Infinity / 1e400
        raise PipelineRequestError(f"tts_max_new_tokens must be an integer (got {max_new!r})") from None
    if max_new < 1:
        raise PipelineRequestError(f"tts_max_new_tokens must be >= 1 (got {max_new})")
    non_streaming = first_value(info.get("tts_non_streaming_mode"))
    common = dict(
        task_type=task_type, language=language, instruct=instruct, max_new_tokens=max_new,
        non_streaming_mode=non_streaming if isinstance(non_streaming, bool) else None,
        pass_token_ids=as_bool(info.get("tts_pass_token_ids")),
    )
    if task_type == "CustomVoice":
        speaker = text_value(info, "tts_speaker") or voice or DEFAULT_CUSTOM_VOICE_SPEAKER
        return TTSOptions(speaker=normalize_speaker(str(speaker)), **common)
    if task_type == "VoiceDesign":
        if not instruct:
            raise PipelineRequestError("VoiceDesign needs tts_instruct describing the voice")
        return TTSOptions(**common)
    ref_audio = first_value(info.get("tts_ref_audio"))
    ref_text = text_value(info, "tts_ref_text") or None
    x_vector_only = as_bool(info.get("tts_x_vector_only_mode"))
    named = text_value(info, "tts_voice") or voice
    if ref_audio:
        if not ref_text and not x_vector_only:
            raise PipelineRequestError(
                "Base TTS with tts_ref_audio needs tts_ref_text (in-context clone) or tts_x_vector_only_mode: true"
            )
        return TTSOptions(ref_audio=ref_audio, ref_text=ref_text, x_vector_only=x_vector_only, **common)
    if named and named in registered_voices:
        return TTSOptions(voice=named, **common)
    if named:
        raise PipelineRequestError(
            f"voice {named!r} is not registered; register it with POST /v1/audio/voices or pass tts_ref_audio"
        )
    raise PipelineRequestError(
        "Base TTS requires a reference voice: tts_ref_audio with tts_ref_text, tts_ref_audio with "
        "tts_x_vector_only_mode, or a registered voice name"
    )


def ref_code_length(num_samples: int, sample_rate: int) -> int:
    """Reference codec frames for `num_samples` of audio at 12.5 Hz (at least 1)."""
    return max(1, math.ceil(num_samples / sample_rate * CODEC_FRAME_RATE))


def estimate_talker_prompt_len(
    task_type: str,
    *,
    language: str,
    num_ids: int,
    instruct: str = "",
    non_streaming: bool | None = None,
    ref_code_len: int | None = None,
    x_vector_only: bool = False,
) -> int:
    """vLLM-Omni's Talker prefill-length estimate (its scheduler reserves this many placeholder tokens).

    We build the Talker prompt natively at its exact length, so this is only kept for compatibility and
    to document the reference; `num_ids` is the length of the wrapped assistant-template ids.
    """
    if non_streaming is None:
        non_streaming = task_type in ("CustomVoice", "VoiceDesign")
    p = 3 if language.strip().lower() == "auto" else 4
    s = 1 if task_type in ("CustomVoice", "Base") else 0
    base = len((instruct or "").strip()) + 3 + (p + s + 2 - 1)
    if task_type in ("CustomVoice", "VoiceDesign") or (task_type == "Base" and (x_vector_only or ref_code_len is None)):
        return base + max(0, num_ids - 6) if non_streaming else base + 1
    if task_type == "Base":
        if non_streaming:
            return base + 1 + ref_code_len + max(0, num_ids - 8) + 1
        return base + 1 + ref_code_len
    return base + max(num_ids, 1)
