"""Code2Wav on the tiny codec: stateful streaming equals the full decode, windowing, -1 batch padding, input errors."""

import pytest
import torch

from aura_omni.models.qwen3_tts.code2wav import Code2Wav, CodecInputError
from aura_omni.testing.tiny_codec import write_tiny_codec

SPF = 1920  # samples per frame


@pytest.fixture(scope="module")
def code2wav(tmp_path_factory) -> Code2Wav:
    return Code2Wav.from_codec_dir(write_tiny_codec(tmp_path_factory.mktemp("codec")))


def _codes(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (n, 16), generator=torch.Generator().manual_seed(seed))


def _stream(code2wav, codes, splits, state=None):
    state = state or code2wav.new_stream()
    parts, start = [], 0
    for n in splits:
        parts.append(code2wav.decode_stream(state, codes[start:start + n]))
        start += n
    assert start == codes.shape[0]
    return torch.cat(parts)


def test_random_chunk_splits_equal_full_decode_past_the_attention_window(code2wav):
    codes = _codes(100, 0)  # > sliding window 72: the per-layer KV ring wraps
    full = code2wav.decode(codes)
    assert full.shape == (100 * SPF,)
    rng = torch.Generator().manual_seed(1)
    for _ in range(3):
        splits, left = [], 100
        while left:
            n = min(left, int(torch.randint(1, 30, (1,), generator=rng)))
            splits.append(n)
            left -= n
        assert torch.allclose(_stream(code2wav, codes, splits), full, atol=1e-5, rtol=0), splits


def test_reference_prefix_decoded_for_context_then_dropped(code2wav):
    """ICL: the reference codes prime the decoder; only the new frames' samples are emitted."""
    ref, new = _codes(19, 2), _codes(40, 3)
    full = code2wav.decode(torch.cat([ref, new]))[19 * SPF:]
    state = code2wav.new_stream()
    code2wav.decode_stream(state, ref)  # context only
    assert torch.allclose(_stream(code2wav, new, [1, 24, 15], state), full, atol=1e-5, rtol=0)


def test_long_decode_uses_windows_with_left_context(code2wav):
    """qwen-tts chunked_decode rule: windows of `chunk` new frames, `left` re-decoded frames dropped."""
    codes = _codes(50, 6)
    got = code2wav.decode(codes, chunk_frames=20, left_context_frames=5)
    windows = [(0, 0, 20), (5, 20, 40), (5, 40, 50)]  # (context, start, end)
    expect = torch.cat([code2wav.decode(codes[s - c:e], chunk_frames=10**6)[c * SPF:] for c, s, e in windows])
    assert torch.equal(got, expect)
    assert not torch.allclose(got, code2wav.decode(codes, chunk_frames=10**6), atol=1e-6)


def test_empty_chunk_yields_no_samples_and_keeps_state(code2wav):
    codes = _codes(6, 9)
    state = code2wav.new_stream()
    first = code2wav.decode_stream(state, codes[:3])
    assert code2wav.decode_stream(state, codes[:0]).shape == (0,)
    rest = code2wav.decode_stream(state, codes[3:])
    assert torch.allclose(torch.cat([first, rest]), code2wav.decode(codes), atol=1e-5, rtol=0)


@pytest.mark.parametrize("bad", [
    torch.zeros(5, 15, dtype=torch.long),  # 15 codebooks
    torch.zeros(5, dtype=torch.long),  # no codebook axis
    torch.full((5, 16), 2048),  # out of the 2048-entry codebooks
    torch.full((5, 16), -1),  # no padding: a stream's codes are its frames
    torch.zeros(5, 16),  # float
])
def test_bad_codes_raise_codec_input_error(code2wav, bad):
    with pytest.raises(CodecInputError):
        code2wav.decode(bad)
    with pytest.raises(CodecInputError):
        code2wav.decode_stream(code2wav.new_stream(), bad)


def test_dummy_init_stays_finite(tmp_path):
    from aura_omni.testing.tiny_codec import tiny_codec_config

    model = Code2Wav(tiny_codec_config().decoder).init_dummy(seed=0).eval()
    wav = model.decode(_codes(3, 0))
    assert torch.isfinite(wav).all() and wav.shape == (3 * SPF,)


def test_the_stage_decodes_concurrent_streams_together_like_each_alone(code2wav):
    """Streams at different positions send chunks of 1 and 5 frames; a step's forward carries every stream whose
    chunk has the shortest length, and every stream's audio equals decoding it alone."""
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine

    streams = [_codes(4 + 3 * i, 10 + i) for i in range(6)]
    splits = [[1] + [5] * ((c.shape[0] - 1) // 5) + ([(c.shape[0] - 1) % 5] if (c.shape[0] - 1) % 5 else [])
              for c in streams]
    alone = [_stream(code2wav, c, s) for c, s in zip(streams, splits)]
    from aura_omni.models.qwen3_tts.code2wav_stream import Code2WavSlots

    stage, rows = Code2WavStageEngine(code2wav, max_batch=8), []
    stage.slots = Code2WavSlots(code2wav, 4)  # rows for 4 streams: they must grow to 6
    decode = stage.slots.decode
    stage.slots.decode = lambda slots, codes: rows.append(len(slots)) or decode(slots, codes)
    sessions = [Code2WavSession() for _ in streams]
    at, parts = [0] * len(streams), [[] for _ in streams]
    for k in range(max(len(s) for s in splits)):  # every stream's k-th chunk is queued, then stepped through
        for i, split in enumerate(splits):
            if k < len(split):
                stage.add(f"{i}", Code2WavChunk(sessions[i], streams[i][at[i]:at[i] + split[k]]))
                at[i] += split[k]
        while stage.has_work():
            for out in stage.step():
                parts[int(out.request_id)].append(torch.from_numpy(out.item))
    for i in range(len(streams)):
        assert torch.allclose(torch.cat(parts[i]), alone[i].float(), atol=1e-5, rtol=0)
    assert rows and rows[0] == len(streams)  # the first chunks went in one forward
    assert stage.latency["first_window"].snapshot().count == len(streams)  # a stream's first window only
    assert stage.slots.capacity == 8 and stage.stats()["streams"] == 6
    sessions[0].close()
    assert stage.stats()["streams"] == 5  # a closed stream gives its row back at once
    del sessions, parts, out
    import gc

    gc.collect()
    assert stage.stats()["streams"] == 0  # a collected session gives its row back


def test_a_burst_of_first_windows_goes_in_one_step_while_steady_windows_share_a_frame_budget(code2wav):
    """Ten frames a step: six new streams' 1-frame first windows decode in one forward, their 5-frame windows two at
    a time (a budget of frames, not a count of steady windows), and every stream's audio equals decoding it alone."""
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine

    streams = [_codes(6, 50 + i) for i in range(6)]
    alone = [_stream(code2wav, c, [1, 5]) for c in streams]
    stage, rows = Code2WavStageEngine(code2wav, max_batch=16, max_frames=10), []
    decode = stage.slots.decode
    stage.slots.decode = lambda slots, codes: rows.append(tuple(codes.shape[:2])) or decode(slots, codes)
    sessions, parts = [Code2WavSession() for _ in streams], [[] for _ in streams]
    for start, end in ((0, 1), (1, 6)):
        for i, codes in enumerate(streams):
            stage.add(f"{i}", Code2WavChunk(sessions[i], codes[start:end]))
        while stage.has_work():
            for out in stage.step():
                parts[int(out.request_id)].append(torch.from_numpy(out.item))
    assert rows == [(6, 1), (2, 5), (2, 5), (2, 5)]
    for got, expect in zip(parts, alone):
        assert torch.allclose(torch.cat(got), expect.float(), atol=1e-5, rtol=0)


def test_a_streams_queued_chunks_decode_in_order_one_per_step(code2wav):
    """A stream queues its next windows while one is pending (astream sends each as soon as its frames exist): each
    step takes only its first, here beside another stream's chunk of that length, and its audio equals the stream
    decoded alone."""
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine

    a, b = _codes(5, 30), _codes(1, 31)
    stage, sa, sb = Code2WavStageEngine(code2wav, max_batch=8), Code2WavSession(), Code2WavSession()
    for rid, (start, end) in zip(("a1", "a2", "a3"), ((0, 1), (1, 3), (3, 5))):  # a2 and a3: one length
        stage.add(rid, Code2WavChunk(sa, a[start:end]))
    stage.add("b1", Code2WavChunk(sb, b))
    steps = []
    while stage.has_work():
        steps.append({out.request_id: torch.from_numpy(out.item) for out in stage.step()})
    assert [sorted(step) for step in steps] == [["a1", "b1"], ["a2"], ["a3"]]
    got = torch.cat([steps[0]["a1"], steps[1]["a2"], steps[2]["a3"]])
    assert torch.allclose(got, _stream(code2wav, a, [1, 2, 2]).float(), atol=1e-5, rtol=0)


def test_a_streams_last_chunk_is_padded_into_another_streams_window_and_trimmed(code2wav):
    """A last chunk of 3 frames goes in one forward with another stream's 4-frame window (the schedule's next length),
    and both equal their streams decoded alone: the decoder is causal, so the padding changes none of its samples.
    A chunk not marked last keeps its own length."""
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine

    a, b = _codes(5, 40), _codes(4, 41)
    stage, rows = Code2WavStageEngine(code2wav, max_batch=8), []
    stage.configure(8, [2, 4], cuda_graphs=False)
    decode = stage.slots.decode
    stage.slots.decode = lambda slots, codes: rows.append(tuple(codes.shape[:2])) or decode(slots, codes)
    sa, sb, sc = Code2WavSession(), Code2WavSession(), Code2WavSession()
    stage.add("a1", Code2WavChunk(sa, a[:2]))
    stage.step()
    stage.add("a2", Code2WavChunk(sa, a[2:], last=True))
    stage.add("b1", Code2WavChunk(sb, b))
    stage.add("c1", Code2WavChunk(sc, a[2:]))  # 3 frames, not last: a step of its own
    got = {}
    while stage.has_work():
        got.update({out.request_id: torch.from_numpy(out.item) for out in stage.step()})
    assert rows == [(1, 2), (1, 3), (2, 4)]
    assert got["a2"].shape[0] == 3 * SPF
    assert torch.allclose(got["a2"], _stream(code2wav, a, [2, 3])[2 * SPF:].float(), atol=1e-5, rtol=0)
    assert torch.allclose(got["b1"], code2wav.decode(b).float(), atol=1e-5, rtol=0)
    assert stage.decoded_frames == 2 + 3 + 4 + 3  # frames of audio, not of padding


def test_a_reused_slot_starts_fresh(code2wav):
    """A row handed to a new stream decodes like a new stream, not like the continuation of the last one."""
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine

    stage = Code2WavStageEngine(code2wav, max_batch=1)
    first = Code2WavSession()
    stage.add("a", Code2WavChunk(first, _codes(9, 20)))
    stage.step()
    slot = first.slot
    del first
    second = Code2WavSession()
    stage.add("b", Code2WavChunk(second, _codes(4, 21)))
    assert second.slot == slot
    (out,) = stage.step()
    assert torch.allclose(torch.from_numpy(out.item), code2wav.decode(_codes(4, 21)).float(), atol=1e-5, rtol=0)


def test_a_failed_chunk_fails_its_stream_and_the_stage_keeps_serving(code2wav):
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine
    from aura_omni.stages.loop import StageLoop

    loop = StageLoop(Code2WavStageEngine(code2wav), name="code2wav")
    try:
        with pytest.raises(CodecInputError):
            list(loop.run("bad", Code2WavChunk(Code2WavSession(), torch.full((2, 16), 5000))))  # out-of-range codes
        wav = next(loop.run("good", Code2WavChunk(Code2WavSession(), _codes(3, 1))))
    finally:
        loop.close()
    assert torch.allclose(torch.from_numpy(wav), code2wav.decode_stream(code2wav.new_stream(), _codes(3, 1)).float())


def test_stream_windows_double_from_the_first_to_the_steady_length():
    from aura_omni.stages.code2wav import FrameChunks, window_schedule

    assert window_schedule(1, 25) == [1, 2, 4, 8, 16, 25]
    assert window_schedule(8, 25) == [8, 16, 25] and window_schedule(25, 25) == [25]
    chunks, sizes = FrameChunks(1, 25), []
    for _ in range(100):
        if (c := chunks.add(torch.zeros(16, dtype=torch.long))) is not None:
            sizes.append(c.shape[0])
    sizes.append(chunks.rest().shape[0])
    assert sizes == [1, 2, 4, 8, 16, 25, 25, 19]


def test_with_a_batch_wait_later_chunks_wait_for_other_streams_but_not_past_their_playback(code2wav):
    """Three open streams: their first chunks step at once. A later chunk waits while another stream may still send
    one, at most until shortly before its stream's audio (2 s of it, played from the first chunk) runs out, and steps
    at once when every open stream has a chunk waiting. The chunks that waited go in one forward, and the audio
    equals each stream decoded alone."""
    import time

    from aura_omni.stages.code2wav import PLAYBACK_MARGIN_S, Code2WavChunk, Code2WavSession, Code2WavStageEngine

    stage, rows = Code2WavStageEngine(code2wav, max_batch=8), []
    stage.configure(8, [2, 25], cuda_graphs=False, batch_wait_s=10.0)
    decode = stage.slots.decode
    stage.slots.decode = lambda slots, codes: rows.append(len(slots)) or decode(slots, codes)
    codes = [_codes(27, 50 + i) for i in range(3)]
    sessions = [Code2WavSession() for _ in codes]
    got = {}

    def run_steps():
        while stage.has_work() and stage.ready_in() == 0:
            got.update({out.request_id: torch.from_numpy(out.item) for out in stage.step()})

    for i in range(3):  # first chunks, 25 frames = 2 s of audio: no wait, one forward
        stage.add(f"{i}.0", Code2WavChunk(sessions[i], codes[i][:25]))
    assert stage.ready_in() == 0
    run_steps()
    stage.add("0.1", Code2WavChunk(sessions[0], codes[0][25:]))
    assert 1.5 < stage.ready_in() <= 2.0 - PLAYBACK_MARGIN_S  # until shortly before its 2 s have played
    stage.add("1.1", Code2WavChunk(sessions[1], codes[1][25:]))
    assert stage.ready_in() > 0
    stage.add("2.1", Code2WavChunk(sessions[2], codes[2][25:], last=True))
    assert stage.ready_in() == 0  # every open stream has one waiting
    run_steps()
    assert rows == [3, 3] and not stage.has_work()
    for i in range(3):
        assert torch.allclose(torch.cat([got[f"{i}.0"], got[f"{i}.1"]]), code2wav.decode(codes[i]).float(),
                              atol=1e-5, rtol=0)
    sessions[2].close()
    stage.add("0.2", Code2WavChunk(sessions[0], codes[0][:2]))
    assert stage.ready_in() > 0  # stream 1 is still open
    sessions[0].audio_end = time.perf_counter() + PLAYBACK_MARGIN_S / 2
    assert stage.ready_in() == 0  # its audio is about to run out
    sessions[0].audio_end += 10
    stage.batch_wait_s = 0.0
    assert stage.ready_in() == 0  # off: step whenever a chunk waits


def test_with_a_batch_wait_a_step_takes_first_audio_then_the_chunk_due_first_with_its_length(code2wav):
    import time

    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine

    stage = Code2WavStageEngine(code2wav, max_batch=8)
    stage.configure(8, [1, 2, 4, 25], cuda_graphs=False, batch_wait_s=10.0)
    old = [Code2WavSession() for _ in range(4)]
    for i, s in enumerate(old):
        stage.add(f"o{i}", Code2WavChunk(s, _codes(25, 60 + i)))
    stage.step()  # their first audio: 2 s each
    stage.add("a", Code2WavChunk(old[0], _codes(4, 70)))  # one 4-frame window
    stage.add("b", Code2WavChunk(old[1], _codes(2, 71)))  # two 2-frame windows
    stage.add("c", Code2WavChunk(old[2], _codes(2, 72)))
    stage.add("new", Code2WavChunk(Code2WavSession(), _codes(1, 73)))  # a new stream's first audio
    assert [o.request_id for o in stage.step()] == ["new"]
    old[0].audio_end = time.perf_counter() + 0.2  # "a"'s stream is about to run out
    assert [o.request_id for o in stage.step()] == ["a"]
    assert [o.request_id for o in stage.step()] == ["b", "c"]


def test_with_a_batch_wait_a_second_window_about_to_run_out_goes_before_first_windows_that_came_after(code2wav):
    """Earliest deadline first: a burst of new streams arriving over a few Talker steps does not starve an earlier
    stream whose first window has nearly played; new streams that arrived before that second window became pressing
    still go first."""
    import time

    from aura_omni.stages.code2wav import URGENT_S, Code2WavChunk, Code2WavSession, Code2WavStageEngine

    stage = Code2WavStageEngine(code2wav, max_batch=8)
    stage.configure(8, [2, 4, 25], cuda_graphs=False, batch_wait_s=10.0)
    early, other = Code2WavSession(), Code2WavSession()
    stage.add("early.0", Code2WavChunk(early, _codes(2, 100)))
    stage.add("other.0", Code2WavChunk(other, _codes(2, 101)))
    stage.step()  # 160 ms of audio each
    stage.add("first.0", Code2WavChunk(Code2WavSession(), _codes(2, 102)))  # came while early's audio lasts
    stage.add("early.1", Code2WavChunk(early, _codes(4, 103)))
    early.audio_end = time.perf_counter() + URGENT_S + 0.05  # pressing in 50 ms: after "first" came
    assert [o.request_id for o in stage.step()] == ["first.0"]
    stage.add("late.0", Code2WavChunk(Code2WavSession(), _codes(2, 104)))
    early.audio_end = time.perf_counter() + URGENT_S - 0.05  # pressing 50 ms ago: before "late" came
    assert [o.request_id for o in stage.step()] == ["early.1"]
    assert [o.request_id for o in stage.step()] == ["late.0"]


def test_with_a_batch_wait_a_whole_files_windows_never_wait(code2wav):
    """A stream not played as it comes (a whole file: TTSRequest.played is False) would only make its client wait:
    its later chunk steps at once while another stream is open, where a played stream's waits."""
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine

    stage = Code2WavStageEngine(code2wav, max_batch=8)
    stage.configure(8, [2, 25], cuda_graphs=False, batch_wait_s=10.0)
    played, other, whole = Code2WavSession(), Code2WavSession(), Code2WavSession(may_wait=False)
    for i, s in enumerate((played, other, whole)):
        stage.add(f"{i}.0", Code2WavChunk(s, _codes(25, 80 + i)))
    stage.step()
    stage.add("played.1", Code2WavChunk(played, _codes(25, 90)))
    assert stage.ready_in() > 0  # waits for the other streams' windows
    stage.add("whole.1", Code2WavChunk(whole, _codes(25, 91)))
    assert stage.ready_in() == 0
    assert [o.request_id for o in stage.step()] == ["played.1", "whole.1"]  # and takes the waiting one along


def test_code2wav_has_a_stream_row_for_every_talker_seat_however_small_its_batch(tiny_tts):
    """A stream is open from its first window to its last, one per Talker seat: rows for fewer would have to grow under
    load, which drops every captured graph (64 Talker seats beside a Code2Wav batch of 32 in aura_omni_duplex_32)."""
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.stages.tts import Qwen3TTS

    tts = Qwen3TTS.load(tiny_tts("custom_voice"), engine_config=EngineConfig(max_num_seqs=48))
    tts.configure_code2wav(max_batch=4, windows=[1, 2, 4], cuda_graphs=False)
    assert tts.code2wav_loop.engine.slots.capacity == 2 * 48  # the seats' rows and as many just ended
    tts.close()
