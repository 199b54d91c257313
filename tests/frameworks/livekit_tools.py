"""LiveKit Agents function calling over /v1/realtime: `openai.realtime.RealtimeModel(base_url=...)` with a
`@function_tool`, its `.session()` used without a room, as an AgentSession drives it: `update_tools`, the user's
message through `update_chat_ctx`, `generate_reply(tool_choice=<the tool>)` (forced), the call read from the
generation's `function_stream` and run by LiveKit's own `execute_function_call`, its output added to the chat
context (LiveKit sends it as a `function_call_output` item), and one more `generate_reply` that AURA speaks.

As in livekit_realtime.py, a server `error` or an event LiveKit logs at ERROR fails the scenario."""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from common import log, parse_args, run, short, step
from livekit_realtime import Errors


async def main() -> None:
    args, _ = parse_args()
    from livekit.agents import llm
    from livekit.plugins import openai

    logging.basicConfig(level=logging.WARNING)
    logged = Errors()
    logging.getLogger("livekit").addHandler(logged)
    ran: list[str] = []

    @llm.function_tool
    async def get_weather(city: Literal["Paris", "Oslo", "Lima"]) -> str:
        """The forecast for a city."""
        ran.append(city)
        return f"Sunny in {city}, 21 degrees."

    model = openai.realtime.RealtimeModel(base_url=f"{args.url}/v1", model=args.model, api_key=args.api_key)
    session = model.session()
    errors: list[str] = []
    session.on("error", lambda ev: errors.append(short(repr(ev.error))))

    def check() -> None:
        assert not errors and not logged.records, f"errors: {errors}; logged: {logged.records}"

    async def drain(generation) -> tuple[int, list]:
        """A generation read to its end: its audio frames, and its function calls."""
        frames, calls = 0, []

        async def messages() -> None:
            nonlocal frames
            async for message in generation.message_stream:
                async def text(stream) -> None:
                    async for _ in stream:
                        pass
                async for _ in message.audio_stream:
                    frames += 1
                await text(message.text_stream)

        async def functions() -> None:
            async for call in generation.function_stream:
                calls.append(call)

        await asyncio.gather(messages(), functions())
        return frames, calls

    try:
        await step("update_tools", session.update_tools([get_weather]))
        session.update_options(max_response_output_tokens=64)  # the forced call's JSON fits
        ctx = session.chat_ctx.copy()
        ctx.add_message(role="user", content="What is the weather in Paris?")
        await step("update_chat_ctx (the user's message)", session.update_chat_ctx(ctx))
        forced = await step("generate_reply(tool_choice=get_weather)", session.generate_reply(
            tool_choice={"type": "function", "function": {"name": "get_weather"}}), timeout=15)
        _, calls = await step("the forced reply's function call", drain(forced))
        assert len(calls) == 1 and calls[0].name == "get_weather", f"calls: {calls}"
        check()
        result = await llm.execute_function_call(
            llm.FunctionToolCall(name=calls[0].name, arguments=calls[0].arguments, call_id=calls[0].call_id),
            llm.ToolContext([get_weather]))
        assert ran and result.fnc_call_out is not None and not result.fnc_call_out.is_error, (
            f"the tool did not run: {result.fnc_call_out} ({result.raw_exception!r})")
        log("tool ran:", ran, "->", result.fnc_call_out.output)

        session.update_options(max_response_output_tokens="inf")  # the deploy's short spoken reply again
        ctx = session.chat_ctx.copy()
        ctx.items.append(result.fnc_call_out)
        await step("update_chat_ctx (the tool's output)", session.update_chat_ctx(ctx))
        reply = await step("generate_reply after the tool", session.generate_reply(), timeout=15)
        frames, calls = await step("the spoken reply", drain(reply))
        assert frames and not calls, f"reply: {frames} audio frames, calls {calls}"
        check()
        log("reply:", frames, "audio frames")
    finally:
        await session.aclose()
        await model.aclose()


if __name__ == "__main__":
    run(main)
