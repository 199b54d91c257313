"""Talker prompt layouts of every Qwen3-TTS mode (qwen3_tts.md §2), checked on ids without a model."""

import pytest

from aura_omni.models.qwen3_tts.checkpoint_config import Qwen3TTSConfig
from aura_omni.models.qwen3_tts.prompt import XVECTOR, RefFrame, plan_prompt
from aura_omni.testing.tiny_tts import tiny_config

PAD, BOS, EOS = 151671, 151672, 151673  # <tts_pad>, <tts_text_bos>, <tts_text_eod>
C_PAD, C_BOS, THINK, NOTHINK, THINK_BOS, THINK_EOS = 2148, 2149, 2154, 2155, 2156, 2157
ENGLISH, CHINESE, SICHUAN = 2050, 2055, 2062
VIVIAN, ERIC = 3065, 2875
ROLE = [151644, 77091, 198]  # <|im_start|>assistant\n
TAIL = [151645, 198, 151644, 77091, 198]  # <|im_end|>\n<|im_start|>assistant\n


def ids(body):
    return ROLE + list(body) + TAIL


@pytest.fixture(scope="module")
def cv():
    return Qwen3TTSConfig.from_dict(tiny_config("custom_voice"))


@pytest.fixture(scope="module")
def base():
    return Qwen3TTSConfig.from_dict(tiny_config("base"))


def test_custom_voice_non_streaming_layout(cv):
    body = [10, 11, 12, 13]
    p = plan_prompt(cv, ids(body), language="English", speaker="Vivian", non_streaming=True)
    assert len(p) == len(body) + 11  # spec: N + 11
    assert p.text_ids[:3] == ROLE and p.codec[:3] == [None] * 3
    # codec prefix think, think_bos, lang, think_eos, speaker, pad under <tts_pad>x5 ... <tts_text_bos>
    assert p.codec[3:9] == [THINK, THINK_BOS, ENGLISH, THINK_EOS, VIVIAN, C_PAD]
    assert p.text_ids[3:9] == [PAD] * 5 + [BOS]
    assert p.text_ids[9:14] == body + [EOS] and p.codec[9:14] == [C_PAD] * 5
    assert (p.text_ids[-1], p.codec[-1]) == (PAD, C_BOS)
    assert p.trailing_text_ids == [PAD]


def test_streaming_text_feeds_one_token_per_frame(cv):
    body = [10, 11, 12]
    p = plan_prompt(cv, ids(body), language="Auto", speaker="Ryan", non_streaming=False)
    assert len(p) == 9  # spec: CustomVoice streaming, Auto
    assert p.codec[3:6] == [NOTHINK, THINK_BOS, THINK_EOS]
    assert (p.text_ids[-1], p.codec[-1]) == (10, C_BOS)
    assert p.trailing_text_ids == [11, 12, EOS]


def test_dialect_speaker_replaces_chinese_and_auto_but_not_english(cv):
    for lang in ("Chinese", "Auto"):
        p = plan_prompt(cv, ids([10]), language=lang, speaker="Eric", non_streaming=True)
        assert p.codec[3:8] == [THINK, THINK_BOS, SICHUAN, THINK_EOS, ERIC]
    p = plan_prompt(cv, ids([10]), language="English", speaker="eric", non_streaming=True)
    assert p.codec[5] == ENGLISH
    p = plan_prompt(cv, ids([10]), language="Chinese", speaker="Vivian", non_streaming=True)
    assert p.codec[5] == CHINESE


def test_instruct_is_text_only_and_leads(cv):
    instruct = [151644, 872, 198, 50, 51, 151645, 198]
    p = plan_prompt(cv, ids([10, 11]), language="English", speaker="Vivian", instruct_ids=instruct, non_streaming=True)
    assert p.text_ids[:7] == instruct and p.codec[:7] == [None] * 7
    assert p.text_ids[7:10] == ROLE


def test_voice_design_length(cv):
    instruct, body = [1] * 6, [10, 11, 12]
    p = plan_prompt(cv, ids(body), language="English", instruct_ids=instruct, non_streaming=True)
    assert len(p) == len(instruct) + 3 + 5 + len(body) + 2  # spec: I+3+5+N+2 (no speaker row)


def test_base_x_vector_row(base):
    p = plan_prompt(base, ids([10, 11]), language="English", xvector=True)
    assert len(p) == 10  # spec: Base x-vector, English
    assert p.codec[3:9] == [THINK, THINK_BOS, ENGLISH, THINK_EOS, XVECTOR, C_PAD]


def test_icl_streaming_puts_reference_frames_under_the_text(base):
    ref = ROLE + [20, 21] + [151645, 198]
    body = list(range(10, 40))  # longer than F+1: the rest trails
    frames = 5
    p = plan_prompt(base, ids(body), language="English", xvector=True, ref_text_ids=ref, num_ref_frames=frames)
    assert len(p) == 9 + frames + 1  # spec: 9 + F + 1
    text = [20, 21] + body + [EOS]
    assert p.codec[-frames - 1:] == [C_BOS] + [RefFrame(i) for i in range(frames)]
    assert p.text_ids[-frames - 1:] == text[:frames + 1]
    assert p.trailing_text_ids == text[frames + 1:]


def test_icl_streaming_short_text_is_padded(base):
    ref = ROLE + [20] + [151645, 198]
    p = plan_prompt(base, ids([10]), language="English", xvector=True, ref_text_ids=ref, num_ref_frames=6)
    assert p.text_ids[-7:] == [20, 10, EOS] + [PAD] * 4
    assert p.trailing_text_ids == [PAD]


def test_icl_non_streaming_text_then_frames(base):
    ref = ROLE + [20, 21, 22] + [151645, 198]
    body, frames = [10, 11], 4
    p = plan_prompt(base, ids(body), language="Auto", xvector=True, ref_text_ids=ref, num_ref_frames=frames,
                    non_streaming=True)
    assert len(p) == 8 + 3 + len(body) + 1 + frames + 1  # spec: 8 + R + N + 1 + F + 1
    assert p.text_ids[8:14] == [20, 21, 22, 10, 11, EOS] and p.codec[8:14] == [C_PAD] * 6
    assert p.codec[14:] == [C_BOS] + [RefFrame(i) for i in range(frames)] and p.text_ids[14:] == [PAD] * 5
    assert p.trailing_text_ids == [PAD]
