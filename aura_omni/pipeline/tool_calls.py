"""Function calling in AURA's own format (Qwen3-VL's chat template): tools into the prompt, calls out of the reply.

Prompt (what the checkpoint's template renders, `apply_chat_template(messages, tools=...)`): the system turn gains a
`# Tools` section listing each tool's JSON inside `<tools></tools>`; an assistant turn that called tools carries one
`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>` block per call after its content; consecutive `tool`
results become one user turn of `<tool_response>` blocks.

Reply: `<tool_call>` blocks are calls, the text outside them is the content (the only text the Talker speaks).
`ReplyStream` follows a reply as it grows and says what is new: content, a call's start (its id and name), a piece
of its arguments. Chat completions stream it as `delta.tool_calls`; a realtime session can send the same pieces as
`response.function_call_arguments.delta`.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

from aura_omni.engine.grammar import Grammar, json_rule

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"  # Qwen3 added tokens 151657 / 151658
TOOL_CALL_TOKEN_ID = 151657  # `<tool_call>`: banned under tool_choice "none"

TOOLS_HEADER = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_FOOTER = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                "<args-json-object>}\n</tool_call>")


def tojson(value: Any) -> str:
    """The chat template's `tojson` filter (transformers: json.dumps, non-ASCII kept, default separators)."""
    return json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------- request

@dataclass(frozen=True)
class ToolUse:
    """A turn's tools and how it may use them (OpenAI `tools`, `tool_choice`, `parallel_tool_calls`)."""

    tools: tuple[dict, ...]  # OpenAI function tools as sent: rendered into the prompt as they are
    choice: str = "auto"  # "auto" | "none" | "required" | "function" (the one named `function`)
    function: str | None = None
    parallel: bool = True  # False: at most one call

    @property
    def parses(self) -> bool:
        """Whether the reply's <tool_call> blocks are calls (not under "none": there they cannot be written)."""
        return self.choice != "none"

    def functions(self) -> list[dict]:
        return [t.get("function") or {} for t in self.tools]

    def grammar(self) -> Grammar | None:
        """The constraint a forced choice puts on the reply: calls only ("required": of any tool, "function": of the
        named one), each `{"name": ..., "arguments": ...}` with arguments valid under the function's parameters;
        one call, or several one line apart when parallel. None when the model chooses."""
        if self.choice not in ("required", "function"):
            return None
        names = [f.get("name") for f in self.functions()]
        chosen = [self.function] if self.choice == "function" else names
        rules = [f"call_{i}: {json_rule(call_schema(name, self.functions()[names.index(name)].get('parameters')))}"
                 for i, name in enumerate(chosen)]
        body = " | ".join(f"call_{i}" for i in range(len(chosen)))
        repeat = ' ("\\n" call)*' if self.parallel else ""
        return Grammar("\n".join([f"start: call{repeat}", f'call: <tool_call> "\\n" ({body}) "\\n" </tool_call>',
                                   *rules]))


def function_tool(tool: dict) -> dict:
    """A function tool in the chat form the template lists (`{"type": "function", "function": {...}}`); the realtime /
    Responses form (`{"type": "function", "name", "description", "parameters"}`) is converted to it."""
    if "function" in tool or "name" not in tool:
        return tool
    return {"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters", "strict")
                                             if k in tool}}


def tool_use(tools: Sequence[dict] | None, choice: str | dict | None = None,
             parallel: bool | None = None) -> ToolUse | None:
    """A request's `tools`, `tool_choice` (a string, or a named function in the chat `{"function": {"name"}}` or
    realtime `{"name"}` form) and `parallel_tool_calls` as a ToolUse (None: no tools). A choice that names no listed
    tool, or forces a call without tools, is the client's error (PipelineRequestError naming the field)."""
    from aura_omni.pipeline.processors import PipelineRequestError  # processors imports this module

    listed = tuple(function_tool(t) for t in tools or ())
    names = [(t.get("function") or {}).get("name") for t in listed]
    if isinstance(choice, dict):
        chat_form = isinstance(choice.get("function"), dict)
        name = (choice.get("function") or {}).get("name") if chat_form else choice.get("name")
        param = "tool_choice.function.name" if chat_form else "tool_choice.name"
        if name not in names:
            listed_names = ", ".join(map(str, names)) or "none were sent"
            raise PipelineRequestError(f"{param}: {name!r} is not among the tools ({listed_names})", param=param,
                                       code="unknown_tool")
        return ToolUse(listed, "function", name, parallel is not False)
    if choice not in (None, "auto", "none", "required"):
        raise PipelineRequestError(f"tool_choice: {choice!r} is not one of auto, none, required or a named function",
                                   param="tool_choice")
    if choice == "required" and not listed:
        raise PipelineRequestError("tool_choice: \"required\" needs tools; send tools or leave tool_choice out",
                                   param="tool_choice")
    return ToolUse(listed, choice or "auto", None, parallel is not False) if listed else None


def response_format_schema(response_format: dict | None) -> dict | None:
    """The JSON schema an OpenAI `response_format` holds the reply to (json_object: any object); None for text."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        return {"type": "object"} if schema is None else schema
    raise ValueError(f"type {kind!r} is not one of text, json_object, json_schema")


def call_schema(name: str, parameters: dict | None) -> dict:
    """The JSON schema of one call's object: `{"name": name, "arguments": <parameters>}` in that order; the parameters'
    definitions move to the root, where their `#/$defs/...` references point."""
    params = dict(parameters) if parameters else {"type": "object", "properties": {}}
    defs = {k: params.pop(k) for k in ("$defs", "definitions") if k in params}
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": params},
            "required": ["name", "arguments"], "additionalProperties": False, **defs}


# ---------------------------------------------------------------------------------------------- prompt

def system_with_tools(system: str | None, tools: Sequence[dict]) -> str:
    """The system turn's text with the tools section (the template's `tools` branch); `system` None: no system
    message was given."""
    listed = "".join("\n" + tojson(tool) for tool in tools)
    return ("" if system is None else system + "\n\n") + TOOLS_HEADER + listed + TOOLS_FOOTER


def call_block(name: str, arguments: str | Any) -> str:
    """One call as the template writes it in history (`arguments` a JSON string is kept verbatim)."""
    args = arguments if isinstance(arguments, str) else tojson(arguments)
    return f'{CALL_OPEN}\n{{"name": "{name}", "arguments": {args}}}\n{CALL_CLOSE}'


def assistant_text(content: str, calls: Sequence[tuple[str, str | Any]]) -> str:
    """An assistant history turn: its content, then its calls ((name, arguments) each), one line apart."""
    return content + "".join(("\n" if i or content else "") + call_block(name, args)
                             for i, (name, args) in enumerate(calls))


def tool_results_text(results: Sequence[str]) -> str:
    """Consecutive `tool` messages as the one user turn the template makes of them (after its `user\\n`)."""
    return "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)


# ---------------------------------------------------------------------------------------------- reply

@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it (cut short when the reply hit its token limit)

    def openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ReplyParts:
    content: str  # the text outside the calls
    calls: list[tuple[str, str, bool]]  # (name, arguments so far, closed) per call whose name is known


_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*', re.DOTALL)
_CALL_TAIL = re.compile(r"\s*\}\s*\Z")


def _held_back(text: str, marker: str) -> int:
    """Length of the longest end of `text` that begins `marker` (may still become it)."""
    return max((k for k in range(min(len(marker) - 1, len(text)), 0, -1) if text.endswith(marker[:k])), default=0)


def _call(body: str, closed: bool) -> tuple[str, str] | None:
    """(name, arguments text) of a call body; None while its name is not known, or when it is not a call."""
    head = _CALL_HEAD.match(body)
    if head is None:
        if closed:  # another key order: read it whole
            try:
                obj = json.loads(body)
            except ValueError:
                return None
            if isinstance(obj, dict) and isinstance(obj.get("name"), str) and "arguments" in obj:
                return obj["name"], tojson(obj["arguments"])
        return None
    name = json.loads(f'"{head.group(1)}"')
    rest = body[head.end():]
    if closed:
        return name, _CALL_TAIL.sub("", rest)
    # the outer object's closing brace (and the newline before </tool_call>) may be what arrives last: held back
    return name, rest.rstrip().removesuffix("}").rstrip() if rest.rstrip().endswith("}") else rest.rstrip()


def split_reply(text: str, final: bool = True) -> ReplyParts:
    """The reply's content and calls. Not `final` (still streaming): a trailing piece that may become `<tool_call>`
    is held back from the content, and an open call's arguments stop short of what may be the call's own end.
    A block that is not a call (no name, not JSON) stays in the content."""
    content, calls, at = [], [], 0
    while True:
        start = text.find(CALL_OPEN, at)
        if start < 0:
            tail = text[at:]
            content.append(tail if final else tail[:len(tail) - _held_back(tail, CALL_OPEN)])
            break
        content.append(text[at:start])
        end = text.find(CALL_CLOSE, start)
        closed = end >= 0
        body = text[start + len(CALL_OPEN):end if closed else len(text)]
        if not closed and not final:
            body = body[:len(body) - _held_back(body, CALL_CLOSE)]
        call = _call(body, closed or final)
        if call is None and (closed or final):
            content.append(text[start:end + len(CALL_CLOSE)] if closed else text[start:])
        elif call is not None:
            calls.append((call[0], call[1], closed))
        if not closed:
            break
        at = end + len(CALL_CLOSE)
    return ReplyParts("".join(content), calls)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class CallDelta:
    """What is new about call `index`: on its first delta its id and name; then pieces of its arguments."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass
class ReplyStream:
    """A reply followed as it grows (`feed` the whole text so far): the content and each call's arguments only ever
    extend, so a stream of deltas adds up to what `split_reply` finds in the finished text."""

    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""
    max_calls: int | None = None  # parallel_tool_calls false: 1 (later calls are dropped)

    def feed(self, text: str, final: bool = False) -> tuple[str, list[CallDelta]]:
        """(new content, call deltas) since the last feed."""
        parts = split_reply(text, final)
        parts.calls = parts.calls[:self.max_calls]
        new_content = parts.content[len(self.content):] if parts.content.startswith(self.content) else ""
        self.content += new_content
        deltas = []
        for i, (name, args, _) in enumerate(parts.calls):
            if i == len(self.calls):
                self.calls.append(ToolCall(new_call_id(), name, ""))
                deltas.append(CallDelta(i, id=self.calls[i].id, name=name))
            call = self.calls[i]
            if args.startswith(call.arguments) and len(args) > len(call.arguments):
                piece = args[len(call.arguments):]
                call.arguments = args
                if deltas and deltas[-1].index == i:
                    deltas[-1].arguments = piece
                else:
                    deltas.append(CallDelta(i, arguments=piece))
        return new_content, deltas
