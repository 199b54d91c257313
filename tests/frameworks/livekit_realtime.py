"""LiveKit Agents (`livekit-agents[openai]`): `openai.realtime.RealtimeModel(base_url=...)` with its defaults (voice
`marin`, `semantic_vad`), its `.session()` used without a room. The usual greeting (`generate_reply(instructions=...)`
before any input), a spoken turn the server's VAD ends, an `interrupt()` while a reply plays, and one more reply.

LiveKit does not validate events; a server `error` reaches the session's `error` event, and an event it cannot
handle is logged at ERROR ("failed to handle event"): both count as failures here."""

from __future__ import annotations

import asyncio
import logging

from common import RATE, chunks, log, parse_args, run, short, step


class Errors(logging.Handler):
    """The framework's ERROR log records (an event it could not handle, an error it was sent)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(short(record.getMessage() + (f" {record.exc_info[1]!r}" if record.exc_info else "")))


async def main() -> None:
    args, _ = parse_args()
    from livekit import rtc
    from livekit.plugins import openai

    logging.basicConfig(level=logging.WARNING)
    logged = Errors()
    logging.getLogger("livekit").addHandler(logged)
    model = openai.realtime.RealtimeModel(base_url=f"{args.url}/v1", model=args.model, api_key=args.api_key)
    session = model.session()
    errors: list[str] = []
    session.on("error", lambda ev: errors.append(short(repr(ev.error))))
    generations: asyncio.Queue = asyncio.Queue()
    session.on("generation_created", generations.put_nowait)

    async def play(generation, stop_after: int | None = None) -> int:
        """Consume a generation's messages as a player would: the number of audio frames; with `stop_after`,
        `interrupt()` once that many arrived, and keep reading until the streams end."""
        frames = 0

        async def audio(stream) -> None:
            nonlocal frames
            async for _ in stream:
                frames += 1
                if frames == stop_after:
                    session.interrupt()

        async def text(stream) -> None:
            async for _ in stream:
                pass

        async for message in generation.message_stream:
            await asyncio.gather(audio(message.audio_stream), text(message.text_stream))
        return frames

    def check() -> None:
        assert not errors and not logged.records, f"errors: {errors}; logged: {logged.records}"

    try:
        # 1. the greeting: generate_reply with instructions before any input
        greeting = await step("generate_reply(instructions=...)", session.generate_reply(
            instructions="Greet the user."), timeout=15)  # LiveKit itself gives up after 10 s
        frames = await step("greeting audio", play(greeting))
        assert frames, "greeting without audio"
        check()
        log("greeting:", frames, "audio frames")

        # 2. a spoken turn: the phrase and its silence; the server's VAD commits and answers (user_initiated False)
        while not generations.empty():
            generations.get_nowait()
        for piece in chunks(args.speech):
            session.push_audio(rtc.AudioFrame(data=piece, sample_rate=RATE, num_channels=1,
                                              samples_per_channel=len(piece) // 2))
        spoken = await step("spoken turn: generation_created", generations.get())
        frames = await step("spoken turn audio", play(spoken))
        assert frames and not spoken.user_initiated, f"spoken turn: {frames} frames"
        check()
        log("spoken turn:", frames, "audio frames")

        # 3. interrupt() once the reply's first audio arrived: the generation must end (response.done, cancelled)
        reply = await step("generate_reply for the interrupt", session.generate_reply(), timeout=15)
        frames = await step("interrupted reply ends", play(reply, stop_after=1))
        check()
        log("interrupt after", frames, "audio frames")

        # 4. the session carries on
        after = await step("generate_reply after the interrupt", session.generate_reply(
            instructions="Say goodbye."), timeout=15)
        assert await step("reply after the interrupt", play(after)), "no audio after the interrupt"
        check()
    finally:
        await session.aclose()
        await model.aclose()


if __name__ == "__main__":
    run(main)
