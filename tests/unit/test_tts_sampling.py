"""The per-row reference of the Talker / sub-talker sampling rules (qwen3_tts.md §3), talker_sampling_reference.py."""

import torch
from talker_sampling_reference import apply_repetition_penalty, sample_code0, talker_logit_rules, warp

from aura_omni.models.qwen3_tts.sampling import CODEC_EOS, SamplingParams


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    logits = torch.tensor([2.0, -2.0, 1.0])
    out = apply_repetition_penalty(logits, [0, 1, 1], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0]


def test_control_ids_are_suppressed_and_eos_waits_two_steps():
    logits = torch.zeros(3072)
    logits[2100] = logits[CODEC_EOS] = 100.0
    p = SamplingParams(repetition_penalty=1.0)
    early = talker_logit_rules(logits, [], 1, p)
    assert torch.isinf(early[2048:]).all() and early[:2048].eq(0).all()
    late = talker_logit_rules(logits, [], 2, p)
    assert late[CODEC_EOS] == 100.0 and torch.isinf(late[2100])
    greedy = SamplingParams(do_sample=False)
    assert sample_code0(logits, [], 0, greedy, None) < 2048
    assert sample_code0(logits, [], 2, greedy, None) == CODEC_EOS


def test_top_k_and_top_p_keep_the_most_likely_ids():
    logits = torch.tensor([3.0, 1.0, 2.0, 0.0])
    assert torch.isfinite(warp(logits, 1.0, 2, 1.0)).tolist() == [True, False, True, False]
    assert torch.isfinite(warp(logits, 1.0, 0, 0.5)).tolist() == [True, False, False, False]
    assert torch.allclose(warp(logits, 0.5, 0, 1.0), logits * 2)


def test_sampling_follows_the_request_generator():
    logits = torch.randn(3072)
    p = SamplingParams(repetition_penalty=1.0)
    draw = lambda seed: [sample_code0(logits, [], 5, p, torch.Generator().manual_seed(seed)) for _ in range(3)]  # noqa: E731
    assert draw(3) == draw(3)
    assert all(c < 2048 for c in draw(4))
