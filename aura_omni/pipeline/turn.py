"""What one conversational turn asks of the pipeline, the events it produces (plain data), and its timeline."""

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aura_omni import step_trace

# a turn's phases, each from the end of the one before (or the turn's start): their sum is the turn's first audio
TURN_PHASES = ("asr", "aura_first_token", "speech_start", "first_audio")


class TurnTimeline:
    """When a turn reached each of its moments (the first time only), for `phases()`: where a turn's first audio
    went, the ASR, AURA's first token (admission, prefill, vision), the words the Talker waits for, and the Talker plus
    the first Code2Wav window. What came before the turn started (HTTP, decoding media, voice prompts) is the
    endpoint's TTFA less these."""

    def __init__(self, request_id: str = "-"):
        self.request_id = request_id
        self.start = time.perf_counter()
        self.at: dict[str, float] = {}
        step_trace.record("turn_start", request_id)

    def mark(self, moment: str) -> None:
        if moment not in self.at:
            self.at[moment] = time.perf_counter()
            step_trace.record(moment, self.request_id)

    def phases(self) -> dict[str, float]:
        """Seconds of each phase the turn went through (a turn without audio in has no `asr`, a silent one stops at
        `aura_first_token`)."""
        out, before = {}, self.start
        for phase in TURN_PHASES:
            if phase in self.at:
                out[phase] = max(0.0, self.at[phase] - before)
                before = self.at[phase]
        return out



@dataclass
class TurnRequest:
    request_id: str
    audio: tuple[np.ndarray, int] | None = None  # user speech (samples, sample rate); None skips ASR
    vision: list[Any] = field(default_factory=list)  # media.vision_preprocess.VisionInput, decoded on arrival
    text_parts: list[str] = field(default_factory=list)
    system_prompt: str | None = None
    history: list[tuple[str, str]] = field(default_factory=list)
    is_speech: bool = True
    speak: bool = True  # modalities include audio
    tts: Any = None  # the speech stage's request template (voice resolved once per turn); opaque here
    tts_pass_token_ids: bool = False  # speak AURA's own token ids, wrapped in the Talker template
    asr_sampling: dict | None = None
    aura_sampling: dict | None = None
    asr_language: str | None = None
    asr_context: str | None = None
    timeout_s: float | None = None
    tool_use: Any = None  # pipeline.tool_calls.ToolUse: tools in the prompt, calls parsed from the reply


@dataclass
class TranscriptReady:
    text: str
    language: str = ""  # what Qwen3-ASR detected (or was forced to); "" when unknown or silent


@dataclass
class TextDelta:
    text: str
    token_ids: list[int]


@dataclass
class TextDone:
    """AURA's reply is whole (its speech may still be playing out): its text as the client sees it ("" when silent).
    Comes after the last TextDelta and before TurnDone; a realtime session starts its next reply from here."""

    text: str
    silent: bool


@dataclass
class AudioChunk:
    samples: np.ndarray  # float32 mono at 24 kHz


@dataclass
class TurnDone:
    text: str  # AURA's reply as the client sees it ("" when silent)
    raw_text: str  # with special tokens such as <|silent|>
    token_ids: list[int]
    silent: bool
    transcript: str
    prompt_tokens: int
    completion_tokens: int
    audio_seconds: float
    finish_reason: str = "stop"  # "tool_calls" when the reply called tools
    tool_calls: list = field(default_factory=list)  # pipeline.tool_calls.ToolCall, in call order


# and pipeline.tool_calls.CallDelta with tools
TurnEvent = TranscriptReady | TextDelta | TextDone | AudioChunk | TurnDone


@dataclass
class TurnResult:
    """A whole turn gathered from its events (non-streaming callers)."""

    done: TurnDone
    audio: np.ndarray  # every AudioChunk joined; empty when nothing was spoken
    transcript: str | None  # what ASR heard; None without audio input


async def collect_turn(events) -> TurnResult:
    chunks, transcript, done = [], None, None
    async for ev in events:
        if isinstance(ev, AudioChunk):
            chunks.append(ev.samples)
        elif isinstance(ev, TranscriptReady):
            transcript = ev.text
        elif isinstance(ev, TurnDone):
            done = ev
    audio = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    return TurnResult(done, audio, transcript)
