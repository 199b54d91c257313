"""What the engine streams back: one small dataclass per request per step (no tensors, no engine objects)."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestOutput:
    request_id: str
    new_token_ids: list[int]  # tokens produced since the previous output of this request
    num_output_tokens: int  # all tokens produced so far
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error" (non-finite values: no new token)
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it
    new_extras: list[Any] = field(default_factory=list)  # per new token, from the model adapter (Talker: codes)
    text: str | None = None  # full detokenized output (only when stop strings are checked), cut at the stop
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
