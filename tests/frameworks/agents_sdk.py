"""The OpenAI Agents SDK (`openai-agents`): a `RealtimeRunner` session with the SDK's own defaults (voice `ash`,
`semantic_vad`, audio out), pointed at the server by `model_config={"url": ...}`. A spoken turn that the server's VAD
ends, a text turn, an interrupt while the reply plays, and one more text turn after it.

The SDK validates every server event with the `openai` package's GA models and reports what fails as an `error`
event (then drops the event: a `response.done` it cannot parse leaves the turn open forever), so any `error` here is a
protocol violation of the server's."""

from __future__ import annotations

import asyncio

from common import chunks, log, parse_args, pydantic_problems, run, short, step

ERROR_GRACE_S = 5.0


def describe(error) -> str:
    """An SDK error event's error: a pydantic ValidationError as `event.field: message` lines, without the union's
    list of every event model."""
    if not hasattr(error, "errors"):
        return str(error)
    return pydantic_problems(error.errors())


async def main() -> None:
    args, _ = parse_args()
    from agents.realtime import RealtimeAgent, RealtimeRunner

    runner = RealtimeRunner(RealtimeAgent(name="Assistant", instructions="Be brief."))
    session = await runner.run(model_config={"url": f"{args.ws_url}/v1/realtime?model={args.model}",
                                             "api_key": args.api_key})
    errors: dict[str, str] = {}  # the SDK's error events, one per distinct message
    events: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        async for event in session:
            if event.type == "error":
                errors.setdefault(describe(event.error), "")
            events.put_nowait(event)

    async def until(kind: str) -> list:
        got = []
        while True:
            try:  # after an error event, what it broke shows within seconds: fail then, not at the step's timeout
                event = await asyncio.wait_for(events.get(), ERROR_GRACE_S if errors else None)
            except asyncio.TimeoutError:
                raise AssertionError(f"no {kind} after the SDK's error events (below)") from None
            got.append(event)
            if event.type == kind:
                return got

    async with session:
        reader = asyncio.create_task(pump())
        try:
            # 1. a spoken turn: the phrase and its silence, no commit; the session's semantic_vad ends the turn
            for piece in chunks(args.speech):
                await session.send_audio(piece)
            turn = await step("spoken turn: agent_end (response.done)", until("agent_end"))
            audio = sum(e.type == "audio" for e in turn)
            assert audio, f"spoken turn ended without audio: {[e.type for e in turn]}"
            log("spoken turn:", audio, "audio events")

            # 2. a text turn: the SDK sends it only once it has seen the previous response.done
            await session.send_message("Say hello.")
            turn = await step("text turn: agent_end", until("agent_end"))
            assert any(e.type == "audio" for e in turn), f"text turn without audio: {[e.type for e in turn]}"
            log("text turn:", sum(e.type == "audio" for e in turn), "audio events")

            # 3. an interrupt while the reply plays: playback stops (audio_interrupted) and the turn still ends
            await session.send_message("Tell me a story.")
            await step("interrupted turn: first audio", until("audio"))
            await session.interrupt()
            turn = await step("interrupted turn: agent_end", until("agent_end"))
            assert any(e.type == "audio_interrupted" for e in turn), (
                f"interrupt: no audio_interrupted: {[e.type for e in turn]}")
            log("interrupt: audio_interrupted, then agent_end")

            # 4. the session carries on after the interrupt
            await session.send_message("Are you there?")
            turn = await step("turn after the interrupt: agent_end", until("agent_end"))
            assert any(e.type == "audio" for e in turn), f"no audio after the interrupt: {[e.type for e in turn]}"
        finally:
            reader.cancel()
            for e in errors:  # also when a step failed: they are why
                log("SDK error event:", short(e))
    assert not errors, f"{len(errors)} distinct error events from the Agents SDK (above)"


if __name__ == "__main__":
    run(main)
