"""Orchestration logic with scripted stages: ordering, the silent gate, streaming overlap, cancellation.

The models are replaced by small scripted stages so each behaviour is tested in isolation; the e2e tests
drive the same orchestrator with the real tiny checkpoints.
"""

import asyncio

import numpy as np
import pytest

from aura_omni.deploy import TurnSettings
from aura_omni.stages.asr.transcript import Transcript
from aura_omni.pipeline.orchestrator import AuraOmniPipeline, TurnTimeout
from aura_omni.pipeline.processors import PipelineRequestError
from aura_omni.stages.aura.prompt_tokens import PromptTurn
from aura_omni.stages.aura.stage import AuraDelta
from aura_omni.pipeline.turn import AudioChunk, TextDelta, TextDone, TranscriptReady, TurnDone, TurnRequest


class ScriptedAsr:
    def __init__(self, text):
        self.text, self.calls = text, 0

    async def transcribe(self, samples, sample_rate, **kw):
        self.calls += 1
        return self.text


class ScriptedAura:
    def __init__(self, pieces, delay=0.0):
        self.pieces, self.delay, self.prompts, self.closed = pieces, delay, [], False

    async def generate(self, prompt, vision, *, request_id, sampling=None):
        self.prompts.append(prompt)
        try:
            for i, piece in enumerate(self.pieces):
                await asyncio.sleep(self.delay)
                yield AuraDelta(piece, [1000 + i], finished=i == len(self.pieces) - 1, prompt_tokens=7)
        finally:
            self.closed = True


class ScriptedSpeech:
    def __init__(self, delay=0.0):
        self.requests, self.delay, self.closed = [], delay, 0

    async def speak(self, text, token_ids, template, *, request_id):
        self.requests.append((text, token_ids))
        try:
            for _ in range(2):
                await asyncio.sleep(self.delay)
                yield np.zeros(1920, dtype=np.float32)
        finally:
            self.closed += 1


def _run(pipeline, req):
    async def collect():
        return [e async for e in pipeline.turn(req)]
    return asyncio.run(collect())


TTS = object()  # the speech stage's request template: opaque to the orchestrator


def test_audio_turn_runs_every_stage_in_order():
    asr, aura, speech = ScriptedAsr(Transcript("English", "hello")), ScriptedAura(["Hi ", "there."]), ScriptedSpeech()
    events = _run(AuraOmniPipeline(asr, aura, speech), TurnRequest("r1", audio=(np.zeros(16000), 16000), tts=TTS))
    assert events[0] == TranscriptReady("hello", "English")
    assert aura.prompts[0].turns[-1] == PromptTurn("user", "hello")  # ASR's text reaches AURA as data
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hi there."
    assert speech.requests == [("Hi there.", None)]
    done = events[-1]
    assert isinstance(done, TurnDone) and not done.silent and done.text == "Hi there."
    assert done.audio_seconds == pytest.approx(2 * 1920 / 24000) and done.completion_tokens == 2


def test_silent_reply_skips_tts_and_hides_marker():
    speech = ScriptedSpeech()
    events = _run(AuraOmniPipeline(None, ScriptedAura(["<|sil", "ent|>"]), speech), TurnRequest("r2", tts=TTS))
    assert speech.requests == []
    assert not [e for e in events if isinstance(e, (TextDelta, AudioChunk))]
    assert events[-1].silent and events[-1].text == "" and events[-1].raw_text == "<|silent|>"


def test_text_done_says_the_reply_is_whole_while_its_speech_is_still_to_come():
    """One TextDone, after the last TextDelta and before the speech of the reply's end: AURA has finished, the Talker
    has not (a realtime session starts its next reply from here)."""
    events = _run(AuraOmniPipeline(None, ScriptedAura(["Hi ", "there."]), ScriptedSpeech(delay=0.01)),
                  TurnRequest("t1", tts=TTS))
    kinds = [type(e).__name__ for e in events]
    done = kinds.index("TextDone")
    assert kinds.count("TextDone") == 1 and done > len(kinds) - 1 - kinds[::-1].index("TextDelta")
    assert events[done] == TextDone("Hi there.", silent=False)
    assert kinds[done + 1:] == ["AudioChunk", "AudioChunk", "TurnDone"]


def test_a_silent_reply_is_done_with_no_text():
    events = _run(AuraOmniPipeline(None, ScriptedAura(["<|silent|>"]), ScriptedSpeech()), TurnRequest("t2", tts=TTS))
    assert [e for e in events if isinstance(e, TextDone)] == [TextDone("", silent=True)]


def test_first_sentence_is_spoken_while_aura_still_decodes():
    pieces = ["The first sentence is long enough to speak now. ", "Then ", "more ", "words ", "follow."]
    events = _run(AuraOmniPipeline(None, ScriptedAura(pieces, delay=0.02), ScriptedSpeech()), TurnRequest("r3", tts=TTS))
    kinds = [type(e).__name__ for e in events]
    first_audio = kinds.index("AudioChunk")
    last_text = len(kinds) - 1 - kinds[::-1].index("TextDelta")
    assert first_audio < last_text


def test_without_async_chunk_the_talker_speaks_the_whole_reply_after_aura():
    pieces = ["The first sentence is long enough to speak now. ", "Then ", "more ", "words ", "follow."]
    speech = ScriptedSpeech()
    events = _run(AuraOmniPipeline(None, ScriptedAura(pieces, delay=0.01), speech, stream_text_to_talker=False),
                  TurnRequest("r3b", tts=TTS))
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("AudioChunk") > len(kinds) - 1 - kinds[::-1].index("TextDelta")
    assert speech.requests == [("".join(pieces).strip(), None)]


def test_token_passthrough_speaks_wrapped_ids_once():
    speech = ScriptedSpeech()
    _run(AuraOmniPipeline(None, ScriptedAura(["Hello. ", "World."]), speech),
         TurnRequest("r4", tts=TTS, tts_pass_token_ids=True))
    assert speech.requests == [("Hello. World.", [151644, 77091, 198, 1000, 1001, 151645, 198, 151644, 77091, 198])]


def test_text_only_turn_needs_no_tts_stage():
    events = _run(AuraOmniPipeline(None, ScriptedAura(["ok"]), None), TurnRequest("r5", speak=False))
    assert events[-1].text == "ok"


def test_missing_stages_are_refused_before_running():
    aura = ScriptedAura(["x"])
    with pytest.raises(PipelineRequestError, match="no ASR stage"):
        _run(AuraOmniPipeline(None, aura, None), TurnRequest("r6", audio=(np.zeros(10), 16000), speak=False))
    with pytest.raises(PipelineRequestError, match="no TTS stages"):
        _run(AuraOmniPipeline(None, aura, None), TurnRequest("r7", tts=TTS))
    assert aura.prompts == []


def leave_after_first_audio(aura, speech, request_id: str) -> None:
    """A consumer that closes the turn's event stream at its first audio chunk (the client left)."""
    async def main():
        agen = AuraOmniPipeline(None, aura, speech).turn(TurnRequest(request_id, tts=TTS))
        async for event in agen:
            if isinstance(event, AudioChunk):
                break
        await agen.aclose()
        await asyncio.sleep(0.05)

    asyncio.run(main())


def test_consumer_leaving_cancels_every_stage():
    aura = ScriptedAura(["A long first sentence that is spoken right away. "] + ["more "] * 50, delay=0.01)
    speech = ScriptedSpeech(delay=0.01)
    leave_after_first_audio(aura, speech, "r8")
    assert aura.closed and speech.closed == 1


def test_timeout_cancels_the_turn():
    aura = ScriptedAura(["slow "] * 100, delay=0.05)
    with pytest.raises(TurnTimeout):
        _run(AuraOmniPipeline(None, aura, None), TurnRequest("r9", speak=False, timeout_s=0.2))
    assert aura.closed


# ---------------------------------------------------------------------------------------------- streamed Talker text

class StreamingSpeech(ScriptedSpeech):
    """A speech stage that takes AURA's text as it comes (`speak_stream`): records each utterance's pieces and when
    its Talker request started, and speaks one chunk per piece."""

    def __init__(self, streams=True):
        super().__init__()
        self.streams, self.utterances, self.log = streams, [], []

    def streams_text(self, template):
        return self.streams

    async def speak_stream(self, pieces, template, *, request_id):
        got = []
        self.utterances.append(got)
        self.log.append(("start", request_id))
        try:
            async for piece in pieces:
                got.append(piece)
                yield np.zeros(1920, dtype=np.float32)
        finally:
            self.closed += 1


class LoggingAura(ScriptedAura):
    def __init__(self, pieces, log, delay=0.01):
        super().__init__(pieces, delay)
        self.log = log

    async def generate(self, prompt, vision, *, request_id, sampling=None):
        async for delta in super().generate(prompt, vision, request_id=request_id, sampling=sampling):
            self.log.append(("aura", delta.text))
            yield delta


def test_streamed_text_starts_the_talker_after_the_first_word_and_feeds_the_rest():
    speech = StreamingSpeech()
    pieces = ["Hel", "lo", " there", ", how", " are", " you", " today?"]
    aura = LoggingAura(pieces, speech.log)
    events = _run(AuraOmniPipeline(None, aura, speech), TurnRequest("s1", tts=TTS))
    assert ["".join(u) for u in speech.utterances] == ["Hello there, how are you today?"]  # one Talker request
    assert speech.requests == []  # no sentence requests
    assert speech.log.index(("start", "s1-tts0")) == speech.log.index(("aura", " there")) + 1  # first word whole
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("AudioChunk") < len(kinds) - 1 - kinds[::-1].index("TextDelta")  # audio before AURA ends
    assert events[-1].audio_seconds > 0 and events[-1].text == "Hello there, how are you today?"


@pytest.mark.parametrize("pieces", [["<|sil", "ent|>"], ["<|silent|>"], [" <|", "silent", "|>"]])
def test_streamed_silent_reply_never_starts_the_talker(pieces):
    speech = StreamingSpeech()
    events = _run(AuraOmniPipeline(None, ScriptedAura(pieces), speech), TurnRequest("s2", tts=TTS))
    assert speech.utterances == [] and speech.requests == []
    assert events[-1].silent and not [e for e in events if isinstance(e, AudioChunk)]


def test_long_streamed_reply_is_cut_at_sentence_ends_into_bounded_utterances():
    speech = StreamingSpeech()
    pieces = ["One two three four five. ", "Six seven eight. ", "Nine ten eleven twelve. ", "End"]
    _run(AuraOmniPipeline(None, ScriptedAura(pieces), speech, max_utterance_chars=20), TurnRequest("s3", tts=TTS))
    # an utterance ends at the first sentence end from 20 content characters on (19 after "five.")
    assert ["".join(u) for u in speech.utterances] == ["One two three four five. Six seven eight.",
                                                       "Nine ten eleven twelve. End"]


def test_a_template_that_cannot_stream_text_keeps_sentences():
    speech = StreamingSpeech(streams=False)  # e.g. the request asked for non_streaming_mode
    pieces = ["The first sentence is long enough to speak now. ", "Then more."]
    _run(AuraOmniPipeline(None, ScriptedAura(pieces), speech), TurnRequest("s4", tts=TTS))
    assert speech.utterances == [] and [t for t, _ in speech.requests] == [pieces[0].strip(), "Then more."]


def test_token_passthrough_keeps_its_path_with_a_streaming_speech_stage():
    speech = StreamingSpeech()
    _run(AuraOmniPipeline(None, ScriptedAura(["Hello. ", "World."]), speech),
         TurnRequest("s5", tts=TTS, tts_pass_token_ids=True))
    assert speech.utterances == [] and len(speech.requests) == 1


def test_leaving_mid_utterance_cancels_the_streamed_talker_request():
    aura = ScriptedAura(["Hello there "] + ["more "] * 50, delay=0.01)
    speech = StreamingSpeech()
    leave_after_first_audio(aura, speech, "s6")
    assert aura.closed and speech.closed == 1


def test_a_turns_frames_are_encoded_while_asr_transcribes():
    """AURA is asked to encode the turn's vision as the turn starts, not after the transcript."""
    timeline = []

    class SlowAsr(ScriptedAsr):
        async def transcribe(self, samples, sample_rate, **kw):
            timeline.append("asr start")
            await asyncio.sleep(0.05)
            timeline.append("asr end")
            return self.text

    class PrefetchingAura(ScriptedAura):
        async def prefetch_vision(self, vision):
            timeline.append(("prefetch", tuple(vision)))

        async def generate(self, prompt, vision, *, request_id, sampling=None):
            timeline.append(("generate", tuple(vision)))
            async for d in super().generate(prompt, vision, request_id=request_id, sampling=sampling):
                yield d

    from types import SimpleNamespace

    frames = [SimpleNamespace(kind="image"), SimpleNamespace(kind="image")]  # only their kind reaches the prompt
    pipeline = AuraOmniPipeline(SlowAsr(Transcript("English", "look")), PrefetchingAura(["Ok."]), None)
    _run(pipeline, TurnRequest("r-v", audio=(np.zeros(16000), 16000), vision=frames, speak=False))
    assert timeline.index(("prefetch", tuple(frames))) < timeline.index("asr end")
    assert timeline[-1] == ("generate", tuple(frames))


class PrefillingAura(ScriptedAura):
    """Records prefetches and prefix prefills; a prefill can be held open to see it cancelled."""

    def __init__(self, pieces, timeline, hold=False):
        super().__init__(pieces)
        self.timeline, self.hold, self.prefill_closed = timeline, hold, False

    async def prefetch_vision(self, vision):
        self.timeline.append("prefetch")

    async def prefill_prefix(self, prompt, vision, *, request_id):
        self.timeline.append(("prefill", prompt.turns[-1], len(vision), request_id))
        try:
            if self.hold:
                await asyncio.Event().wait()
        finally:
            self.prefill_closed = True
        return 1

    async def generate(self, prompt, vision, *, request_id, sampling=None):
        self.timeline.append("generate")
        async for d in super().generate(prompt, vision, request_id=request_id, sampling=sampling):
            yield d


def test_the_prompt_through_the_turns_vision_is_prefilled_while_asr_transcribes():
    """AURA prefills the prompt as known before the transcript (the user turn's vision, no words yet) after encoding
    the vision and before the turn's own request; not for a turn whose vision is all in its history, nor when
    switched off for A/B runs."""
    from types import SimpleNamespace

    timeline = []

    class SlowAsr(ScriptedAsr):
        async def transcribe(self, samples, sample_rate, **kw):
            await asyncio.sleep(0.05)
            timeline.append("asr end")
            return self.text

    image = SimpleNamespace(kind="image")
    aura = PrefillingAura(["Ok."], timeline)
    pipeline = AuraOmniPipeline(SlowAsr(Transcript("English", "look")), aura, None)
    _run(pipeline, TurnRequest("r-p", audio=(np.zeros(16000), 16000), vision=[image, image], speak=False))
    assert timeline == ["prefetch", ("prefill", PromptTurn("user", "", ("image", "image")), 2, "r-p-aura-prefix"),
                        "asr end", "generate"]
    assert aura.prompts[0].turns[-1] == PromptTurn("user", "look", ("image", "image"))

    timeline.clear()  # the only image is the history's: nothing new to prefill
    _run(pipeline, TurnRequest("r-h", audio=(np.zeros(16000), 16000), vision=[image], speak=False,
                               history=[("user", "before", ["image"]), ("assistant", "ok")]))
    assert timeline == ["prefetch", "asr end", "generate"]

    timeline.clear()
    pipeline.turn_settings = TurnSettings(prefix_prefill=False)
    _run(pipeline, TurnRequest("r-off", audio=(np.zeros(16000), 16000), vision=[image], speak=False))
    assert timeline == ["prefetch", "asr end", "generate"]


def test_a_failed_transcript_cancels_the_prefix_prefill():
    from types import SimpleNamespace

    class FailingAsr(ScriptedAsr):
        async def transcribe(self, samples, sample_rate, **kw):
            await asyncio.sleep(0.02)
            raise PipelineRequestError("audio is silent")

    aura = PrefillingAura(["Ok."], [], hold=True)
    with pytest.raises(PipelineRequestError):
        _run(AuraOmniPipeline(FailingAsr(None), aura, None),
             TurnRequest("r-f", audio=(np.zeros(16000), 16000), vision=[SimpleNamespace(kind="image")], speak=False))
    assert aura.prefill_closed and "generate" not in aura.timeline
