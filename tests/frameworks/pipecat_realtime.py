"""Pipecat (`pipecat-ai`): `OpenAIRealtimeLLMService` in a pipeline without a transport, as its realtime example
builds it (context aggregators around the service) and with its defaults (no `turn_detection`: OpenAI's server VAD).
A greeting from a system instruction and an empty context (the bot speaks first: 1.9's replacement of the
system-only context, the same `response.create` with nothing before it), a spoken turn the server's VAD ends, and
the user speaking over the next reply (an interruption), after which the conversation goes on.

Pipecat treats any server `error` as fatal (its receive loop ends) and raises on an event its models cannot parse,
so the service must see neither."""

from __future__ import annotations

import asyncio
import sys

from common import RATE, chunks, log, parse_args, run, short, step


async def main() -> None:
    args, _ = parse_args()
    from loguru import logger

    logger.remove()  # pipecat logs every frame link at DEBUG
    logger.add(sys.stderr, level="WARNING")
    from pipecat.frames.frames import (ErrorFrame, InputAudioRawFrame, InterruptionFrame, LLMFullResponseEndFrame,
                                       LLMRunFrame, TTSAudioRawFrame)
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
    from pipecat.workers.runner import WorkerRunner

    errors: list[str] = []

    class Watch(FrameProcessor):
        """Passes every frame on; keeps the service's output (downstream) and its errors (upstream)."""

        def __init__(self):
            super().__init__()
            self.frames: asyncio.Queue = asyncio.Queue()

        async def process_frame(self, frame, direction):
            await super().process_frame(frame, direction)
            if isinstance(frame, ErrorFrame):
                errors.append(short(str(frame.error)))
            elif direction == FrameDirection.DOWNSTREAM:
                self.frames.put_nowait(frame)
            await self.push_frame(frame, direction)

    llm = OpenAIRealtimeLLMService(api_key=args.api_key, base_url=f"{args.ws_url}/v1/realtime",
                                   settings=OpenAIRealtimeLLMService.Settings(
                                       model=args.model, system_instruction="You are friendly. Greet the user."))
    aggregators = LLMContextAggregatorPair(LLMContext())
    errors_up, out = Watch(), Watch()
    task = PipelineWorker(Pipeline([aggregators.user(), errors_up, llm, out, aggregators.assistant()]),
                          params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(task)
    running = asyncio.create_task(runner.run())

    async def until(kind, name: str) -> list:
        got = []
        while True:
            if errors:
                raise AssertionError(f"{name}: the service reported errors: {errors}")
            try:
                frame = await asyncio.wait_for(out.frames.get(), 0.5)
            except asyncio.TimeoutError:
                if running.done():
                    raise AssertionError(f"{name}: the pipeline ended ({running.exception()!r}); errors {errors}")
                continue
            got.append(frame)
            if isinstance(frame, kind):
                return got

    async def speak() -> None:
        for piece in chunks(args.speech):
            await task.queue_frame(InputAudioRawFrame(audio=piece, sample_rate=RATE, num_channels=1))

    def audio_of(frames: list) -> int:
        return sum(isinstance(f, TTSAudioRawFrame) for f in frames)

    try:
        # 1. the bot speaks first: LLMRunFrame on an empty context (what the examples queue on connect)
        await task.queue_frames([LLMRunFrame()])
        turn = await step("greeting", until(LLMFullResponseEndFrame, "greeting"))
        assert audio_of(turn), f"greeting without audio: {[type(f).__name__ for f in turn]}"
        log("greeting:", audio_of(turn), "audio frames")

        # 2. a spoken turn, ended by the server's default turn detection
        await speak()
        turn = await step("spoken turn", until(LLMFullResponseEndFrame, "spoken turn"))
        assert audio_of(turn), f"spoken turn without audio: {[type(f).__name__ for f in turn]}"
        log("spoken turn:", audio_of(turn), "audio frames")

        # 3. the user speaks over the next reply: the service interrupts, then the new turn is answered
        await speak()
        await step("reply to interrupt", until(TTSAudioRawFrame, "reply to interrupt"))
        await speak()
        turn = await step("interruption", until(InterruptionFrame, "interruption"))
        log("interruption after", audio_of(turn), "more audio frames")
        turn = await step("turn after the interruption", until(TTSAudioRawFrame, "turn after the interruption"))
        turn += await step("its end", until(LLMFullResponseEndFrame, "turn after the interruption"))
        assert not errors, errors
    finally:
        await task.cancel()
        await asyncio.wait([running], timeout=10)


if __name__ == "__main__":
    run(main)
