"""Text streamed into the Talker while it speaks (models/qwen3_tts/text_stream.py, stages/talker.py): pieces fed
before the start, while the Talker runs and after it caught up give the frames of the whole text in streaming text
mode; a stream waiting for text is not stepped and holds back no other stream; aborting a waiting (or parked)
request frees it; the stable tokens of a text given piece by piece are the whole text's ids."""

import asyncio
import random
import threading
import time

import numpy as np
import pytest
import torch

from aura_omni.models.qwen3_tts.prompt import target_template
from aura_omni.models.qwen3_tts.text_stream import StableTokens, TextFeed
from aura_omni.stages.tts import Qwen3TTS, TTSRequest, TTSRequestError

GREEDY = dict(do_sample=False, subtalker_dosample=False)
TEXT = "Hello there, this is a longer sentence that the Talker speaks while it arrives."


@pytest.fixture(scope="module")
def cv(tiny_tts):
    return Qwen3TTS.load(tiny_tts("custom_voice", with_codec=False))


@pytest.fixture(scope="module")
def base(tiny_tts):
    return Qwen3TTS.load(tiny_tts("base"))


def template(tts: Qwen3TTS, voice: str = "cv", **kw) -> TTSRequest:
    if voice == "cv":
        fields = dict(task_type="CustomVoice", speaker="Ryan", language="English")
    else:
        wav = np.random.default_rng(0).standard_normal(24000).astype(np.float32) * 0.1  # 1 s: 13 reference frames
        prompt = tts.create_voice_prompt(wav, 24000, ref_text="A short reference.", x_vector_only=voice == "xvector")
        fields = dict(task_type="Base", language="Auto", voice=prompt)
    return TTSRequest(**(dict(non_streaming_mode=False, max_new_tokens=40, **GREEDY) | fields | kw))


def body_ids(tts: Qwen3TTS, text: str) -> list[int]:
    return tts._ids(target_template(text))[3:-5]


class Stream:
    """A streamed-text request on the Talker's loop, its frames collected by a thread."""

    def __init__(self, tts: Qwen3TTS, req: TTSRequest, first: list[int] = ()):
        self.tts, self.feed = tts, TextFeed(first)
        self.req = TTSRequest(**{**req.__dict__, "text_feed": self.feed})
        self.rid = tts.talker_loop.new_request_id()
        self.frames: list[torch.Tensor] = []
        self.outputs = tts.talker_loop.run(self.rid, self.req)
        self.thread = threading.Thread(target=self._consume, daemon=True)
        self.thread.start()

    def _consume(self):
        for out in self.outputs:
            self.frames += [] if out.finished else out.new_extras

    def put(self, ids, end=False):
        self.tts.feed_text(self.rid, self.req, ids, end)

    def waiting(self) -> bool:
        """The Talker caught up with the text: its sequence is not ready and the loop is idle (or, too short for a
        prompt yet, the request is parked)."""
        engine = self.tts.engine.engine
        seq = engine.requests.get(self.rid)
        if seq is None:
            return self.rid in self.tts.talker_loop.engine.parked
        return not self.tts.engine.adapter.ready(seq) and engine._in_flight is None

    def wait_until_waiting(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not self.waiting():
            assert time.monotonic() < deadline, "the Talker never caught up with the text"
            time.sleep(0.01)
        self.tts.talker_loop.settle()

    def result(self, timeout=60.0) -> torch.Tensor:
        self.thread.join(timeout)
        assert not self.thread.is_alive()
        return torch.stack(self.frames)


@pytest.mark.parametrize("voice", ["cv", "xvector", "icl"])
def test_text_fed_in_pieces_gives_the_frames_of_the_whole_text(cv, base, voice):
    tts = cv if voice == "cv" else base
    req = template(tts, voice)
    whole = tts.generate_codes([TTSRequest(**{**req.__dict__, "text": TEXT})])[0]
    ids = body_ids(tts, TEXT)
    pieces = [ids[:2], ids[2:5], ids[5:6], ids[6:9], ids[9:]]
    waited = tts.talker_loop.latencies()["input_wait"]
    stream = Stream(tts, req, first=pieces[0])  # known before the request reaches the loop
    stream.wait_until_waiting()
    # ICL's prompt needs the text under its 13 reference frames: parked until then
    assert (stream.rid in tts.talker_loop.engine.parked) == (voice == "icl")
    steps = tts.talker_loop.counters.steps
    time.sleep(0.1)
    assert tts.talker_loop.counters.steps == steps  # a stream waiting for text is not stepped
    stream.put(pieces[1])
    stream.put(pieces[2])  # before the Talker caught up with the previous piece
    stream.wait_until_waiting()
    stream.put(pieces[3])
    stream.wait_until_waiting()  # after it caught up
    stream.put(pieces[4], end=True)
    got = stream.result()
    assert whole.shape[0] == 39 and torch.equal(got, whole)
    now = tts.talker_loop.latencies()["input_wait"]  # how long the request waited for the text its prompt needs
    assert now.count == waited.count + 1
    assert (now.total - waited.total >= 0.1) == (voice == "icl")  # parked through the 0.1 s sleep above


def test_text_given_whole_through_the_feed_equals_the_text(cv):
    req = template(cv)
    whole = cv.generate_codes([TTSRequest(**{**req.__dict__, "text": TEXT})])[0]
    fed = TextFeed(body_ids(cv, TEXT), end=True)
    assert torch.equal(cv.generate_codes([TTSRequest(**{**req.__dict__, "text_feed": fed})])[0], whole)


def test_a_stream_waiting_for_text_does_not_hold_back_others(cv):
    req = template(cv)
    ids = body_ids(cv, TEXT)
    alone = cv.generate_codes([TTSRequest(**{**req.__dict__, "text": "Another voice.", "max_new_tokens": 12})])[0]
    stream = Stream(cv, req, first=ids[:3])
    stream.wait_until_waiting()
    other = cv.generate_codes([TTSRequest(**{**req.__dict__, "text": "Another voice.", "max_new_tokens": 12})])[0]
    assert torch.equal(other, alone) and stream.waiting()  # finished while the stream still waits
    stream.put(ids[3:], end=True)
    assert torch.equal(stream.result(), cv.generate_codes([TTSRequest(**{**req.__dict__, "text": TEXT})])[0])


def test_a_request_waiting_for_a_seat_held_by_a_stream_waiting_for_text_is_not_stepped(tiny_tts):
    """Every seat holds a stream waiting for AURA's next words and a request waits for a seat: nothing can run, so the
    loop sleeps (it spun before, a loop step every 0.3 ms at the 64-session spread) until the text comes."""
    from aura_omni.engine.engine_config import EngineConfig

    tts = Qwen3TTS.load(tiny_tts("custom_voice", with_codec=False), engine_config=EngineConfig(max_num_seqs=1))
    req = template(tts)
    ids = body_ids(tts, TEXT)
    plain = TTSRequest(**{**req.__dict__, "text": "Another voice.", "max_new_tokens": 12})
    alone = tts.generate_codes([plain])[0]
    stream = Stream(tts, req, first=ids[:3])
    stream.wait_until_waiting()
    got = []
    queued = threading.Thread(target=lambda: got.extend(tts.generate_codes([plain])))
    queued.start()
    deadline = time.monotonic() + 20
    while tts.stats()["waiting"] == 0:  # the plain request waits for the seat
        assert time.monotonic() < deadline
        time.sleep(0.01)
    tts.talker_loop.settle()
    steps = tts.talker_loop.counters.steps
    time.sleep(0.1)
    assert tts.talker_loop.counters.steps == steps and not got
    stream.put(ids[3:], end=True)
    assert torch.equal(stream.result(), tts.generate_codes([TTSRequest(**{**req.__dict__, "text": TEXT})])[0])
    queued.join(60)
    assert torch.equal(got[0], alone)
    tts.close()


def test_text_fed_to_many_streams_between_two_steps_is_embedded_in_one_pass(cv):
    """At 32 sessions AURA feeds each stream a token per step: the Talker takes them all at its next step in one
    pass of the text embedding (one call per feed held its loop for 400 ms, docs/benchmarks.md), frames unchanged."""
    req = template(cv)
    ids = body_ids(cv, TEXT)
    whole = cv.generate_codes([TTSRequest(**{**req.__dict__, "text": TEXT})])[0]
    streams = [Stream(cv, req, first=ids[:3]) for _ in range(3)]
    for stream in streams:
        stream.wait_until_waiting()
    model, passes, hold = cv.engine.adapter.model, [], threading.Event()
    embed = model.embed_text
    held = cv.talker_loop.call(hold.wait)  # the loop's thread waits here while every feed is queued
    model.embed_text = lambda x: (passes.append(x.shape[0]), embed(x))[1]
    try:
        for stream in streams:
            stream.put(ids[3:6])
            stream.put(ids[6:], end=True)
        hold.set()
        held.result(timeout=10)
        got = [stream.result() for stream in streams]
    finally:
        del model.embed_text
    assert passes[0] == 3 * (len(ids) - 3 + 1)  # every stream's new ids and its end marker, at once
    assert all(torch.equal(frames, whole) for frames in got)


@pytest.mark.parametrize("state", ["waiting", "parked"])
def test_aborting_a_waiting_request_frees_it(cv, state):
    start = cv.stats()
    feed = TextFeed(body_ids(cv, "Hello there")[:2] if state == "waiting" else [])
    req = TTSRequest(**{**template(cv).__dict__, "text_feed": feed})
    rid = cv.talker_loop.new_request_id()

    async def leave_while_it_waits():
        frames = cv.talker_loop.submit(rid, req)
        pending = asyncio.ensure_future(frames.__anext__())
        deadline = time.monotonic() + 20
        while not (rid in cv.talker_loop.engine.parked or rid in cv.engine.engine.requests
                   and not cv.engine.adapter.ready(cv.engine.engine.requests[rid])):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        cv.talker_loop.settle()
        if state == "waiting":
            assert cv.stats()["free_blocks"] < start["free_blocks"]
        else:  # no text yet: no prompt, so nothing in the engine
            assert rid in cv.talker_loop.engine.parked and cv.stats()["running"] == 0
        pending.cancel()  # the caller left: leaving `submit` aborts the request
        await asyncio.gather(pending, return_exceptions=True)
        await frames.aclose()

    asyncio.run(leave_while_it_waits())
    stats = cv.stats()
    assert stats["free_blocks"] == start["free_blocks"] and stats["running"] == stats["waiting"] == 0
    assert not cv.talker_loop.engine.parked and not cv.engine.engine.requests
    decoder = cv.engine.adapter.decoder
    decoder.release_finished()
    assert not decoder.owners


def test_a_streamed_text_that_ends_empty_is_refused(cv):
    req = TTSRequest(**{**template(cv).__dict__, "text_feed": TextFeed()})
    rid = cv.talker_loop.new_request_id()
    threading.Timer(0.2, lambda: cv.feed_text(rid, req, [], end=True)).start()  # while it is parked
    with pytest.raises(TTSRequestError, match="empty"):
        list(cv.talker_loop.run(rid, req))
    assert not cv.talker_loop.engine.parked


def test_streamed_text_needs_streaming_text_mode(cv):
    with pytest.raises(TTSRequestError, match="non_streaming_mode"):
        cv.validate(TTSRequest(**{**template(cv).__dict__, "text_feed": TextFeed(), "non_streaming_mode": True}))


@pytest.mark.parametrize("text", [TEXT, "Hello world, it's 2026!  Two  spaces\nnew line.", "你好，世界。我们今天去公园吧！",
                                  "Don't stop... OK?! 3.14 is pi; e = 2.718", "Ünïcödé wörds — «quotes» 😀!"])
def test_stable_tokens_of_pieces_join_into_the_whole_texts_ids(cv, text):
    whole = body_ids(cv, text)
    rng = random.Random(0)
    for trial in range(30):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 12))) if trial else list(range(1, len(text)))
        tokens, got = StableTokens(cv.tokenizer), []
        for a, b in zip([0, *cuts], [*cuts, len(text)]):
            got += tokens.feed(text[a:b])
        assert got + tokens.finish() == whole


def test_streams_fed_in_pieces_under_preemption_give_the_whole_texts_frames(tiny_tts):
    """A KV budget so tight that sequences are preempted and recomputed, waiting ones among them."""
    from aura_omni.engine.engine_config import EngineConfig

    ckpt = tiny_tts("custom_voice", with_codec=False)
    tts = Qwen3TTS.load(ckpt, engine_config=EngineConfig(max_model_len=64, block_size=4, num_kv_blocks=20,
                                                         max_num_seqs=4))
    texts = [TEXT, "Short and sweet, then a bit more text to say."]
    reqs = [template(tts), template(tts, speaker="Vivian", max_new_tokens=30)]
    whole = [tts.generate_codes([TTSRequest(**{**r.__dict__, "text": t})])[0] for r, t in zip(reqs, texts)]
    plain = TTSRequest(**{**reqs[1].__dict__, "text": "A plain request.", "max_new_tokens": 25})
    alone = tts.generate_codes([plain])[0]
    ids = [body_ids(tts, t) for t in texts]
    streams = [Stream(tts, r, first=i[:1]) for r, i in zip(reqs, ids)]
    got_plain = []
    plain_thread = threading.Thread(target=lambda: got_plain.extend(tts.generate_codes([plain])))
    plain_thread.start()
    for at in range(1, max(map(len, ids)), 3):
        for stream, i in zip(streams, ids):
            if at < len(i):
                stream.put(i[at:at + 3], end=at + 3 >= len(i))
        time.sleep(0.02)
    plain_thread.join(60)
    assert [torch.equal(s.result(), w) for s, w in zip(streams, whole)] == [True, True]
    assert torch.equal(got_plain[0], alone)
    assert tts.stats()["preemptions"] > 0
    tts.close()


def test_speak_stream_speaks_the_audio_of_the_whole_text(base):
    """The speech stage end to end: text pieces cut anywhere (mid-word too), tokenised as they come, give the
    waveform of the whole text in streaming text mode."""
    from aura_omni.stages.speech_stage import SpeechPipelineStage

    stage = SpeechPipelineStage(base, initial_chunk_frames=1, chunk_frames=5)
    req = template(base, "xvector", max_new_tokens=25)

    async def both():
        async def pieces():
            for i in range(0, len(TEXT), 7):
                await asyncio.sleep(0.01)
                yield TEXT[i:i + 7]
        streamed = [c async for c in stage.speak_stream(pieces(), req, request_id="stream-1")]
        whole = [c async for c in stage.speak(TEXT, None, req, request_id="whole-1")]
        return np.concatenate(streamed), np.concatenate(whole)

    streamed, whole = asyncio.run(both())
    assert whole.size == 24 * 1920 and np.array_equal(streamed, whole)
