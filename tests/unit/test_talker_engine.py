"""The Talker on LLMEngine (engine/talker_adapter.py): concurrent streams share decode steps and give the
same greedy codes as alone; an abandoned stream frees its KV blocks and decoder slot; the batched,
on-device sampling rules equal the per-row reference rules; the KV-cached code predictor equals recomputing
its whole sequence."""

import threading
import time

import pytest
import torch

from aura_omni.models.qwen3_tts import sampling as S
from aura_omni.models.qwen3_tts.tts import Qwen3TTS, TTSRequest
from aura_omni.testing.tiny_tts import write_tiny_tts

GREEDY = dict(do_sample=False, subtalker_dosample=False)


@pytest.fixture(scope="module")
def tts(tmp_path_factory):
    return Qwen3TTS.load(write_tiny_tts(tmp_path_factory.mktemp("tts") / "cv", "custom_voice", with_codec=False))


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
        rows = torch.stack([S.talker_logit_rules(logits[i], history[i], step, p) for i in range(4)])
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
        kept = torch.stack([torch.isfinite(S.warp(logits[i], 0.7, k, top_p)) for i in range(n)])
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
