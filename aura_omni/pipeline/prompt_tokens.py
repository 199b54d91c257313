"""AURA prompt text -> token ids: ChatML turns tokenised once per session, vision pads expanded in the id list.

A live session's prompt carries its whole history every turn; tokenising it again cost ~3 ms a turn at 24 turns
of history. Turns are remembered by their text, and each vision item is tokenised as one pad per image / temporal
group and expanded afterwards (pads are special tokens, so the text around them tokenises the same).
"""

import re
import threading
from collections import OrderedDict

import numpy as np

from aura_omni.media.vision_preprocess import VisionInput
from aura_omni.models.qwen3_vl_prompt import IM_START, pad_runs, render_vision
from aura_omni.pipeline.processors import VISION_PLACEHOLDER

TURN_START = re.compile(f"(?={re.escape(IM_START)})")  # splits before each <|im_start|>, keeping it


class ChatMLTokens:
    """Token ids of ChatML text, tokenised one `<|im_start|>` turn at a time and remembered by the turn's text.

    The ids equal tokenising the whole text: the tokenizer splits special tokens off before any merge, so text
    on either side of `<|im_start|>` never tokenises together.
    """

    def __init__(self, tokenizer, max_turns: int = 4096):
        self.tokenizer, self.max_turns = tokenizer, max_turns
        self.by_turn = len(self.encode(IM_START)) == 1  # a tokenizer without it as a special token: whole texts
        self._turns: OrderedDict[str, list[int]] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def __call__(self, text: str) -> list[int]:
        if not self.by_turn:
            return self.encode(text)
        turns = [t for t in TURN_START.split(text) if t]
        with self._lock:
            ids = {t: self._turns[t] for t in turns if t in self._turns}
            for t in ids:
                self._turns.move_to_end(t)
        new = {t: self.encode(t) for t in dict.fromkeys(turns) if t not in ids}
        if new:
            with self._lock:
                self._turns.update(new)
                while len(self._turns) > self.max_turns:
                    self._turns.popitem(last=False)
        ids.update(new)
        return [i for t in turns for i in ids[t]]


def expand_vision_placeholders(prompt: str, vision: list[VisionInput], compact: bool = False) -> str:
    """Replace each compact `<|vision_start|><|x_pad|><|vision_end|>` (asr2aura) by the item's tokens
    (`compact`: one pad per group, for `prompt_token_ids`)."""
    out, rest = [], prompt
    for item in vision:
        marker = VISION_PLACEHOLDER[item.kind]
        head, found, rest = rest.partition(marker)
        if not found:
            raise ValueError(f"prompt has fewer {item.kind} placeholders than {item.kind} inputs")
        out += [head, render_vision(item, compact)]
    return "".join(out) + rest


def prompt_token_ids(tokens: ChatMLTokens, prompt: str, vision: list[VisionInput], pad_ids: tuple[int, int]) -> list[int]:
    """Token ids of the prompt with every vision item expanded. pad_ids: (image pad, video pad)."""
    ids = np.asarray(tokens(expand_vision_placeholders(prompt, vision, compact=True)), dtype=np.int64)
    is_pad = np.isin(ids, pad_ids)
    runs = pad_runs(vision)
    if is_pad.sum() > len(runs):
        raise ValueError("prompt has more vision placeholder tokens than its vision inputs")
    if is_pad.sum() < len(runs):
        raise ValueError("prompt has fewer vision placeholder tokens than its vision inputs")
    counts = np.ones(len(ids), dtype=np.int64)
    counts[is_pad] = runs
    return np.repeat(ids, counts).tolist()
