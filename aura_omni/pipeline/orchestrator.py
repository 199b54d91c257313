"""Runs one turn through ASR -> AURA -> Talker/Code2Wav, streaming between stages.

With async_chunk, AURA's text streams into the Talker as it is produced (one Talker request per utterance, whose
text grows while it speaks: it starts after the first word), or sentence by sentence where the speech stage cannot
take streamed text; each utterance's audio leaves as the Code2Wav stream produces it, so the first audio is out
long before the reply ends. The consumer sees one ordered event stream (transcript, text deltas, the text done,
audio chunks, done). Closing that stream (client gone) or a timeout cancels every stage's work for the request.
"""

import asyncio
import time
from typing import AsyncIterator, Awaitable, Callable, TypeVar

from aura_omni.deploy import TurnSettings
from aura_omni.stages.asr.transcript import Transcript
from aura_omni.placement import session_key
from aura_omni.pipeline.constants import SILENT_TEXT, TTS_SAMPLE_RATE
from aura_omni.pipeline.processors import (
    PipelineRequestError,
    asr2aura,
    is_effectively_silent,
    strip_assistant_text,
    wrap_tts_token_ids,
)
from aura_omni.stages.aura.prompt_tokens import AuraPrompt
from aura_omni.pipeline.sentences import DEFAULT_MAX_UTTERANCE_CHARS, DEFAULT_START_WORDS, SentenceSplitter, Utterances
from aura_omni.pipeline.stage_api import AsrStage, AuraStage, SpeechStage
from aura_omni.pipeline.tool_calls import ReplyStream
from aura_omni.pipeline.turn import (AudioChunk, TextDelta, TextDone, TranscriptReady, TurnDone, TurnEvent,
                                     TurnRequest, TurnTimeline)


T = TypeVar("T")


class TurnTimeout(TimeoutError):
    """The turn ran past its deadline; every stage's work for it was cancelled."""


_END = object()
_STREAMED = object()  # a queued utterance whose text pieces follow in its own queue


def turn_vision(req: TurnRequest) -> list:
    """This turn's own vision inputs. `req.vision` is in prompt order: the items shown in history turns (their kinds
    in the turn), then this turn's."""
    return req.vision[sum(len(turn[2]) for turn in req.history if len(turn) > 2):]


def aura_prompt(req: TurnRequest, transcript: Transcript | None) -> AuraPrompt:
    """The AURA prompt turns of one turn: its transcript (None without audio), vision, text, system prompt, history."""
    return asr2aura(transcript, vision_items=[v.kind for v in turn_vision(req)], text_parts=req.text_parts,
                    system_prompt=req.system_prompt, history=req.history, is_speech=req.is_speech,
                    tools=req.tool_use.tools if req.tool_use is not None else ())


def prefetch_vision(aura, vision: list) -> asyncio.Task | None:
    """A task encoding `vision` into AURA's vision cache (stages that can: `AuraPipelineStage.prefetch_vision`)."""
    prefetch = getattr(aura, "prefetch_vision", None)
    return asyncio.create_task(prefetch(vision)) if vision and prefetch is not None else None


async def settle(task: asyncio.Task | None, cancel: bool = False) -> None:
    """Wait for a prefetch, or cancel it (the turn failed or was cancelled); its own failure is AURA's to report when
    the request that shows the vision runs."""
    if task is not None:
        if cancel:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class AuraOmniPipeline:
    def __init__(self, asr: AsrStage | None, aura: AuraStage | None, speech: SpeechStage | None,
                 *, sentence_min_chars: int = 30, default_timeout_s: float | None = 300.0,
                 stream_text_to_talker: bool = True, talker_start_words: int = DEFAULT_START_WORDS,
                 max_utterance_chars: int = DEFAULT_MAX_UTTERANCE_CHARS,
                 on_phases: Callable[[dict[str, float]], None] | None = None,
                 turn_settings: TurnSettings | None = None):
        self.asr, self.aura, self.speech = asr, aura, speech
        self.on_phases = on_phases  # called with each finished turn's TurnTimeline.phases() (the server's metrics)
        # deploy `async_chunk`: AURA's text streams into the Talker while AURA decodes (True: as it comes where the
        # speech stage takes streamed text, else sentence by sentence), or the whole reply once AURA has finished
        self.stream_text_to_talker = stream_text_to_talker
        # deploy `turn:`: prefix_prefill, stream_talker_text, transcribe_ahead
        self.turn_settings = turn_settings or TurnSettings()
        self.talker_start_words, self.max_utterance_chars = talker_start_words, max_utterance_chars
        self.sentence_min_chars = sentence_min_chars
        self.default_timeout_s = default_timeout_s

    def check(self, req: TurnRequest) -> None:
        """Refuse what this deployment cannot do before any stage runs."""
        if self.aura is None:
            raise PipelineRequestError("this deployment has no AURA stage; chat completions are not available")
        if req.audio is not None and self.asr is None:
            raise PipelineRequestError("this deployment has no ASR stage; send text instead of audio")
        if req.speak and self.speech is None:
            raise PipelineRequestError("this deployment has no TTS stages; ask for modalities [\"text\"]")
        if req.speak and req.tts is None:
            raise PipelineRequestError("audio output needs a TTS request template")

    async def turn(self, req: TurnRequest) -> AsyncIterator[TurnEvent]:
        self.check(req)
        timeout = req.timeout_s if req.timeout_s is not None else self.default_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        events: asyncio.Queue = asyncio.Queue()
        worker = asyncio.create_task(self._run(req, events))
        try:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TurnTimeout(f"turn {req.request_id} exceeded its {timeout:.0f} s timeout")
                getter = asyncio.ensure_future(events.get())
                try:  # not wait_for: on 3.11 it can return a result that arrives with a cancel and drop the cancel
                    done, _ = await asyncio.wait({getter}, timeout=remaining)
                finally:
                    if not getter.done():
                        getter.cancel()
                if not done:
                    raise TurnTimeout(f"turn {req.request_id} exceeded its {timeout:.0f} s timeout")
                item = getter.result()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    async def _run(self, req: TurnRequest, events: asyncio.Queue) -> None:
        try:
            await self._run_stages(req, events)
            events.put_nowait(_END)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # delivered to the consumer, which re-raises
            events.put_nowait(e)

    async def _run_stages(self, req: TurnRequest, events: asyncio.Queue) -> None:
        timeline = TurnTimeline(req.request_id)
        transcript = None
        if req.audio is not None:
            if session_key.get() is None:  # the prefix prefill and the turn's request go to one AURA replica (Ray)
                session_key.set(req.request_id)
            transcript = await self.beside_aura(self.transcribe(req), req)
            events.put_nowait(TranscriptReady(transcript.text, transcript.language))
            timeline.mark("asr")
        prompt = aura_prompt(req, transcript)

        sentences: asyncio.Queue = asyncio.Queue()
        speaker = asyncio.create_task(self._speak(req, sentences, events, timeline)) if req.speak else None
        splitter = SentenceSplitter(self.sentence_min_chars)
        # token passthrough speaks the whole reply's ids
        streams = req.speak and not req.tts_pass_token_ids and self.stream_text_to_talker
        streamed = streams and self._speech_streams_text(req)
        by_sentence = streams and not streamed
        utterances = Utterances(self.talker_start_words, self.max_utterance_chars)
        utterance: asyncio.Queue | None = None  # the text queue of the utterance being fed
        raw, shown, ids, prompt_tokens, finish_reason = "", "", [], 0, "stop"
        # with tools, the reply's <tool_call> blocks are calls (CallDelta events), never shown as text nor spoken
        reply = (ReplyStream(max_calls=None if req.tool_use.parallel else 1)
                 if req.tool_use is not None and req.tool_use.parses else None)
        said = ""
        try:
            async for delta in self.aura.generate(prompt, req.vision, request_id=f"{req.request_id}-aura",
                                                  sampling=req.aura_sampling):
                timeline.mark("aura_first_token")
                raw += delta.text
                ids += delta.token_ids
                prompt_tokens = max(prompt_tokens, delta.prompt_tokens)
                if delta.finish_reason:
                    finish_reason = delta.finish_reason
                said = raw
                if reply is not None:
                    for call in reply.feed(raw, final=delta.finished)[1]:
                        events.put_nowait(call)
                    said = reply.content
                visible = self._visible(said)
                if visible is not None and visible.startswith(shown) and len(visible) > len(shown):
                    events.put_nowait(TextDelta(visible[len(shown):], list(delta.token_ids)))
                    shown = visible
                if by_sentence:
                    for piece in splitter.feed(said):
                        sentences.put_nowait((piece, None))
                elif streamed:
                    utterance = self._feed_utterances(utterances.feed(said), utterance, sentences)
            if reply is not None:  # a stage that never said `finished`: the reply is whole now
                for call in reply.feed(raw, final=True)[1]:
                    events.put_nowait(call)
                said = reply.content
            silent = is_effectively_silent(said) and not (reply is not None and reply.calls)
            text = "" if silent else strip_assistant_text(said)
            events.put_nowait(TextDone(text, silent))  # AURA is done; the speech may go on
            if streamed:  # ends the open utterance (a silent reply never opened one)
                utterance = self._feed_utterances(utterances.finish(said), utterance, sentences)
            if req.speak and not silent and not streamed and strip_assistant_text(said):
                if by_sentence:
                    for piece in splitter.finish(said):
                        sentences.put_nowait((piece, None))
                else:  # the whole reply at once: its text, or its own ids for token passthrough (not with calls)
                    wrapped = wrap_tts_token_ids(ids) if req.tts_pass_token_ids and said == raw else []
                    sentences.put_nowait((strip_assistant_text(said), wrapped or None))
            if speaker is not None:
                sentences.put_nowait(_END)
                audio_seconds = await speaker
            else:
                audio_seconds = 0.0
        finally:
            if speaker is not None:  # stopped, and its failure (if AURA failed too) retrieved rather than orphaned
                speaker.cancel()
                await asyncio.gather(speaker, return_exceptions=True)
        calls = reply.calls if reply is not None else []
        if calls and finish_reason == "stop":
            finish_reason = "tool_calls"
        events.put_nowait(TurnDone(text=text, raw_text=raw, token_ids=ids, silent=silent, tool_calls=calls,
                                   transcript=transcript.text if transcript is not None else "",
                                   prompt_tokens=prompt_tokens, completion_tokens=len(ids),
                                   audio_seconds=audio_seconds, finish_reason=finish_reason))
        if self.on_phases is not None:
            self.on_phases(timeline.phases())

    async def transcribe(self, req: TurnRequest) -> Transcript:
        """The request's speech as ASR hears it, under the request's ASR options (language, context, the ASR stage's
        sampling, seed included): the one way into ASR, for a turn, a realtime session's transcriptions (at a commit,
        or ahead of it in the VAD's silence) and /v1/audio/transcriptions."""
        if self.asr is None:
            raise PipelineRequestError("this deployment has no ASR stage; send text instead of audio")
        samples, sr = req.audio
        return await self.asr.transcribe(samples, sr, request_id=f"{req.request_id}-asr", language=req.asr_language,
                                         context=req.asr_context, sampling=req.asr_sampling)

    async def encode_vision(self, vision: list) -> None:
        """AURA's vision encoder over `vision`, into the stage's vision cache (where the stage can), ahead of the
        request that shows it: a realtime session's camera window as it arrives. Its failures are that request's to
        report."""
        await settle(prefetch_vision(self.aura, vision))

    async def beside_aura(self, words: Awaitable[T], prefix: TurnRequest | Callable[[], Awaitable[TurnRequest]]) -> T:
        """`words` (a turn's transcription, the session's of its items) awaited while AURA prepares the prompt up to
        them (`prepare_aura` of `prefix`, a request or the coroutine that builds it); the preparation is stopped if
        the words fail or are cancelled, else awaited, so the turn's request finds its prefix cached."""
        async def prepare() -> None:
            await self.prepare_aura(prefix if isinstance(prefix, TurnRequest) else await prefix())

        ahead, heard = asyncio.create_task(prepare()), False
        try:
            result = await words
            heard = True
            return result
        finally:
            await settle(ahead, cancel=not heard)

    async def prepare_aura(self, req: TurnRequest) -> None:
        """AURA's share of a turn that needs no words, done while they are still being made (this turn's ASR, a
        realtime session's transcription, or the user still speaking with the camera on): the vision encoded, then the
        prompt through this turn's vision prefilled into the prefix cache (`prefill_prefix`, where the stage can). The
        one entry to AURA's prefills ahead of a turn. The turn's request then prefills only its words: on the path
        from transcript to first token, or to a silent decision, the vision tokens cost nothing. Its failures are the
        turn's request's to report."""
        await self.encode_vision(req.vision)
        prefill = getattr(self.aura, "prefill_prefix", None)
        if prefill is not None and turn_vision(req) and self.turn_settings.prefix_prefill:
            await prefill(aura_prompt(req, None), req.vision, request_id=f"{req.request_id}-aura-prefix")

    @staticmethod
    def _visible(raw: str) -> str | None:
        """The reply text a client may see so far; None while it may still be the silent marker."""
        stripped = raw.strip()
        if stripped and SILENT_TEXT.startswith(stripped):
            return None
        return strip_assistant_text(raw).replace(SILENT_TEXT, "")

    def _speech_streams_text(self, req: TurnRequest) -> bool:
        if not self.turn_settings.stream_talker_text:  # A/B runs: sentence by sentence
            return False
        streams_text = getattr(self.speech, "streams_text", None)
        return streams_text is not None and streams_text(req.tts)

    @staticmethod
    def _feed_utterances(items: list[str | None], utterance: asyncio.Queue | None,
                         sentences: asyncio.Queue) -> asyncio.Queue | None:
        """Text pieces into the open utterance (opening one, queued for the speaker, when none is); None ends it."""
        for item in items:
            if item is None:
                if utterance is not None:
                    utterance.put_nowait(_END)
                utterance = None
                continue
            if utterance is None:
                utterance = asyncio.Queue()
                sentences.put_nowait((_STREAMED, utterance))
            utterance.put_nowait(item)
        return utterance

    @staticmethod
    async def _pieces(utterance: asyncio.Queue) -> AsyncIterator[str]:
        while (piece := await utterance.get()) is not _END:
            yield piece

    async def _speak(self, req: TurnRequest, sentences: asyncio.Queue, events: asyncio.Queue,
                     timeline: TurnTimeline) -> float:
        """Speak queued sentences and utterances in order; returns seconds of audio produced."""
        samples = 0
        n = 0
        while True:
            item = await sentences.get()
            if item is _END:
                return samples / TTS_SAMPLE_RATE
            timeline.mark("speech_start")
            text, token_ids = item
            request_id = f"{req.request_id}-tts{n}"
            if text is _STREAMED:
                chunks = self.speech.speak_stream(self._pieces(token_ids), req.tts, request_id=request_id)
            else:
                chunks = self.speech.speak(text, token_ids, req.tts, request_id=request_id)
            async for chunk in chunks:
                timeline.mark("first_audio")
                samples += len(chunk)
                events.put_nowait(AudioChunk(chunk))
            n += 1
