"""Function calling in a realtime session (session/tools.py) over the real orchestrator and scripted stages: tools and
tool_choice are checked as OpenAI checks them, a call of AURA's reply is sent as OpenAI sends one in each dialect, the
Talker speaks only the content, and the call and its output render into the next prompt exactly as the chat path
renders the same conversation (the checkpoint's template)."""

from __future__ import annotations

import json

import pytest

from test_realtime_session import FakeRuntime, ScriptedSpeech, chatml, new_session, until, user_text

from aura_omni.pipeline.processors import asr2aura
from aura_omni.server.chat import AudioTranscripts, turn_spec
from aura_omni.server.chat_protocol import ChatCompletionRequest
from aura_omni.session import SessionConfig, SessionConfigError

ARGS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "name": "get_weather", "description": "Forecast for a city.", "parameters": ARGS}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


class RecordingSpeech(ScriptedSpeech):
    """The scripted Talker, keeping what it was asked to say."""

    def __init__(self):
        super().__init__(chunks=2, step_s=0.002)
        self.said: list[str] = []

    async def speak(self, text, token_ids, template, *, request_id):
        self.said.append(text)
        async for chunk in super().speak(text, token_ids, template, request_id=request_id):
            yield chunk


def tool_session(beta: bool = False, reply: str = CALL):
    rt = FakeRuntime(speech=RecordingSpeech())
    rt.aura.reply = reply
    s = new_session(rt, beta=beta)
    s.config = s.config.with_update({"tools": [WEATHER], "instructions": "Be brief."})
    return rt, s


# ------------------------------------------------------------------------------------------------ settings

def test_flat_tools_and_each_kind_of_choice_are_taken():
    config = SessionConfig().with_update({"tools": [WEATHER], "tool_choice": "required"})
    assert config.tools == (WEATHER,) and config.tool_choice == "required"
    named = config.with_update({"tool_choice": {"type": "function", "name": "get_weather"}})
    assert named.tool_choice == {"type": "function", "name": "get_weather"}
    assert named.with_update({"tools": [], "tool_choice": "none"}).tools == ()


@pytest.mark.parametrize("update, param, code", [
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "session.tools[0].function", "invalid_value"),
    ({"tools": [{"type": "mcp", "server_label": "x"}]}, "session.tools[0].type", "unsupported_tool"),
    ({"tools": [{"type": "function", "name": "no spaces"}]}, "session.tools[0].name", "invalid_value"),
    ({"tools": [WEATHER, WEATHER]}, "session.tools[1].name", "invalid_value"),
    ({"tools": [{**WEATHER, "parameters": {"type": "array"}}]}, "session.tools[0].parameters", "invalid_schema"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "book_flight"}}, "session.tool_choice.name",
     "unknown_tool"),
    ({"tool_choice": "required"}, "session.tool_choice", "invalid_value"),
    ({"tool_choice": "sometimes"}, "session.tool_choice", "invalid_value"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "session.parallel_tool_calls", "invalid_value"),
])
def test_unusable_tools_are_refused_naming_the_field(update, param, code):
    with pytest.raises(SessionConfigError) as e:
        SessionConfig().with_update(update)
    assert (e.value.param, e.value.code) == (param, code)


def test_removing_the_tool_a_choice_names_is_refused():
    config = SessionConfig().with_update({"tools": [WEATHER], "tool_choice": {"type": "function",
                                                                            "name": "get_weather"}})
    with pytest.raises(SessionConfigError) as e:
        config.with_update({"tools": []})
    assert e.value.param == "session.tool_choice.name"


@pytest.mark.asyncio
@pytest.mark.parametrize("beta", [False, True])
async def test_session_update_echoes_the_tools_and_a_bad_one_is_an_error_event(beta):
    rt, s = tool_session(beta)
    await s.send("session.update", session={"tools": [WEATHER], "tool_choice": "required"})
    updated = (await until(s, "session.updated"))[-1]["session"]
    assert updated["tools"] == [WEATHER] and updated["tool_choice"] == "required"
    await s.send("session.update", event_id="c1", session={"tool_choice": {"type": "function", "name": "nope"}})
    error = (await until(s, "error"))[-1]["error"]
    assert error["param"] == "session.tool_choice.name" and error["event_id"] == "c1"
    assert s.config.tool_choice == "required"  # the session keeps its settings and carries on
    await s.send("response.create", event_id="c2", response={"tool_choice": {"type": "function", "name": "nope"}})
    assert (await until(s, "error"))[-1]["error"]["param"] == "response.tool_choice.name"
    await s.send("conversation.item.create", item=user_text("Weather in Paris?"))
    await s.send("response.create")
    done = (await until(s, "response.done"))[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["type"] == "function_call"
    await s.close()


# ------------------------------------------------------------------------------------------------ a call on the wire

@pytest.mark.asyncio
@pytest.mark.parametrize("beta", [False, True])
async def test_a_call_is_sent_as_openai_sends_one_and_never_spoken(beta):
    rt, s = tool_session(beta)
    await s.send("conversation.item.create", item=user_text("Weather in Paris?"))
    await s.send("response.create")
    events = await until(s, "response.done")
    kinds = [e.type for e in events]
    added = "conversation.item.created" if beta else "conversation.item.added"
    start = kinds.index("response.output_item.added")
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert kinds[start - 1] == added and deltas
    order = [k for k in kinds[start:] if k != "response.function_call_arguments.delta"]
    assert order == ["response.output_item.added", "response.function_call_arguments.done",
                     "response.output_item.done", *([] if beta else ["conversation.item.done"]), "response.done"]
    item = events[start]["item"]
    assert (item["type"], item["name"], item["status"], item["arguments"]) == ("function_call", "get_weather",
                                                                               "in_progress", "")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done["call_id"] == item["call_id"] and done["item_id"] == item["id"] and done["output_index"] == 0
    assert "".join(d["delta"] for d in deltas) == done["arguments"]
    assert json.loads(done["arguments"]) == {"city": "Paris"}
    response = events[-1]["response"]
    assert response["status"] == "completed" and [o["type"] for o in response["output"]] == ["function_call"]
    assert response["output"][0] == {**item, "status": "completed", "arguments": done["arguments"]}
    assert not any("audio" in k or "text.delta" in k for k in kinds) and rt.speech.said == []
    await s.close()


@pytest.mark.asyncio
async def test_content_before_a_call_is_spoken_and_the_call_follows_it():
    rt, s = tool_session(reply=f"Let me check. {CALL}")
    await s.send("conversation.item.create", item=user_text("Weather in Paris?"))
    await s.send("response.create")
    events = await until(s, "response.done")
    output = events[-1]["response"]["output"]
    assert [o["type"] for o in output] == ["message", "function_call"]
    assert output[0]["content"][0]["transcript"] == "Let me check."
    call_added = next(e for e in events if e.type == "response.output_item.added" and e["item"]["type"] ==
                      "function_call")
    assert call_added["output_index"] == 1
    assert rt.speech.said and "tool_call" not in "".join(rt.speech.said) and "Paris" not in "".join(rt.speech.said)
    await s.close()


# ------------------------------------------------------------------------------------------------ the result

def chat_prompt(messages: list[dict], tools: list[dict]) -> str:
    """The prompt the chat path renders for `messages` (server/chat.py's turn_spec, then AURA's prompt)."""
    body = ChatCompletionRequest(model="tiny", messages=messages, tools=tools, modalities=["text"])
    spec = turn_spec(body, AudioTranscripts(), speak=False)
    return chatml(asr2aura(None, text_parts=spec.text_parts, system_prompt=spec.system_prompt, history=spec.history,
                           tools=spec.tool_use.tools))


@pytest.mark.asyncio
@pytest.mark.parametrize("beta", [False, True])
async def test_the_output_of_a_call_is_answered_and_rendered_as_the_chat_template_does(beta):
    rt, s = tool_session(beta)
    await s.send("conversation.item.create", item=user_text("Weather in Paris?"))
    await s.send("response.create")
    call = (await until(s, "response.done"))[-1]["response"]["output"][0]
    await s.send("conversation.item.create", item={"type": "function_call_output", "call_id": call["call_id"],
                                                   "output": '{"forecast": "sunny"}'})
    added = (await until(s, "conversation.item.created" if beta else "conversation.item.added"))[-1]
    assert added["item"]["type"] == "function_call_output" and added["item"]["call_id"] == call["call_id"]
    assert added["previous_item_id"] == call["id"]
    rt.aura.reply = "It is sunny in Paris."
    await s.send("response.create")
    events = await until(s, "response.done")
    reply = events[-1]["response"]
    assert reply["status"] == "completed" and reply["output"][0]["type"] == "message"
    assert rt.speech.said and "sunny" in "".join(rt.speech.said)  # AURA speaks the answer
    chat = chat_prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
                        {"role": "assistant", "content": None, "tool_calls": [{
                            "id": call["call_id"], "type": "function",
                            "function": {"name": "get_weather", "arguments": call["arguments"]}}]},
                        {"role": "tool", "tool_call_id": call["call_id"], "content": '{"forecast": "sunny"}'}],
                       [{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description",
                                                                                   "parameters")}}])
    assert rt.aura.prompts[-1] == chat
    assert "<tool_call>" in chat and "<tool_response>\n{\"forecast\": \"sunny\"}\n</tool_response>" in chat
    await s.close()


@pytest.mark.asyncio
async def test_client_function_items_are_checked_and_kept():
    rt, s = tool_session()
    for item, param in (({"type": "function_call_output", "output": "x"}, "item.call_id"),
                        ({"type": "function_call_output", "call_id": "c", "output": 3}, "item.output"),
                        ({"type": "function_call", "call_id": "c", "arguments": "{}"}, "item.name")):
        await s.send("conversation.item.create", item=item)
        assert (await until(s, "error"))[-1]["error"]["param"] == param
    await s.send("conversation.item.create", item={"type": "function_call", "id": "item_call", "call_id": "c1",
                                                   "name": "get_weather", "arguments": '{"city": "Oslo"}'})
    await until(s, "conversation.item.done")
    await s.send("conversation.item.retrieve", item_id="item_call")
    got = (await until(s, "conversation.item.retrieved"))[-1]["item"]
    assert (got["type"], got["call_id"], got["arguments"]) == ("function_call", "c1", '{"city": "Oslo"}')
    await s.close()


@pytest.mark.asyncio
async def test_a_beta_client_may_name_the_function_alone_and_gets_the_name_back():
    rt, s = tool_session(beta=True)
    await s.send("session.update", session={"tools": [WEATHER], "tool_choice": "get_weather"})
    assert (await until(s, "session.updated"))[-1]["session"]["tool_choice"] == "get_weather"
    assert s.config.tool_choice == {"type": "function", "name": "get_weather"}
    await s.close()


@pytest.mark.asyncio
async def test_a_duplex_session_sends_the_call_once_and_its_item_under_both_names():
    rt = FakeRuntime(speech=RecordingSpeech())
    rt.aura.reply = CALL
    s = new_session(rt, duplex=True)
    await s.send("session.update", session={"tools": [WEATHER]})
    await until(s, "session.updated")
    await s.send("conversation.item.create", item=user_text("Weather in Paris?"))
    await s.send("response.create")
    events = await until(s, "response.done")
    kinds = [e.type for e in events]
    assert kinds.count("response.function_call_arguments.done") == 1
    call_items = [e for e in events if e.type in ("conversation.item.added", "conversation.item.created")
                  and e["item"]["type"] == "function_call"]
    assert sorted(e.type for e in call_items) == ["conversation.item.added", "conversation.item.created"]
    assert events[-1]["response"]["output"][0]["type"] == "function_call" and rt.speech.said == []
    await s.send("conversation.item.truncate", item_id=call_items[0]["item"]["id"], content_index=0, audio_end_ms=0)
    assert (await until(s, "error"))[-1]["error"]["param"] == "item_id"  # a call has no audio to cut
    await s.close()


def test_a_call_cut_off_by_a_cancel_stays_out_of_the_prompt():
    from aura_omni.session.history import FunctionCall, History, Item

    h = History()
    h.add(Item("u", "user", "Weather?"))
    h.add(FunctionCall("c", call_id="call_1", name="get_weather", arguments='{"ci', incomplete=True))
    h.add(Item("u2", "user", "Never mind."))
    assert h.turns("commit_all_on_done") == [("user", "Weather?"), ("user", "Never mind.")]


@pytest.mark.asyncio
async def test_response_input_may_hold_a_call_and_its_output():
    rt, s = tool_session(reply="Sunny.")
    call = {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": '{"city": "Oslo"}'}
    await s.send("response.create", response={"conversation": "none", "input": [
        user_text("Weather in Oslo?"), call, {"type": "function_call_output", "call_id": "call_9", "output": "snow"}]})
    assert (await until(s, "response.done"))[-1]["response"]["status"] == "completed"
    prompt = rt.aura.prompts[-1]
    assert prompt.endswith('<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n'
                           '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>\n'
                           '<|im_start|>user\n<tool_response>\nsnow\n</tool_response><|im_end|>\n'
                           '<|im_start|>assistant\n')
    assert s.history.items == []  # out of band: the conversation is untouched
    await s.close()


@pytest.mark.asyncio
async def test_a_duplex_session_answers_a_calls_output():
    rt = FakeRuntime(speech=RecordingSpeech())
    rt.aura.reply = CALL
    s = new_session(rt, duplex=True)
    await s.send("session.update", session={"tools": [WEATHER]})
    await until(s, "session.updated")
    await s.send("conversation.item.create", item=user_text("Weather in Paris?"))
    await s.send("response.create")
    call = (await until(s, "response.done"))[-1]["response"]["output"][0]
    await s.send("conversation.item.create", item={"type": "function_call_output", "call_id": call["call_id"],
                                                   "output": "sunny"})
    rt.aura.reply = "It is sunny."
    await s.send("response.create")  # no new user input, yet something to answer
    done = (await until(s, "response.done"))[-1]["response"]
    assert done["status"] == "completed" and rt.speech.said
    await s.close()
