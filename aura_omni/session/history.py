"""AURA's conversation history in a session: silent turns stay silent, spoken turns count as far as they were heard.

A spoken reply enters the prompt only up to what the client played: `playback.ack` (committed_ms) or
`conversation.item.truncate` (audio_end_ms) cut it, in proportion to the reply's audio, at a word boundary.
Under `commit_all_on_done` a reply nobody acknowledged counts whole. Rounds are pruned as vLLM-Omni's AURA video
stream does: past `max_rounds` (45) only the latest `num_rounds_keep` (30) remain, so between prunes every turn's
prompt extends the previous one and the engine's prefix cache serves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..pipeline.constants import SILENT_TEXT
from ..pipeline.tool_calls import assistant_text, tool_results_text

MAX_ROUNDS = 45  # vLLM-Omni aura video stream max_rounds
NUM_ROUNDS_KEEP = 30  # vLLM-Omni aura video stream num_rounds_keep


@dataclass
class Item:
    id: str
    role: str  # "user" | "assistant" | "system"
    text: str = ""
    silent: bool = False
    audio_ms: float = 0.0  # assistant: audio generated
    played_ms: float | None = None  # assistant: acknowledged / truncated playback; None = no word from the client
    done: bool = True  # assistant: its reply finished (completed or cancelled)
    incomplete: bool = False  # assistant: its reply was cancelled before it ended
    modality: str = "text"  # "audio": a user item of speech, or a spoken reply (its text is the transcript)

    def heard_text(self, policy: str) -> str:
        """The part of an assistant reply that counts as said."""
        if self.silent:
            return SILENT_TEXT
        if self.played_ms is None:
            return self.text if policy == "commit_all_on_done" and self.done else ""
        if self.audio_ms <= 0 or self.played_ms >= self.audio_ms:
            return self.text
        cut = int(len(self.text) * max(self.played_ms, 0.0) / self.audio_ms)
        head = self.text[:cut]
        if cut < len(self.text) and not self.text[cut].isspace():
            head = head.rsplit(" ", 1)[0] if " " in head else ""
        return head.rstrip()


@dataclass
class FunctionCall(Item):
    """A call AURA made (a `function_call` item): in the prompt it is the `<tool_call>` block of its assistant turn."""

    role: str = "assistant"
    name: str = ""
    call_id: str = ""
    arguments: str = ""  # JSON text, as AURA wrote it


@dataclass
class FunctionCallOutput(Item):
    """The client's result of a call (a `function_call_output` item): a `<tool_response>` block of a user turn."""

    role: str = "tool"
    call_id: str = ""
    output: str = ""


class History:
    def __init__(self, max_rounds: int = MAX_ROUNDS, keep_rounds: int = NUM_ROUNDS_KEEP):
        self.max_rounds, self.keep_rounds = max_rounds, keep_rounds
        self.items: list[Item] = []

    def add(self, item: Item) -> Item:
        self.items.append(item)
        self._prune()
        return item

    def get(self, item_id: str) -> Item | None:
        return next((i for i in self.items if i.id == item_id), None)

    def delete(self, item_id: str) -> bool:
        item = self.get(item_id)
        if item is not None:
            self.items.remove(item)
        return item is not None

    @property
    def rounds(self) -> int:
        return sum(1 for i in self.items if i.role == "user")

    def _prune(self) -> None:
        if self.rounds <= self.max_rounds:
            return
        users = [k for k, i in enumerate(self.items) if i.role == "user"]
        del self.items[:users[-self.keep_rounds]]

    def turns(self, policy: str, exclude: set[str] = frozenset()) -> list[tuple[str, str]]:
        """(role, text) for AURA's prompt; assistant turns nobody heard are left out. As the checkpoint's chat template
        renders a conversation with tools: a reply's calls follow its content in one assistant turn, and consecutive
        call outputs are one user turn of `<tool_response>` blocks."""
        out, calls, results, content = [], [], [], None

        def flush() -> None:
            nonlocal content
            if calls:
                out.append(("assistant", assistant_text(content or "", calls)))
            elif content:
                out.append(("assistant", content))
            if results:
                out.append(("user", tool_results_text(results)))
            calls.clear(), results.clear()
            content = None

        for item in self.items:
            if item.id in exclude:
                continue
            if isinstance(item, FunctionCall):
                if item.incomplete:  # cut off by a cancel: no client ran it, and its JSON may be unfinished
                    continue
                if results:
                    flush()
                calls.append((item.name, item.arguments))
            elif isinstance(item, FunctionCallOutput):
                if not results:
                    flush()
                results.append(item.output)
            else:
                flush()
                text = item.heard_text(policy) if item.role == "assistant" else item.text
                if item.role == "assistant":
                    content = text  # its calls, if it made any, join its turn
                elif text:
                    out.append((item.role, text))
        flush()
        return out

    def ends_in_results(self, exclude: set[str] = frozenset()) -> bool:
        """Whether the last item (outside `exclude`) is a call's output: the next reply answers the results."""
        last = next((i for i in reversed(self.items) if i.id not in exclude), None)
        return isinstance(last, FunctionCallOutput)
