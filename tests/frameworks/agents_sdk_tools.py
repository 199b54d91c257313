"""The OpenAI Agents SDK (`openai-agents`) running a `@function_tool` over /v1/realtime: a `RealtimeAgent` with one
tool, a user message, and a `response.create` that forces the tool (`tool_choice` naming it, as a client does for one
turn). The server's grammar makes the random tiny AURA write a valid call; the SDK parses it, runs the tool with those
arguments, sends `function_call_output` and a `response.create` of its own, and AURA's spoken reply ends the turn.

As in agents_sdk.py, every server event passes the SDK's GA models or arrives as an `error` event, which fails here."""

from __future__ import annotations

import asyncio
from typing import Literal

from common import log, parse_args, run, short, step

ERROR_GRACE_S = 5.0
CALL_TOKENS = 64  # the forced call's budget: `<tool_call>`, the JSON of one enum argument, `</tool_call>`


async def main() -> None:
    args, _ = parse_args()
    from agents import function_tool
    from agents.realtime import RealtimeAgent, RealtimeRunner
    from agents.realtime.model_inputs import RealtimeModelSendRawMessage

    ran: list[str] = []

    @function_tool
    def get_weather(city: Literal["Paris", "Oslo", "Lima"]) -> str:
        """The forecast for a city."""
        ran.append(city)
        return f"Sunny in {city}, 21 degrees."

    agent = RealtimeAgent(name="Assistant", instructions="Be brief.", tools=[get_weather])
    session = await RealtimeRunner(agent).run(model_config={
        "url": f"{args.ws_url}/v1/realtime?model={args.model}", "api_key": args.api_key})
    errors: dict[str, str] = {}
    events: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        async for event in session:
            if event.type == "error":
                errors.setdefault(str(getattr(event, "error", event)), "")
            events.put_nowait(event)

    async def until(kind: str) -> list:
        got = []
        while True:
            try:
                event = await asyncio.wait_for(events.get(), ERROR_GRACE_S if errors else None)
            except asyncio.TimeoutError:
                raise AssertionError(f"no {kind} after the SDK's error events (below)") from None
            got.append(event)
            if event.type == kind:
                return got

    async with session:
        reader = asyncio.create_task(pump())
        try:
            await session.model.send_event(RealtimeModelSendRawMessage(message={
                "type": "conversation.item.create", "other_data": {"item": {
                    "type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]}}}))
            await session.model.send_event(RealtimeModelSendRawMessage(message={
                "type": "response.create", "other_data": {"response": {
                    "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": CALL_TOKENS}}}))
            got = await step("forced call: tool_end", until("tool_end"))
            assert any(e.type == "tool_start" for e in got), f"no tool_start: {[e.type for e in got]}"
            end = got[-1]
            assert ran and end.output == f"Sunny in {ran[0]}, 21 degrees.", f"the tool did not run: {short(end)}"
            log("tool ran:", ran, "->", end.output)
            # the SDK sent the output and a response.create; AURA answers aloud
            turn = []
            while not any(e.type == "audio" for e in turn) or turn[-1].type != "agent_end":
                turn += await step("reply to the tool's output: agent_end", until("agent_end"))
            log("reply:", sum(e.type == "audio" for e in turn), "audio events")
            assert len(ran) == 1, f"the tool ran {len(ran)} times"
        finally:
            reader.cancel()
            for e in errors:
                log("SDK error event:", short(e))
    assert not errors, f"{len(errors)} distinct error events from the Agents SDK (above)"


if __name__ == "__main__":
    run(main)
