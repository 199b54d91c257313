"""The Talker on LLMEngine (engine/talker_adapter.py): concurrent streams share decode steps and give the
same greedy codes as alone; an abandoned stream frees its KV blocks and decoder slot; the batched,
on-device sampling rules equal the per-row reference rules; the KV-cached code predictor equals recomputing
its whole sequence."""

import threading
import time

import pytest
import talker_sampling_reference as ref
import torch

from aura_omni.models.qwen3_tts import sampling as S
from aura_omni.stages.tts import Qwen3TTS, TTSRequest

GREEDY = dict(do_sample=False, subtalker_dosample=False)


@pytest.fixture(scope="module")
def tts(tiny_tts):
    return Qwen3TTS.load(tiny_tts("custom_voice", with_codec=False))


def req(**kw):
    base = dict(text="Hello there.", task_type="CustomVoice", speaker="Vivian", language="English", max_new_tokens=7)
    return TTSRequest(**(base | kw))


def test_concurrent_streams_give_the_same_greedy_codes_as_alone(tts):
    reqs = [req(**GREEDY), req(text="A longer second sentence here.", speaker="Ryan", **GREEDY, max_new_tokens=9),
            req(text="Third.", seed=3)]
    alone = [tts.generate_codes([r])[0] for r in reqs]
    engine, widths = tts.engine.engine, []
    step = engine.step
    deadline = time.monotonic() + 10

    def counting_step():
        if not widths and len(engine.requests) < len(reqs) and time.monotonic() < deadline:
            time.sleep(0.001)  # no step until every stream has joined: under load one could otherwise finish alone
            return []
        widths.append(len(engine.scheduler.running) + len(engine.scheduler.waiting))
        return step()

    engine.step = counting_step
    got: dict[int, torch.Tensor] = {}
    start = threading.Barrier(len(reqs))

    def consume(i):
        start.wait()
        frames = [f for _, f in tts.iter_frames([reqs[i]])]
        got[i] = torch.stack(frames)

    try:
        threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(reqs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        del engine.step
    assert all(torch.equal(alone[i], got[i]) for i in range(len(reqs)))
    assert max(widths) >= 2  # the streams shared steps


def test_abandoned_stream_frees_its_blocks_and_slot(tts):
    start = tts.stats()["free_blocks"]
    keep = tts.iter_frames([req(**GREEDY, max_new_tokens=12)])
    leave = tts.iter_frames([req(text="Going away soon.", max_new_tokens=60)])
    next(keep), next(leave), next(leave)
    assert tts.stats()["free_blocks"] < start
    leave.close()  # the client went away mid-stream
    rest = list(keep)
    assert len(rest) == 10
    stats = tts.stats()
    assert stats["free_blocks"] == start == stats["total_blocks"] and stats["running"] == stats["waiting"] == 0
    decoder = tts.engine.adapter.decoder
    decoder.release_finished()
    assert not decoder.owners and len(decoder.free_slots) == decoder.num_slots


def test_batched_code0_rules_and_greedy_equal_the_row_rules():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3072, generator=gen) * 3
    history = [[1, 5, 5, 2000], [], [7], [3, 3]]
    seen = torch.zeros(4, 3072, dtype=torch.bool)
    for i, h in enumerate(history):
        seen[i, h] = True
    p = S.SamplingParams()
    for step in (0, 1, 2, 5):
        rows = torch.stack([ref.talker_logit_rules(logits[i], history[i], step, p) for i in range(4)])
        batched = S.talker_rules_batched(logits, seen, torch.full((4,), p.repetition_penalty),
                                         torch.full((4,), step < p.min_new_tokens))
        assert torch.equal(rows, batched)
        greedy = S.choose_batched(batched, torch.ones(4, dtype=torch.bool), torch.full((4,), 0.9),
                                  torch.full((4,), 50), torch.ones(4), torch.ones(4, 3072))
        assert torch.equal(greedy, rows.argmax(-1))


def test_batched_top_k_top_p_draws_only_what_the_row_warp_keeps():
    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(1))
    n = logits.shape[0]
    race = S.exponentials(torch.arange(n), torch.zeros(n, dtype=torch.long), 2, 300)[:, 1]
    for k, top_p in ((5, 1.0), (0, 0.3), (20, 0.5)):
        picks = S.choose_batched(logits, torch.zeros(n, dtype=torch.bool), torch.full((n,), 0.7),
                                 torch.full((n,), k), torch.full((n,), top_p), race)
        kept = torch.stack([torch.isfinite(ref.warp(logits[i], 0.7, k, top_p)) for i in range(n)])
        assert kept[torch.arange(n), picks].all()


def test_counter_draws_depend_only_on_key_token_and_group():
    keys, steps = torch.tensor([11, 22, 33]), torch.tensor([0, 4, 9])
    full = S.exponentials(keys, steps, 16, 3072)
    assert torch.equal(full[1:], S.exponentials(keys[1:], steps[1:], 16, 3072))  # batch-independent
    assert torch.equal(full[:, :4, :2048], S.exponentials(keys, steps, 4, 2048))  # any slice = drawn alone
    assert not torch.equal(full[:, 3], full[:, 4])
    assert abs(float(full.mean()) - 1.0) < 0.02 and bool((full > 0).all())
    assert S.seed_key(7) == S.seed_key(7) != S.seed_key(8)


def test_seeded_sampling_is_reproducible_across_concurrent_calls(tts):
    alone = tts.generate_codes([req(seed=5, max_new_tokens=6)])[0]
    both = tts.generate_codes([req(text="Some other words to batch.", seed=9), req(seed=5, max_new_tokens=6)])
    assert torch.equal(alone, both[1])


def test_kv_cached_code_predictor_equals_recomputing_the_whole_sequence(tts):
    """predict() decodes one token per step over its paged cache; the plain cache-less forward over the whole
    sequence so far at every step (what the cache replaces) picks the same codes from the same logits."""
    from aura_omni.layers.attention import AttentionMetadata

    cp = tts.talker.code_predictor
    g = torch.Generator().manual_seed(2)
    rows, hidden = 3, tts.talker.config.hidden_size
    talker_hidden, code0 = torch.randn(rows, hidden, generator=g), torch.randn(rows, hidden, generator=g)
    seen = []

    def choose(group, logits):
        seen.append(logits)
        return logits.argmax(-1)

    with torch.inference_mode():  # as the engine runs it: the shared fixture's pages may be inference tensors
        codes = cp.predict(talker_hidden, code0, choose)
        seq = torch.stack([cp.small_to_mtp_projection(talker_hidden), cp.small_to_mtp_projection(code0)], 1)
        for group in range(1, cp.config.num_code_groups):
            n = seq.shape[1]
            out = cp.model(seq.reshape(rows * n, -1), torch.arange(n).repeat(rows), AttentionMetadata.prefill([n] * rows))
            logits = cp.lm_head[group - 1](out.view(rows, n, -1)[:, -1])
            torch.testing.assert_close(seen[group - 1], logits, rtol=1e-5, atol=1e-5)
            assert torch.equal(codes[:, group - 1], logits.argmax(-1))
            if group < cp.config.num_code_groups - 1:
                nxt = cp.small_to_mtp_projection(cp.model.codec_embedding[group - 1](codes[:, group - 1]))
                seq = torch.cat([seq, nxt[:, None]], 1)


def test_fused_codebooks_embed_a_frame_like_the_per_table_sum(tts):
    talker = tts.talker
    g = torch.Generator().manual_seed(5)
    codes = torch.cat([torch.randint(0, talker.config.vocab_size, (4, 1), generator=g),
                       torch.randint(0, talker.config.code_predictor.vocab_size, (4, 15), generator=g)], 1)
    with torch.no_grad():
        want = talker.embed_frame(codes)
        talker.fuse_codebooks()
        assert talker._codebooks is not None
        torch.testing.assert_close(talker.embed_frame(codes), want, rtol=1e-6, atol=1e-6)
        table = talker.code_predictor.model.codec_embedding[3]
        table.weight.data = table.weight.data.clone() * 2  # replaced after fusing: the loop is used again
        doubled = talker.embed_frame(codes)
        table.weight.data /= 2
    torch.testing.assert_close(doubled - want, table(codes[:, 4]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_blocks", [200, 12])  # roomy, or so tight that sequences are preempted and recomputed
def test_async_scheduling_gives_the_frames_of_waiting_for_every_step(tiny_tts, kv_blocks):
    """Queued steps (the next step launched before the last one's codes are back) with staggered arrivals, so new
    prompts share steps with decodes whose last frame is still pending, sampled and greedy requests, EOS and length
    stops: every request gets the tokens and frames of the synchronous engine, and no spare step leaks out."""
    from aura_omni.engine.engine_config import EngineConfig

    ckpt = tiny_tts("custom_voice", with_codec=False)
    reqs = [req(**GREEDY, max_new_tokens=12), req(seed=1, max_new_tokens=12), req(seed=2, max_new_tokens=12),
            req(seed=0, max_new_tokens=12)]
    rows = []

    def drive(async_steps: bool, arrivals: dict[int, list[int]], kv_blocks: int) -> dict[int, list]:
        """step -> requests added before it; returns each request's (token, frame) list."""
        tts = Qwen3TTS.load(ckpt, engine_config=EngineConfig(max_model_len=40, block_size=4, num_kv_blocks=kv_blocks,
                                                             max_num_seqs=4, async_scheduling=async_steps))
        engine = tts.engine.engine
        assert engine.async_steps is async_steps
        tts.talker.codec_head.weight.data[2150] = 0.5 * tts.talker.codec_head.weight.data[0].sign()  # EOS at times
        launch = engine.runner.launch
        engine.runner.launch = lambda sched, **kw: rows.append(len(sched.scheduled)) or launch(sched, **kw)
        got = {i: [] for ids in arrivals.values() for i in ids}
        step = 0
        while engine.has_unfinished() or step <= max(arrivals):
            for i in arrivals.get(step, []):
                tts.engine.add_request(str(i), tts._talker_input(reqs[i]))
            for out in engine.step():
                got[int(out.request_id)] += [(t, tuple(e.tolist())) for t, e in zip(out.new_token_ids, out.new_extras)]
                assert out.num_output_tokens == len(got[int(out.request_id)])
            step += 1
        stats = engine.stats()
        assert stats["free_blocks"] == stats["total_blocks"] and stats["running"] == stats["waiting"] == 0
        if kv_blocks == 12 and len(got) > 1:
            assert stats["preemptions"] > 0
        return got

    alone = {i: drive(False, {0: [i]}, 200)[i] for i in range(len(reqs))}  # prefill, then plain decode steps
    staggered = {0: [0, 1], 2: [2], 5: [3]}  # new prompts join steps whose decodes wait for their last frame
    results, launched = [], []
    for async_steps in (False, True):
        rows.clear()
        results.append(drive(async_steps, staggered, kv_blocks))
        launched.append(sum(rows))
    assert results[0] == alone and results[1] == alone
    eos_stops = sum(frames[-1][0] == 2150 and len(frames) < 12 for frames in alone.values())
    assert 0 < eos_stops < len(reqs)  # both ways of ending are covered
    if kv_blocks == 200:  # same schedule: one spare row per EOS stop, none past a length limit
        assert launched[1] - launched[0] == eos_stops


def test_the_deploy_talker_stage_sizes_the_talker_engine(tiny_tts):
    from aura_omni.deploy import Stage
    from aura_omni.stages.tts import load_qwen3_tts_stage

    ckpt = tiny_tts("custom_voice", with_codec=False)
    stage = Stage(stage_id=2, model=str(ckpt), max_model_len=96, max_num_batched_tokens=48, max_num_seqs=3,
                  kernels={"gemv": False})
    config = load_qwen3_tts_stage(stage, "cpu", torch.float32, "auto").engine.engine.config
    assert (config.max_model_len, config.max_num_batched_tokens, config.max_num_seqs) == (96, 48, 3)
    assert config.cuda_graph_max_seq_len == 2048 and config.gemv is False  # TTS defaults under the deploy fields
