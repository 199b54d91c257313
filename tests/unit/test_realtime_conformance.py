"""Conformance: scripted sessions in both OpenAI dialects, every server event checked against the `openai` package's
own pydantic models of that dialect (`openai.types.realtime` for GA, `openai.types.beta.realtime` for beta).

The script covers a spoken turn, a silent turn, a greeting, a text-only reply, a text turn cancelled mid-reply, a
barge-in under the server VAD, an out-of-band reply, a tool turn (a call, its output, the spoken answer), item
create / retrieve / truncate / delete, and refused events. An event of the
other dialect, or of no OpenAI dialect, is a violation too. The session runs in process over scripted stages
(test_realtime_session.py), so the events checked are the wire JSON the transport sends (`event.to_json()`).
"""

from __future__ import annotations

import asyncio
import typing

import pytest
from pydantic import ValidationError

from test_realtime_session import (SILENT, FakeRuntime, ScriptedAura, ScriptedSpeech, StubVadModel, new_session,
                                   pcm_b64, until, user_text)

from aura_omni.session.vad import ServerVad

openai_types = pytest.importorskip("openai.types.realtime")


def dialect_models(union) -> dict:
    """Event type -> its pydantic model, of an openai RealtimeServerEvent union."""
    members = typing.get_args(typing.get_args(union)[0])
    return {name: m for m in members for name in typing.get_args(m.model_fields["type"].annotation)}


def models(dialect: str) -> dict:
    if dialect == "ga":
        from openai.types.realtime import RealtimeServerEvent
    else:
        from openai.types.beta.realtime import RealtimeServerEvent
    return dialect_models(RealtimeServerEvent)


# the beta models type session.model as OpenAI's own model names; a server echoes the name it serves
SKIPPED = {"beta": {("session", "model")}, "ga": set()}


def violations(dialect: str, events: list[dict]) -> list[str]:
    known, other = models(dialect), models("beta" if dialect == "ga" else "ga")
    found = []
    for event in events:
        kind = event["type"]
        if kind not in known:
            found.append(f"{kind}: {'an event of the other dialect' if kind in other else 'not an OpenAI event'}")
            continue
        try:
            known[kind].model_validate(event)
        except ValidationError as e:
            problems = [err for err in e.errors() if tuple(err["loc"]) not in SKIPPED[dialect]]
            found += [f"{kind}: {'.'.join(map(str, err['loc']))}: {err['msg']}" for err in problems]
    return found


SESSION = {"ga": {"type": "realtime", "instructions": "Be brief.", "output_modalities": ["audio"],
                  "audio": {"input": {"turn_detection": None}, "output": {"voice": "marin"}}},
           "beta": {"modalities": ["audio", "text"], "instructions": "Be brief.", "voice": "alloy",
                    "turn_detection": None}}


async def script(dialect: str) -> list[dict]:
    """The scripted session; every event it sent, as JSON."""
    rt = FakeRuntime(speech=ScriptedSpeech(chunks=3, step_s=0.005))
    s = new_session(rt, beta=dialect == "beta", vad=True)
    sent = []

    async def step(*types: str) -> list:
        got = await until(s, *types, timeout=10)
        sent.extend(e.to_json() for e in got)
        return got

    await step("session.created")
    await s.send("session.update", session=SESSION[dialect])
    await step("session.updated")

    # a spoken turn (push-to-talk)
    await s.send("input_audio_buffer.append", audio=pcm_b64())
    await s.send("input_audio_buffer.commit")
    await s.send("response.create")
    spoken = (await step("response.done"))[-1]["response"]
    await step("rate_limits.updated")

    # a silent turn: AURA chose <|silent|>
    rt.aura.reply = SILENT
    await s.send("conversation.item.create", item=user_text("(nothing to answer)"))
    await s.send("response.create")
    assert (await step("response.done"))[-1]["response"]["aura_reason"] == "listen"
    await step("rate_limits.updated")
    rt.aura.reply = "Hello there. I see a red square."

    # a greeting: nothing new to answer
    await s.send("response.create", response={"instructions": "Greet the user."})
    await step("response.done")
    await step("rate_limits.updated")

    # a text-only reply, to a spoken item created whole
    await s.send("conversation.item.create", item={"type": "message", "role": "user", "content": [
        {"type": "input_audio", "audio": pcm_b64()}]})
    await s.send("response.create", response={"output_modalities": ["text"]})
    text_reply = (await step("response.done"))[-1]["response"]
    assert text_reply["output"][0]["content"][0]["type"] == ("output_text" if dialect == "ga" else "text")
    await step("rate_limits.updated")

    # a text turn cancelled while it speaks
    rt.speech.chunks, rt.speech.step_s = 200, 0.01
    await s.send("conversation.item.create", item=user_text("Tell me a story."))
    await s.send("response.create")
    await step("response.output_audio.delta" if dialect == "ga" else "response.audio.delta")
    await s.send("response.cancel")
    cancelled = (await step("response.done"))[-1]["response"]
    assert cancelled["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}

    # a barge-in under the server VAD while a reply speaks
    await s.send("conversation.item.create", item=user_text("Tell me another."))
    await s.send("response.create")
    await step("response.output_audio.delta" if dialect == "ga" else "response.audio.delta")
    s.vad = ServerVad(0.5, 100, model=StubVadModel([0.9] * 5 + [0.0] * 10))  # the user starts talking
    s.config = s.config.with_update({"type": "realtime", "audio": {"input": {"turn_detection": {
        "type": "server_vad", "silence_duration_ms": 100}}}})
    rt.speech.chunks, rt.speech.step_s = 3, 0.005
    await s.send("input_audio_buffer.append", audio=pcm_b64(seconds=0.48, rate=24000))
    barged = next(e for e in await step("response.done") if e.type == "response.done")["response"]
    assert barged["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    await step("input_audio_buffer.committed")
    await step("response.done")  # the reply to what the user said over it
    await step("rate_limits.updated")
    s.vad = None
    s.config = s.config.with_update({"type": "realtime", "audio": {"input": {"turn_detection": None}}})

    # an out-of-band reply
    await s.send("response.create", response={"conversation": "none", "input": [user_text("Classify: hi")],
                                              "metadata": {"purpose": "classify"}})
    await step("response.done")
    await step("rate_limits.updated")

    # a tool turn: AURA calls a function, the client sends its output, AURA answers
    weather = {"type": "function", "name": "get_weather", "description": "Forecast for a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    await s.send("session.update", session={**({"type": "realtime"} if dialect == "ga" else {}), "tools": [weather],
                                            "tool_choice": "auto"})
    await step("session.updated")
    rt.aura.reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    await s.send("conversation.item.create", item=user_text("Weather in Paris?"))
    await s.send("response.create", response={"tool_choice": {"type": "function", "name": "get_weather"}})
    call = (await step("response.done"))[-1]["response"]["output"][0]
    assert call["type"] == "function_call"
    await step("rate_limits.updated")
    await s.send("conversation.item.create", item={"type": "function_call_output", "call_id": call["call_id"],
                                                   "output": '{"forecast": "sunny"}'})
    await step("conversation.item.added" if dialect == "ga" else "conversation.item.created")
    rt.aura.reply = "It is sunny in Paris."
    await s.send("response.create")
    await step("response.done")
    await step("rate_limits.updated")

    # items
    await s.send("conversation.item.create", item={**user_text("an item"), "id": "item_x"})
    await step("conversation.item.added" if dialect == "ga" else "conversation.item.created")
    await s.send("conversation.item.retrieve", item_id="item_x")
    await step("conversation.item.retrieved")
    await s.send("conversation.item.truncate", item_id=spoken["output"][0]["id"], content_index=0, audio_end_ms=10)
    await step("conversation.item.truncated")
    await s.send("conversation.item.delete", item_id="item_x")
    await step("conversation.item.deleted")

    # refusals
    for event in ({"type": "no.such.event"}, {"type": "input_audio_buffer.append", "audio": "%%%"},
                  {"type": "input_audio_buffer.commit"}, {"type": "conversation.item.retrieve", "item_id": "nope"},
                  {"type": "response.cancel"}, {"type": "session.update", "session": {"temperature": "hot"}},
                  {"type": "session.update", "session": {"tool_choice": {"type": "function", "name": "nope"}}}):
        await s.send({**event, "event_id": "client_1"})
        await step("error")
    await asyncio.sleep(0.05)
    sent.extend(e.to_json() for e in [s._events.get_nowait() for _ in range(s.pending_events())])
    await s.close()
    return sent


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["ga", "beta"])
async def test_every_event_of_a_scripted_session_is_its_dialects_own(dialect):
    events = await script(dialect)
    kinds = {e["type"] for e in events}
    assert {"response.done", "error", "conversation.item.retrieved", "input_audio_buffer.speech_started",
            "response.function_call_arguments.delta", "response.function_call_arguments.done"} <= kinds
    assert ("response.output_audio.delta" if dialect == "ga" else "response.audio.delta") in kinds
    assert ("response.output_text.delta" if dialect == "ga" else "response.text.delta") in kinds
    found = violations(dialect, events)
    assert not found, f"{len(found)} violations of the {dialect} dialect:\n" + "\n".join(sorted(set(found)))


def test_the_check_finds_an_event_of_the_other_dialect_and_a_wrong_shape():
    """The check itself can fail: a beta name in a GA session, a GA assistant part under beta, OpenAI's enum."""
    delta = {"type": "response.audio.delta", "event_id": "e", "response_id": "r", "item_id": "i", "output_index": 0,
             "content_index": 0, "delta": ""}
    assert violations("ga", [delta]) == ["response.audio.delta: an event of the other dialect"]
    done = {"type": "response.done", "event_id": "e", "response": {
        "id": "r", "object": "realtime.response", "status": "cancelled",
        "status_details": {"type": "cancelled", "reason": "barge_in"}, "output": []}}
    assert any("reason" in v for v in violations("ga", [done]))
