"""AURA prompt ids, built per turn from structured turns: ChatML markers and vision tokens are ids, only text is
tokenised (each text span once per session, remembered by its text).

The ids equal tokenising the rendered ChatML with every vision item expanded (what upstream asr2aura + the
Qwen3-VL processor produce; tests/parity/test_qwen3_vl_parity.py checks it against transformers): the tokenizer
splits special tokens off before any merge, so the text spans between them tokenise on their own.
"""

import threading
from array import array
from collections import OrderedDict
from itertools import chain
from dataclasses import dataclass

from aura_omni.media.vision_preprocess import VisionInput
from aura_omni.models.qwen3_vl_prompt import IM_END, IM_START, IMAGE_PAD, VIDEO_PAD, VISION_END, VISION_START, timestamp_text

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class PromptTurn:
    role: str  # "system" | "user" | "assistant"
    text: str = ""
    vision: tuple[str, ...] = ()  # "image" / "video" per item shown in this turn, placed before the text

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"unknown chat role {self.role!r}")
        for kind in self.vision:
            if kind not in ("image", "video"):
                raise ValueError(f"unknown vision input kind {kind!r}")


@dataclass(frozen=True)
class AuraPrompt:
    """System, history, this user turn; the open assistant turn follows (asr2aura builds it)."""

    turns: tuple[PromptTurn, ...]

    @property
    def vision_kinds(self) -> list[str]:
        return [kind for turn in self.turns for kind in turn.vision]


class PromptTokenizer:
    """AuraPrompt + its vision inputs (in prompt order) -> token ids."""

    def __init__(self, tokenizer, max_texts: int = 4096):
        self.tokenizer, self.max_texts = tokenizer, max_texts
        names = (IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
        ids = [tokenizer.convert_tokens_to_ids(n) for n in names]
        missing = [n for n, i in zip(names, ids) if not isinstance(i, int) or i == tokenizer.unk_token_id]
        if missing:
            raise ValueError(f"the AURA tokenizer lacks the Qwen3-VL special tokens {missing}")
        self.im_start, self.im_end, self.vision_start, self.vision_end, self.image_pad, self.video_pad = ids
        # packed ids: a list would keep an int object an id alive (~40 bytes each against 4), in a cache that
        # fills over tens of minutes of a server's load
        self._texts: OrderedDict[str, array] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _text_ids(self, spans: list[str]) -> dict[str, array]:
        with self._lock:
            known = {t: self._texts[t] for t in spans if t in self._texts}
            for t in known:
                self._texts.move_to_end(t)
        new = {t: array("i", self.encode(t)) for t in dict.fromkeys(spans) if t not in known}
        if new:
            with self._lock:
                self._texts.update(new)
                while len(self._texts) > self.max_texts:
                    self._texts.popitem(last=False)
        return known | new

    def _vision_pieces(self, item: VisionInput) -> list[str | list[int]]:
        if item.kind == "image":
            return [[self.vision_start] + [self.image_pad] * item.num_tokens + [self.vision_end]]
        if len(item.timestamps) != item.grid_thw[0]:
            raise ValueError(f"video has {item.grid_thw[0]} temporal groups but {len(item.timestamps)} timestamps")
        group = [self.vision_start] + [self.video_pad] * item.tokens_per_group + [self.vision_end]
        return [p for t in item.timestamps for p in (timestamp_text(t), group)]

    def vision_ids(self, item: VisionInput) -> list[int]:
        """One item's ids as they appear in a prompt (its timestamps tokenised alone)."""
        return [i for p in self._vision_pieces(item) for i in (self.encode(p) if isinstance(p, str) else p)]

    def __call__(self, prompt: AuraPrompt, vision: list[VisionInput]) -> list[int]:
        kinds = prompt.vision_kinds
        if len(kinds) != len(vision):
            fewer = "fewer" if len(kinds) < len(vision) else "more"
            raise ValueError(f"prompt has {fewer} vision placeholders ({len(kinds)}) than vision inputs ({len(vision)})")
        for i, (kind, item) in enumerate(zip(kinds, vision)):
            if kind != item.kind:
                raise ValueError(f"vision placeholder {i} is {kind!r} but vision input {i} is {item.kind!r}")
        items = iter(vision)
        pieces: list[str | list[int]] = []  # text spans and id runs; adjacent texts are joined, then tokenised
        for turn in prompt.turns:
            pieces += [[self.im_start], f"{turn.role}\n"]
            for _ in turn.vision:
                pieces += self._vision_pieces(next(items))
            pieces += [turn.text, [self.im_end], "\n"]
        pieces += [[self.im_start], "assistant\n"]
        joined: list[str | list[int]] = []
        for p in pieces:
            if isinstance(p, str) and joined and isinstance(joined[-1], str):
                joined[-1] += p
            elif p != "":
                joined.append(p)
        text_ids = self._text_ids([p for p in joined if isinstance(p, str)])
        return list(chain.from_iterable(text_ids[p] if isinstance(p, str) else p for p in joined))
