"""Talker generation behaviour on a tiny CustomVoice checkpoint (codes only): seeds, batching, stopping,
preemption under a tiny KV budget, cancellation, request validation; and on a tiny Base checkpoint with its
codec, streamed audio joining into the whole utterance."""

import time

import pytest
import torch

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.models.qwen3_tts.prompt import target_template
from aura_omni.models.qwen3_tts.sampling import CODEC_EOS
from aura_omni.stages.tts import Qwen3TTS, TTSRequest, TTSRequestError


@pytest.fixture(scope="module")
def checkpoint(tiny_tts):
    return tiny_tts("custom_voice", with_codec=False)


@pytest.fixture(scope="module")
def tts(checkpoint):
    return Qwen3TTS.load(checkpoint)


def req(**kw):
    base = dict(text="Hello there.", task_type="CustomVoice", speaker="Vivian", language="English", max_new_tokens=6)
    return TTSRequest(**(base | kw))


def test_greedy_is_deterministic_and_gives_max_new_tokens_minus_one_frames(tts):
    a = tts.generate_codes([req(do_sample=False, subtalker_dosample=False)])[0]
    b = tts.generate_codes([req(do_sample=False, subtalker_dosample=False)])[0]
    assert a.shape == (5, 16) and torch.equal(a, b)
    assert int(a[:, 0].max()) < 2048 and int(a[:, 1:].max()) < 2048


def test_seeded_sampling_does_not_depend_on_the_batch(tts):
    alone = tts.generate_codes([req(seed=7)])[0]
    batched = tts.generate_codes([req(text="Another, longer sentence to batch with.", speaker="Ryan", seed=1),
                                  req(seed=7)])[1]
    assert torch.equal(alone, batched)
    assert not torch.equal(alone, tts.generate_codes([req(seed=8)])[0])


def test_text_ids_passthrough_equals_text(tts):
    ids = tts._ids(target_template("Hello there."))
    greedy = dict(do_sample=False, subtalker_dosample=False)
    assert torch.equal(tts.generate_codes([req(**greedy)])[0],
                       tts.generate_codes([req(text=None, text_ids=ids, **greedy)])[0])


def test_eos_is_banned_for_two_steps_then_stops(tts):
    head = tts.talker.codec_head.weight
    saved = head.data.clone()
    try:
        head.data[CODEC_EOS] = 50 * head.data[0].sign()  # EOS dominates every step
        codes = tts.generate_codes([req(do_sample=False, subtalker_dosample=False, max_new_tokens=20)])[0]
    finally:
        head.data.copy_(saved)
    assert codes.shape[0] == 2  # steps 0 and 1 cannot stop (min_new_tokens=2), step 2 samples EOS


def test_one_token_budget_gives_no_frame(tts):
    assert tts.generate_codes([req(max_new_tokens=1)])[0].shape == (0, 16)


def test_tiny_kv_budget_preempts_without_changing_results(tts, checkpoint):
    greedy = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=8)
    reqs = [req(**greedy), req(speaker="Ryan", **greedy), req(text="A third one.", **greedy)]
    want = tts.generate_codes(reqs)
    small = Qwen3TTS.load(checkpoint, engine_config=EngineConfig(max_model_len=40, block_size=4, num_kv_blocks=12,
                                                                 max_num_seqs=3))  # its own model: KV binds per model
    got = small.generate_codes(reqs)
    stats = small.stats()
    assert stats["preemptions"] > 0 and stats["free_blocks"] == stats["total_blocks"]  # recomputed, all given back
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_chunks_double_from_the_first_window_to_the_steady_one(tiny_tts):
    """1 frame is 80 ms of audio; the next chunk must come before it has played, so windows grow 1, 2, 4, ... 8."""
    cv = Qwen3TTS.load(tiny_tts("custom_voice"))
    request = req(max_new_tokens=30, do_sample=False, subtalker_dosample=False)
    frames = len(cv.generate_codes([request])[0])
    sizes = [len(c) // 1920 for c in cv.stream(request, 1, 8)]
    assert sum(sizes) == frames and sizes[:4] == [1, 2, 4, 8] and set(sizes[4:-1]) <= {8}


def test_abandoned_stream_frees_its_cache_blocks(tts):
    frames = tts.iter_frames([req(max_new_tokens=50)])
    next(frames)
    frames.close()  # client went away
    stats = tts.stats()
    assert stats["running"] == stats["waiting"] == 0 and stats["free_blocks"] == stats["total_blocks"]


@pytest.mark.parametrize("bad,message", [
    (dict(text="   "), "empty"),
    (dict(speaker="nobody"), "unknown speaker"),
    (dict(speaker=None), "needs a speaker"),
    (dict(language="klingon"), "unknown language"),
    (dict(task_type="Base"), "needs a Base checkpoint"),
    (dict(task_type="Tts"), "task_type must be"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(text=None, text_ids=[1, 2, 3]), "text_ids"),
])
def test_bad_requests_raise_a_clear_error(tts, bad, message):
    with pytest.raises(TTSRequestError, match=message):
        tts.validate(req(**bad))
    assert issubclass(TTSRequestError, ValueError)


def test_speaker_names_are_case_insensitive(tts):
    tts.validate(req(speaker="UNCLE_FU"))
    assert "vivian" in tts.speakers and "auto" in tts.languages and tts.model_type == "custom_voice"


@pytest.mark.parametrize("icl", [True, False], ids=["icl", "x_vector"])
def test_streamed_chunks_join_into_the_whole_utterance(tiny_tts, icl):
    """/v1/audio/speech without streaming is served from `stream()` (so a client that leaves stops it): its
    joined chunks must be the audio `synthesize()` decodes in one go, for any window sizes."""
    import numpy as np

    base = Qwen3TTS.load(tiny_tts("base"))
    sr = 16000
    ref = (0.3 * np.sin(2 * np.pi * 200 * np.arange(sr) / sr)).astype(np.float32)
    voice = base.create_voice_prompt(ref, sr, "A short reference line." if icl else None, x_vector_only=not icl)
    request = TTSRequest(text="Joined chunks.", task_type="Base", voice=voice, max_new_tokens=9, seed=3)
    whole = base.synthesize(request)
    for first, steady in ((1, 3), (25, 25)):
        joined = np.concatenate(list(base.stream(request, first, steady)))
        assert joined.shape == whole.shape
        np.testing.assert_allclose(joined, whole, atol=1e-5)


def test_astream_sends_each_window_to_code2wav_before_the_caller_takes_the_last(tiny_tts):
    """The next window goes to Code2Wav as soon as its frames exist, from the Talker's thread, while the caller still
    holds the first chunk and its event loop is blocked (the second chunk has only the first's 80 ms to arrive in);
    the chunks join into the whole utterance, and a caller that leaves early leaves nothing behind in either stage."""
    import asyncio
    import time

    import numpy as np

    cv = Qwen3TTS.load(tiny_tts("custom_voice"))
    request = req(max_new_tokens=12, do_sample=False, subtalker_dosample=False)
    whole = cv.synthesize(request)
    engine = cv.code2wav_loop.engine

    async def held_then_read() -> list:
        stream = cv.astream(request, 1, 2)
        chunks = [await anext(stream)]
        decoded, deadline = engine.decoded_frames, time.monotonic() + 10
        while engine.decoded_frames == decoded:  # the caller takes nothing meanwhile, nor lets its event loop run
            assert time.monotonic() < deadline, "no window was decoded while the caller held the first chunk"
            time.sleep(0.01)
        return chunks + [c async for c in stream]

    async def left_early() -> None:
        stream = cv.astream(request, 1, 2)
        await anext(stream)
        await stream.aclose()

    np.testing.assert_allclose(np.concatenate(asyncio.run(held_then_read())), whole, atol=1e-5)
    asyncio.run(left_early())
    talker = cv.stats()
    cv.code2wav_loop.settle()
    assert talker["running"] == talker["waiting"] == 0 and talker["free_blocks"] == talker["total_blocks"]
    assert not engine.has_work() and engine.stats()["streams"] == 0


def test_a_talker_failure_mid_stream_comes_after_the_audio_made_before_it(tiny_tts):
    """The Talker's step fails after the first chunk: the caller gets the chunks already decoded, in order, then the
    stage's error, and neither stage keeps anything of the stream."""
    import asyncio

    from aura_omni.stages.stage_engine import StageError

    cv = Qwen3TTS.load(tiny_tts("custom_voice"))
    request = req(max_new_tokens=40, do_sample=False, subtalker_dosample=False)

    async def read() -> tuple[list, BaseException | None]:
        got = []
        try:
            async for chunk in cv.astream(request, 1, 2):
                got.append(chunk)
                if len(got) == 1:
                    cv.talker_loop.inject_fault("step")
        except StageError as e:
            return got, e
        return got, None

    got, error = asyncio.run(read())
    assert isinstance(error, StageError) and "injected" in str(error.__cause__)
    assert 1 <= len(got) and all(len(c) % 1920 == 0 for c in got)
    talker = cv.stats()
    cv.code2wav_loop.settle()
    assert talker["running"] == 0 and talker["free_blocks"] == talker["total_blocks"]
    assert not cv.code2wav_loop.engine.has_work() and cv.code2wav_loop.engine.stats()["streams"] == 0


@pytest.mark.parametrize("kind", ["custom_voice", "base"])
def test_the_warm_start_burst_runs_max_num_seqs_streams_together(tiny_tts, kind):
    """The warm start ends with a burst of the Talker's max_num_seqs streams (on a GPU by default), half of them
    joining the other half's steps (a Base Talker's with both kinds of cloned voice): they share their steps, each
    gets its audio, and nothing of them stays in either stage."""
    import asyncio

    from aura_omni.pipeline.warmup import warm_up

    tts = Qwen3TTS.load(tiny_tts(kind),
                        engine_config=EngineConfig(max_num_seqs=8, max_model_len=512))
    took = asyncio.run(warm_up(tts=tts, burst=False))
    assert f"tts_burst:{kind}" not in took  # the CPU default is off
    tts.stats()
    single, outputs = tts.talker_loop.counters.steps, tts.talker_loop.latencies()["first_output"].count
    took = asyncio.run(warm_up(tts=tts, burst=True))
    assert took[f"tts_burst:{kind}"] > 0
    talker = tts.stats()
    assert tts.talker_loop.latencies()["first_output"].count - outputs == 1 + 8  # the single request, then the burst
    burst_steps = tts.talker_loop.counters.steps - 2 * single
    assert burst_steps <= 12  # 8 streams of 4 tokens in shared steps (half of them joining later), not 32 steps
    tts.code2wav_loop.settle()
    assert talker["running"] == 0 and talker["free_blocks"] == talker["total_blocks"]
    assert tts.code2wav_loop.engine.stats()["streams"] == 0


def test_prompts_embedded_together_equal_each_embedded_alone(tiny_tts):
    """The Talker's stage embeds every prompt taken between two steps in one pass: ICL and x-vector-only voices, two
    speakers' x-vectors, a streamed text still open, each row where its own embedding put it."""
    import numpy as np

    from aura_omni.models.qwen3_tts.generate import talker_inputs
    from aura_omni.models.qwen3_tts.text_stream import TextFeed

    base = Qwen3TTS.load(tiny_tts("base"))
    sr = 16000
    ref = [(0.3 * np.sin(2 * np.pi * f * np.arange(sr) / sr)).astype(np.float32) for f in (200, 310)]
    icl = base.create_voice_prompt(ref[0], sr, "A short reference line.")
    xv = [base.create_voice_prompt(r, sr, x_vector_only=True) for r in ref]
    feed = TextFeed()
    feed.put(base.text_tokens().feed("Streamed words arrive, and then more of them "), False)
    reqs = [TTSRequest(text="First of the burst.", task_type="Base", voice=icl),
            TTSRequest(text="A second, longer text for the same step.", task_type="Base", voice=xv[0]),
            TTSRequest(text="Third.", task_type="Base", voice=xv[1], language="English"),
            TTSRequest(text="Fourth, with the first voice again.", task_type="Base", voice=xv[0]),
            TTSRequest(text_feed=feed, task_type="Base", voice=xv[1])]
    plans = [base._talker_plan(r) for r in reqs]
    together = talker_inputs(base.talker, plans)
    for plan, got in zip(plans, together):
        alone = talker_inputs(base.talker, [plan])[0]
        hidden = base.config.talker.hidden_size
        assert got.prompt_embeds.shape == alone.prompt_embeds.shape == (len(plan.prompt), hidden)
        torch.testing.assert_close(got.prompt_embeds, alone.prompt_embeds, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(got.trailing_embeds, alone.trailing_embeds, atol=1e-6, rtol=1e-6)
    assert together[4].text is feed and together[0].trailing_embeds.shape[0] == len(plans[0].prompt.trailing_text_ids)


def test_a_burst_of_prompts_is_embedded_in_one_pass_before_its_first_step(tts, monkeypatch):
    """Requests queued while the Talker's loop is busy are planned one by one as it takes them, then embedded
    together at the start of the next step; their codes equal each request's alone."""
    import threading

    from aura_omni.stages import talker as talker_stage

    greedy = dict(do_sample=False, subtalker_dosample=False)
    reqs = [req(text=t, **greedy) for t in ("One.", "A second one here.", "And a third, the longest of them.")]
    alone = [tts.generate_codes([r])[0] for r in reqs]
    passes, embed = [], talker_stage.talker_inputs
    monkeypatch.setattr(talker_stage, "talker_inputs", lambda talker, plans: passes.append(len(plans)) or
                        embed(talker, plans))
    loop, release, got = tts.talker_loop, threading.Event(), {}
    held = loop.call(release.wait)  # the loop's thread is busy while the burst queues

    def run(i):
        got[i] = torch.stack([f for out in loop.run(f"burst-{i}", reqs[i]) for f in talker_stage.frames_of(out)])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    time.sleep(0.2)
    release.set()
    held.result(timeout=10)
    for t in threads:
        t.join(60)
    assert passes == [3]
    for i in range(len(reqs)):
        assert torch.equal(got[i], alone[i])
