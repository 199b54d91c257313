"""Stage input processors: pure functions from one stage's output (plus the request) to the next stage's input.

asr2aura  : ASR Transcript + vision items + request text -> AURA prompt turns (AuraPrompt)
aura2tts  : AURA reply -> silent gate, cleaned text or wrapped token ids (the Talker request: tts_request.py)
Behaviour follows vLLM-Omni's aura_omni processors (merged G1 format; G4 cleaning rules), with the
deviations noted inline where the upstream behaviour is a known bug.
"""

import re
from typing import Sequence

from aura_omni.stages.asr.transcript import Transcript
from aura_omni.pipeline.constants import (
    DEFAULT_AURA_SYSTEM_PROMPT,
    QWEN_IM_END_ID,
    QWEN_IM_START_ID,
    QWEN_NEWLINE_ID,
    SILENT_TEXT,
    TTS_ASSISTANT_PREFIX_IDS,
    TTS_ASSISTANT_SUFFIX_IDS,
)
from aura_omni.stages.aura.prompt_tokens import AuraPrompt, PromptTurn
from aura_omni.pipeline.tool_calls import system_with_tools


class PipelineRequestError(ValueError):
    """A request the pipeline cannot serve as asked (the server answers 400 before any stage runs).
    `param`: the request field at fault, in the request's own spelling; `code`: OpenAI's error code."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param, self.code = param, code


# ---------------------------------------------------------------------------------------------- values

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
    tools: Sequence[dict] = (),
) -> AuraPrompt:
    """The AURA prompt for one user turn as structured ChatML turns (the merged upstream format; its ids are built by
    stages/aura/prompt_tokens.py, never by tokenising a rendered string).

    transcript: ASR's result (None without audio). vision_items: "image"/"video" per media item in message order;
    one placeholder each (upstream emits one for all items, which mismatches the processor when there are several).
    Text from the transcript, the request and the history is stripped of prompt-structure tokens (CONTROL_TOKENS).
    tools: OpenAI function tools, listed in the system turn as the chat template does (pipeline/tool_calls.py).
    """
    said = transcript.text.strip() if transcript is not None and is_speech else ""
    words = strip_control_tokens("\n".join(p for p in [said, *(t.strip() for t in text_parts)] if p))
    system = system_prompt if system_prompt else DEFAULT_AURA_SYSTEM_PROMPT
    if tools:
        system = system_with_tools(system, tools)
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


