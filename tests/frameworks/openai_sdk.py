"""The official `openai` SDK's realtime client, GA (`client.realtime.connect`) or beta
(`client.beta.realtime.connect` with `websocket_base_url`, which sends `OpenAI-Beta: realtime=v1`): a push-to-talk
spoken turn, a text turn with an OpenAI voice name, and a cancel. The SDK does not validate what it receives, so this
script does: every server event must parse as that dialect's own pydantic server event, and none may be the other
dialect's."""

from __future__ import annotations

import base64
import json
import typing

from common import chunks, log, parse_args, pydantic_problems, run, short, step
from pydantic import ValidationError


# the beta models type session.model as OpenAI's own model names; a server echoes the name it serves
SERVED_MODEL = ("session", "model")


def dialect_events(union) -> dict:
    """Event type name -> its pydantic model, of an openai RealtimeServerEvent union."""
    members = typing.get_args(typing.get_args(union)[0])
    return {name: m for m in members for name in typing.get_args(m.model_fields["type"].annotation)}


async def main() -> None:
    args, ns = parse_args({"--dialect": {"choices": ("ga", "beta"), "required": True}})
    from openai import AsyncOpenAI

    if ns.dialect == "ga":
        from openai.types.realtime import RealtimeServerEvent

        client = AsyncOpenAI(base_url=f"{args.url}/v1", api_key=args.api_key)
        connect = client.realtime.connect(model=args.model)
        session = {"type": "realtime", "output_modalities": ["audio"], "instructions": "Be brief.",
                   "audio": {"input": {"turn_detection": None}, "output": {"voice": "marin"}}}
        audio_delta, assistant_part, item_created = ("response.output_audio.delta", "output_audio",
                                                     "conversation.item.added")
    else:
        from openai.types.beta.realtime import RealtimeServerEvent

        client = AsyncOpenAI(base_url=f"{args.url}/v1", api_key=args.api_key,
                             websocket_base_url=f"{args.ws_url}/v1")
        connect = client.beta.realtime.connect(model=args.model)
        session = {"modalities": ["audio", "text"], "instructions": "Be brief.", "voice": "alloy",
                   "turn_detection": None}
        audio_delta, assistant_part, item_created = "response.audio.delta", "audio", "conversation.item.created"
    known = dialect_events(RealtimeServerEvent)
    seen: list[dict] = []
    violations: dict[str, str] = {}  # one per event type and problem: the scenario runs on to find them all

    async with connect as conn:
        async def until(kind: str, name: str) -> list[dict]:
            got = []
            while True:
                event = json.loads(await conn.recv_bytes())
                seen.append(event)
                got.append(event)
                if event["type"] not in known:
                    violations.setdefault(f"{event['type']} (not a {ns.dialect} event)", short(event))
                else:
                    try:
                        known[event["type"]].model_validate(event)
                    except ValidationError as e:
                        problems = pydantic_problems(e.errors(), skip=(SERVED_MODEL,))
                        if problems:
                            violations.setdefault(f"{event['type']}: {problems}", short(event))
                if event["type"] == "error":  # what the step sent was refused: nothing it waits for will come
                    violations.setdefault(f"{name}: error {event['error'].get('code')}", short(event))
                    report()
                if event["type"] == kind:
                    return got

        def report() -> None:
            assert not violations, f"{len(violations)} protocol violations in the {ns.dialect} dialect:\n" + (
                "\n".join(f"- {what}\n  {example}" for what, example in violations.items()))

        created = await step("session.created", until("session.created", "connect"))
        log("session.created", created[-1]["session"].get("id"))
        await conn.session.update(session=session)
        updated = (await step("session.updated", until("session.updated", "session.update")))[-1]["session"]
        voice = updated["audio"]["output"]["voice"] if ns.dialect == "ga" else updated["voice"]
        if voice != ("marin" if ns.dialect == "ga" else "alloy"):
            violations.setdefault("session.updated: the voice sent is not echoed", short(updated))

        # a spoken turn: push-to-talk (turn_detection null), the client commits and asks for the reply
        for piece in chunks(args.speech):
            await conn.input_audio_buffer.append(audio=base64.b64encode(piece).decode())
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        turn = await step("spoken turn", until("response.done", "spoken turn"))
        done = turn[-1]["response"]
        assert done["status"] == "completed", f"spoken turn ended {short(done)}"
        assert any(e["type"] == audio_delta for e in turn), f"spoken turn: no {audio_delta}"
        parts = [p["type"] for item in done["output"] for p in item.get("content", [])]
        if set(parts) != {assistant_part}:
            violations.setdefault(f"response.done: assistant content parts {parts}, not {assistant_part}", "")
        if not any(e["type"] == item_created for e in turn):
            violations.setdefault(f"spoken turn: no {item_created}", "")
        log("spoken turn:", sum(e["type"] == audio_delta for e in turn), "audio deltas")

        # a text turn, then its cancel once audio flows
        await conn.conversation.item.create(item={"type": "message", "role": "user",
                                                  "content": [{"type": "input_text", "text": "Say hello."}]})
        await conn.response.create()
        await step("text turn audio", until(audio_delta, "text turn"))
        await conn.response.cancel()
        turn = await step("cancelled turn", until("response.done", "cancel"))
        done = turn[-1]["response"]
        assert done["status"] in ("cancelled", "completed"), f"cancel ended {short(done)}"
        if done["status"] == "cancelled" and (done.get("status_details") or {}).get("reason") != "client_cancelled":
            violations.setdefault("response.done after response.cancel: reason is not client_cancelled", short(done))
        log("cancel:", done["status"], "after", len(seen), "events")
        report()


if __name__ == "__main__":
    run(main)
