"""Function calling in a realtime session: `tools` and `tool_choice` (session.update, or one response.create), the
calls of AURA's reply as `function_call` items, and the client's `function_call_output` items.

Realtime tools are flat (`{"type": "function", "name", "description", "parameters"}`); the prompt lists them as the
chat path does (pipeline/tool_calls.py, the checkpoint's template), and a forced choice (`required`, a named function)
constrains the reply by grammar, so its call's arguments are valid under the function's schema whatever the weights.
A call is sent as OpenAI sends one: `response.output_item.added` (a `function_call` item, in progress),
`response.function_call_arguments.delta`... `.done`, `response.output_item.done`, and the item in `response.done`.
The call and the client's output stay in the conversation, so the next reply sees both, as the template renders
them (an assistant `<tool_call>` block, a user `<tool_response>` block). The Talker speaks only the content.
"""

from __future__ import annotations

import re
from typing import Any

from ..pipeline.processors import PipelineRequestError
from ..pipeline.tool_calls import CallDelta, ToolUse, tool_use
from .errors import ClientError
from .events import new_id
from .history import FunctionCall, FunctionCallOutput, Item

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's function name rule
CHOICES = ("auto", "none", "required")
TOOL_KEYS = ("tools", "tool_choice", "parallel_tool_calls")  # what session.update and response.create may set


def _refused(param: str, message: str, code: str = "invalid_value") -> ClientError:
    return ClientError(code, f"{param}: {message}", param)


def check_tools(value: Any, param: str) -> tuple[dict, ...]:
    """A `tools` list as OpenAI's realtime API takes it (flat function tools), each refused by its own field."""
    if not isinstance(value, list):
        raise _refused(param, "must be a list of function tools")
    seen = set()
    for k, tool in enumerate(value):
        where = f"{param}[{k}]"
        if not isinstance(tool, dict):
            raise _refused(where, "a tool is an object {type: \"function\", name, description, parameters}")
        if tool.get("type", "function") != "function":
            raise _refused(f"{where}.type", f"AURA calls function tools only (got {tool.get('type')!r})",
                           "unsupported_tool")
        if "function" in tool:
            raise _refused(f"{where}.function", "realtime tools are flat: send name, description and "
                           "parameters beside type, not inside `function`")
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise _refused(f"{where}.name", f"a function name is 1 to 64 letters, digits, _ or - "
                           f"(got {name!r})")
        if name in seen:
            raise _refused(f"{where}.name", f"two tools are named {name!r}")
        seen.add(name)
        if tool.get("description") is not None and not isinstance(tool["description"], str):
            raise _refused(f"{where}.description", "must be a string")
        params = tool.get("parameters")
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
            raise _refused(f"{where}.parameters", "must be a JSON schema of type object", "invalid_schema")
    return tuple({"type": "function", **tool} for tool in value)


def check_tool_choice(value: Any, tools: tuple[dict, ...], param: str) -> str | dict:
    """`auto`, `none`, `required`, or `{"type": "function", "name"}` naming one of `tools` (beta: the name alone)."""
    names = [t["name"] for t in tools]
    if isinstance(value, str) and value not in CHOICES and value in names:
        value = {"type": "function", "name": value}
    if isinstance(value, str):
        if value not in CHOICES:
            raise _refused(param, f"must be auto, none, required or {{\"type\": \"function\", \"name\": "
                           f"...}} (got {value!r})")
        if value == "required" and not tools:
            raise _refused(param, "\"required\" needs tools: send tools with it")
        return value
    if not isinstance(value, dict) or value.get("type", "function") != "function":
        raise _refused(param, "must be auto, none, required or {\"type\": \"function\", \"name\": ...}")
    name = value.get("name")
    if name not in names:
        raise _refused(f"{param}.name", f"{name!r} is not among the tools "
                       f"({', '.join(names) or 'none were sent'})", "unknown_tool")
    return {"type": "function", "name": name}


def tool_settings(update: dict, tools: tuple[dict, ...], choice: str | dict, where: str) -> dict:
    """The SessionConfig fields an update (`where`: session or response) sets: its tools, choice and parallel calls,
    checked together (a named choice must name a tool of the effective list)."""
    out: dict[str, Any] = {}
    if "tools" in update:
        out["tools"] = tools = check_tools(update["tools"] if update["tools"] is not None else [], f"{where}.tools")
    if update.get("tool_choice") is not None:
        out["tool_choice"] = choice = check_tool_choice(update["tool_choice"], tools, f"{where}.tool_choice")
    elif "tools" in update and isinstance(choice, dict) or choice == "required" and not tools:
        check_tool_choice(choice, tools, f"{where}.tool_choice")  # the tools changed under the session's choice
    if update.get("parallel_tool_calls") is not None:
        if not isinstance(update["parallel_tool_calls"], bool):
            raise _refused(f"{where}.parallel_tool_calls", "must be true or false")
        out["parallel_tool_calls"] = update["parallel_tool_calls"]
    return out


def session_tool_use(config) -> ToolUse | None:
    """A turn's tools (pipeline form): one call per reply unless parallel_tool_calls is true (a voice reply acts,
    then speaks of it)."""
    try:
        return tool_use(config.tools, config.tool_choice, config.parallel_tool_calls is True)
    except PipelineRequestError as e:  # checked at update; kept as a client error should that ever slip
        raise ClientError("invalid_value", str(e), f"session.{e.param}") from None


def beta_tool_choice(choice: str | dict) -> str:
    """The beta session's `tool_choice`, a string: a named function is its name."""
    return choice["name"] if isinstance(choice, dict) else choice


def session_param(param: str | None) -> str | None:
    """A turn builder's field name for a tool (`tools[0].function.parameters.x`) as the session names it
    (`session.tools[0].parameters.x`)."""
    if param and (param.startswith("tools[") or param.startswith("tool_choice")):
        return "session." + param.replace(".function.", ".", 1).replace(".function", "", 1)
    return param


class FunctionCalls:
    """The session's room for calls: the client's call items, and AURA's calls streamed into a response."""

    def _function_item(self, item: dict, param: str = "item") -> Item:
        """A client's `function_call` or `function_call_output` item (conversation.item.create)."""
        kind = item.get("type")
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise ClientError("invalid_item", f"a {kind} item needs call_id (the call's id)", f"{param}.call_id")
        item_id = item.get("id") or new_id("item")
        if kind == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                raise ClientError("invalid_item", "output must be a string (JSON text or plain text)",
                                  f"{param}.output")
            return FunctionCallOutput(item_id, call_id=call_id, output=output)
        name, arguments = item.get("name"), item.get("arguments", "")
        if not isinstance(name, str) or not name:
            raise ClientError("invalid_item", "a function_call item needs its function's name", f"{param}.name")
        if not isinstance(arguments, str):
            raise ClientError("invalid_item", "arguments must be a JSON string", f"{param}.arguments")
        return FunctionCall(item_id, name=name, call_id=call_id, arguments=arguments)

    def _call_delta(self, resp, delta: CallDelta) -> None:
        """A piece of a call of AURA's reply: the call's item on its first, then its arguments."""
        if delta.id is not None:
            call = FunctionCall(new_id("item"), done=False, name=delta.name, call_id=delta.id)
            resp.output.append(call)
            if not resp.out_of_band:
                self.history.add(call)
                self._emit_for(resp, "conversation.item.added", previous_item_id=self._previous(call), item=call)
            self._emit_for(resp, "response.output_item.added", response_id=resp.id,
                           output_index=resp.output.index(call), item=call)
        call = [o for o in resp.output if isinstance(o, FunctionCall)][delta.index]
        if delta.arguments:
            call.arguments += delta.arguments
            self._emit_for(resp, "response.function_call_arguments.delta", response_id=resp.id, item_id=call.id,
                           output_index=resp.output.index(call), call_id=call.call_id, delta=delta.arguments)

    def _calls_done(self, resp, calls: list) -> None:
        """The reply is whole: each call's arguments as parsed from it, then its item done."""
        made = [o for o in resp.output if isinstance(o, FunctionCall)]
        for call, parsed in zip(made, calls):
            call.arguments, call.done = parsed.arguments, True
            where = dict(response_id=resp.id, item_id=call.id, output_index=resp.output.index(call))
            self._emit_for(resp, "response.function_call_arguments.done", **where, call_id=call.call_id,
                           name=call.name, arguments=call.arguments)
            self._emit_for(resp, "response.output_item.done", response_id=resp.id, output_index=where["output_index"],
                           item=call)
            if not resp.out_of_band:
                self._emit_for(resp, "conversation.item.done", item=call)
