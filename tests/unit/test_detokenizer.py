"""The incremental detokenizer against decoding the whole reply, with the real Qwen vocabulary (tiny AURA's
tokenizer files): any ids, including multi-byte characters split across tokens and special tokens."""

import pytest
from hypothesis import given, settings, strategies as st

from aura_omni.engine.detokenizer import IncrementalDetokenizer
from aura_omni.models.qwen_vocab import dummy_tokenizer_dir
from aura_omni.models.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(dummy_tokenizer_dir("aura"))


def _stream(tokenizer, ids: list[int], chunk: int = 1) -> tuple[str, list[str]]:
    detok = IncrementalDetokenizer(lambda x: tokenizer.decode(x, skip_special_tokens=False))
    pieces = [detok.add(ids[i:i + chunk]) for i in range(0, len(ids), chunk)]
    pieces.append(detok.flush())
    return detok.text, pieces


@pytest.mark.parametrize("text", ["Hello, world!", "你好，世界。今天天气很好。", "Emoji: 🙂👍🏽🫠 𓀀 done", "<|im_start|>a<|silent|>b",
                                  "ümlaut façade – “quotes”"])
def test_the_deltas_join_to_the_whole_decode(tokenizer, text):
    ids = tokenizer.encode(text)
    whole, pieces = _stream(tokenizer, ids)
    assert whole == "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=False) == text


def test_a_character_split_across_tokens_is_held_back_until_it_is_whole(tokenizer):
    ids = tokenizer.encode("𓀀")
    assert len(ids) == 3  # byte-level BPE: the hieroglyph's four bytes come in three tokens
    _, pieces = _stream(tokenizer, ids)
    assert pieces == ["", "", "𓀀", ""]


@settings(max_examples=150, deadline=None)
@given(ids=st.lists(st.integers(0, 151_700), max_size=40), chunk=st.integers(1, 4))
def test_any_ids_stream_to_the_whole_decode(tokenizer, ids, chunk):
    ids = [i for i in ids if i < len(tokenizer)]
    whole, pieces = _stream(tokenizer, ids, chunk)
    assert whole == "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=False)
