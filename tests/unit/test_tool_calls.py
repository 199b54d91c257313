"""AURA's `<tool_call>` replies -> content and calls, whole and streamed (split at every position)."""

import json

import pytest

from aura_omni.pipeline.tool_calls import ReplyStream, ToolUse, assistant_text, split_reply, tool_results_text

ONE = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
TWO = ONE + '\n<tool_call>\n{"name": "set_lights", "arguments": {"on": true, "rooms": [{"id": 1}]}}\n</tool_call>'
REPLIES = {
    "one call": (ONE, "", [("get_weather", '{"city": "Paris", "unit": "c"}')]),
    "content then two calls": ("Sure, one moment.\n" + TWO, "Sure, one moment.",
                               [("get_weather", '{"city": "Paris", "unit": "c"}'),
                                ("set_lights", '{"on": true, "rooms": [{"id": 1}]}')]),
    "no call": ("It is sunny <b>today</b>.", "It is sunny <b>today</b>.", []),
    "keys in another order": ('<tool_call>\n{"arguments": {"a": 1}, "name": "f"}\n</tool_call>', "", [("f", '{"a": 1}')]),
    "not a call stays content": ("<tool_call>\nnot json\n</tool_call> ok", "<tool_call>\nnot json\n</tool_call> ok", []),
}


@pytest.mark.parametrize("case", list(REPLIES))
def test_split_reply_finds_content_and_calls(case):
    text, content, calls = REPLIES[case]
    parts = split_reply(text)
    assert parts.content.strip() == content
    assert [(name, args) for name, args, _ in parts.calls] == calls
    for _, args, closed in parts.calls:
        assert closed and json.loads(args) is not None


def stream(pieces: list[str]) -> tuple[str, ReplyStream, list]:
    reply, content, deltas, text = ReplyStream(), "", [], ""
    for i, piece in enumerate(pieces):
        text += piece
        new, calls = reply.feed(text, final=i == len(pieces) - 1)
        content += new
        deltas += calls
    return content, reply, deltas


@pytest.mark.parametrize("case", list(REPLIES))
def test_streamed_deltas_add_up_to_the_whole_reply_at_every_split(case):
    text, content, calls = REPLIES[case]
    for cut in range(1, len(text)):
        for pieces in ([text[:cut], text[cut:]], [text[:cut], text[cut:cut + 3], text[cut + 3:]]):
            streamed, reply, deltas = stream([p for p in pieces if p] or [""])
            assert streamed.strip() == content, (cut, pieces)
            assert [(c.name, c.arguments) for c in reply.calls] == calls, (cut, pieces)
            starts = [d for d in deltas if d.id is not None]
            assert [(d.index, d.name) for d in starts] == [(i, name) for i, (name, _) in enumerate(calls)]
            for i, (_, args) in enumerate(calls):
                assert "".join(d.arguments for d in deltas if d.index == i) == args
                assert all(d.id is None for d in deltas if d.index == i and d is not starts[i])


def test_every_character_streamed_alone_gives_the_same_calls():
    text, content, calls = REPLIES["content then two calls"]
    streamed, reply, deltas = stream(list(text))
    assert streamed.strip() == content and [(c.name, c.arguments) for c in reply.calls] == calls
    assert len({c.id for c in reply.calls}) == 2 and all(c.id.startswith("call_") for c in reply.calls)


def test_content_never_shows_a_partial_tool_call_marker():
    reply = ReplyStream()
    assert reply.feed("Hello <tool_ca")[0] == "Hello "
    assert reply.feed('Hello <tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', final=True)[0] == ""


def test_a_call_cut_by_the_token_limit_keeps_its_partial_arguments():
    parts = split_reply('<tool_call>\n{"name": "f", "arguments": {"city": "Par', final=True)
    assert parts.calls == [("f", '{"city": "Par', False)] and parts.content == ""


def test_history_text_is_what_the_template_writes():
    assert assistant_text("", [("f", '{"a": 1}')]) == '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    assert assistant_text("ok", [("f", {"a": 1}), ("g", "{}")]) == (
        'ok\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>')
    assert tool_results_text(["1", "2"]) == "<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"


def test_only_forced_choices_constrain_the_reply():
    tools = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)
    assert ToolUse(tools, "auto").grammar() is None and ToolUse(tools, "none").grammar() is None
    assert not ToolUse(tools, "none").parses
    one = ToolUse(tools, "function", "f", parallel=False).grammar().lark
    assert one.startswith("start: call\n") and '"const": "f"' in one
    assert ToolUse(tools, "required").grammar().lark.startswith('start: call ("\\n" call)*')


def test_without_parallel_calls_only_the_first_call_is_kept():
    text, _, calls = REPLIES["content then two calls"]
    reply = ReplyStream(max_calls=1)
    reply.feed(text, final=True)
    assert [(c.name, c.arguments) for c in reply.calls] == calls[:1]
