"""Function calling over WS /v1/realtime on the tiny CustomVoice deploy, in both OpenAI dialects: a forced call
(`required` or a named function) is grammar-constrained, so its arguments validate against the function's schema
whatever the random weights write; its events come in OpenAI's order; the client's `function_call_output` and a
`response.create` get a spoken reply; a bad tool or choice is an `error` event and the session carries on."""

from __future__ import annotations

import asyncio
import contextlib
import json

import jsonschema
import pytest
import websockets

from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID
from test_realtime_api import realtime_deploy

API_KEY = "test-key"  # as conftest.API_KEY
MODEL = "tiny-tts"  # serving's --served-model-name
ARGS = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "description": "Forecast for a city.", "parameters": ARGS}
LIGHTS = {"type": "function", "name": "set_lights", "parameters": {
    "type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"], "additionalProperties": False}}
SCHEMAS = {"get_weather": ARGS, "set_lights": LIGHTS["parameters"]}
SPEAK = {"tts_max_new_tokens": 4, "sampling_params_list": [  # a short spoken reply, never <|silent|>
    None, {"max_tokens": 6, "logit_bias": {str(AURA_SILENT_TOKEN_ID): -100, str(QWEN_IM_END_ID): -100}}]}
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def server(tiny_dir, start_server):
    server = start_server(realtime_deploy(tiny_dir, 2))
    yield server
    server.stop()


class Client:
    def __init__(self, ws, beta: bool):
        self.ws, self.beta = ws, beta

    async def send(self, type_: str, **fields) -> None:
        await self.ws.send(json.dumps({"type": type_, **fields}))

    async def until(self, *types: str, timeout: float = 120.0) -> list[dict]:
        out = []
        while True:
            out.append(json.loads(await asyncio.wait_for(self.ws.recv(), timeout)))
            if out[-1]["type"] in types:
                return out

    def session(self, **fields) -> dict:
        return fields if self.beta else {"type": "realtime", **fields}


@contextlib.asynccontextmanager
async def connect(server, beta: bool):
    headers = {"Authorization": f"Bearer {API_KEY}", **({"OpenAI-Beta": "realtime=v1"} if beta else {})}
    url = server.url.replace("http://", "ws://") + f"/v1/realtime?model={MODEL}"
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        c = Client(ws, beta)
        await c.until("session.created")
        yield c


@pytest.mark.parametrize("beta", [False, True])
@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
async def test_a_forced_call_validates_and_its_output_gets_a_spoken_reply(server, beta, choice):
    async with connect(server, beta) as c:
        await c.send("session.update", session=c.session(instructions="Be brief.", tools=[WEATHER, LIGHTS],
                                                         tool_choice=choice, turn_detection=None))
        updated = (await c.until("session.updated"))[-1]["session"]
        assert [t["name"] for t in updated["tools"]] == ["get_weather", "set_lights"]
        await c.send("conversation.item.create", item={"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is the weather in Paris?"}]})
        await c.send("response.create", response={"max_output_tokens": 120, "temperature": 1.0})
        events = await c.until("response.done")
        kinds = [e["type"] for e in events]
        assert not any("audio" in k for k in kinds)  # a call is never spoken
        added = next(e for e in events if e["type"] == "response.output_item.added")
        done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
        assert kinds.index("response.output_item.added") < kinds.index("response.function_call_arguments.delta") \
            < kinds.index("response.function_call_arguments.done") < kinds.index("response.output_item.done")
        assert added["item"]["type"] == "function_call" and added["item"]["status"] == "in_progress"
        assert done["call_id"] == added["item"]["call_id"] and done["item_id"] == added["item"]["id"]
        name = added["item"]["name"]
        assert name == "get_weather" if isinstance(choice, dict) else name in SCHEMAS
        jsonschema.validate(json.loads(done["arguments"]), SCHEMAS[name])
        response = events[-1]["response"]
        assert response["status"] == "completed"
        assert [(o["type"], o["arguments"]) for o in response["output"]] == [("function_call", done["arguments"])]

        # the client runs the function and sends its output; AURA answers it aloud
        await c.send("conversation.item.create", item={"type": "function_call_output", "call_id": done["call_id"],
                                                       "output": json.dumps({"forecast": "sunny", "high_c": 21})})
        await c.until("conversation.item.created" if beta else "conversation.item.added")
        await c.send("session.update", session=c.session(tool_choice="none", extra_body=SPEAK))
        await c.until("session.updated")
        await c.send("response.create")
        events = await c.until("response.done")
        assert any(e["type"] == ("response.audio.delta" if beta else "response.output_audio.delta") for e in events)
        reply = events[-1]["response"]
        assert reply["status"] == "completed" and [o["type"] for o in reply["output"]] == ["message"]


@pytest.mark.parametrize("beta", [False, True])
async def test_bad_tools_are_error_events_naming_the_field_and_the_session_carries_on(server, beta):
    async with connect(server, beta) as c:
        refused = [(c.session(tools=[WEATHER], tool_choice={"type": "function", "name": "book_flight"}),
                    "session.tool_choice.name"),
                   (c.session(tools=[{"type": "function", "function": {"name": "f"}}]), "session.tools[0].function"),
                   (c.session(tools=[{**WEATHER, "parameters": {"type": "object", "properties": {
                       "x": {"not": {"type": "string"}}}}}], tool_choice="required"),
                    "session.tools[0].parameters.properties.x")]
        for session, param in refused:
            await c.send("session.update", session=session)
            error = (await c.until("error"))[-1]["error"]
            assert error["param"] == param, error
        await c.send("session.update", session=c.session(tools=[WEATHER], output_modalities=["text"],
                                                         turn_detection=None) if not beta else
                     c.session(tools=[WEATHER], modalities=["text"], turn_detection=None))
        assert (await c.until("session.updated"))[-1]["session"]["tools"][0]["name"] == "get_weather"
        await c.send("conversation.item.create", item={"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Hi"}]})
        await c.send("response.create", response={"max_output_tokens": 60, "tool_choice": {
            "type": "function", "name": "get_weather"}})
        response = (await c.until("response.done"))[-1]["response"]
        assert response["status"] == "completed" and response["output"][0]["type"] == "function_call"
