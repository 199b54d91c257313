"""Our Qwen tokenizer (models/tokenizer.py, built on the Rust `tokenizers` without transformers) against transformers'
own Qwen2Tokenizer on the same checkpoint files: the same ids for every text, the same text back for every id
sequence, the same special tokens, and the same from a tokenizer.json."""

import random
import shutil

import pytest

from aura_omni.models.qwen_vocab import dummy_tokenizer_dir
from aura_omni.models import tokenizer
from aura_omni.models.tokenizer import load_tokenizer

transformers = pytest.importorskip("transformers")

FIXED = [
    "Hello world!", "  leading spaces and trailing   ", "It's 12:45, we'll go.\n\nNew paragraph\r\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "中文测试，日本語のテキスト、한국어 텍스트 🚀🔥 émoji café naïve", "e\u0301 composed (NFC)", "a" * 300,
    '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>', "1234567890 3.14159", "tab\there",
    "<|audio_start|><|audio_pad|><|audio_pad|><|audio_end|>", "<|vision_start|><|image_pad|><|vision_end|>",
    "<asr_text>words<|silent|><tts_text_eod>", "<|im_start|", "I'M SHOUTING, ISN'T IT", "\n\n\n   \n",
]


def _texts(n: int = 1500) -> list[str]:
    rng = random.Random(0)
    alphabet = [chr(c) for c in [*range(32, 127), *range(0x4E00, 0x4E30), 0x1F600, 0x301, 0xE9, 0xDF, 10, 13, 9]]
    alphabet += ["<|im_end|>", "<think>", "'s", "  "]
    return FIXED + ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60))) for _ in range(n)]


@pytest.fixture(scope="module", params=["aura", "asr", "tts"])
def pair(request):
    directory = dummy_tokenizer_dir(request.param)
    return load_tokenizer(directory), transformers.AutoTokenizer.from_pretrained(str(directory)), directory


def _assert_same(ours, ref):
    assert len(ours) == len(ref)
    assert (ours.eos_token_id, ours.unk_token_id) == (ref.eos_token_id, ref.unk_token_id)
    for text in _texts():
        ids = ref.encode(text, add_special_tokens=False)
        assert ours.encode(text, add_special_tokens=False) == ids, text
        assert ours(text)["input_ids"] == ref(text)["input_ids"], text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(
                ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False), (text, skip)
    rng = random.Random(1)
    ids = [rng.randrange(len(ref)) for _ in range(3000)]  # any ids, partial UTF-8 sequences included
    assert ours.decode(ids) == ref.decode(ids, clean_up_tokenization_spaces=False)
    names = list(ref.get_added_vocab()) + ["hello", "Ġthe", "no such token"]
    assert ours.convert_tokens_to_ids(names) == ref.convert_tokens_to_ids(names)


def test_the_same_tokens_as_transformers(pair):
    ours, ref, _ = pair
    _assert_same(ours, ref)


def test_a_tokenizer_json_reads_the_same(pair, tmp_path):
    _, ref, directory = pair
    shutil.copy(directory / "tokenizer_config.json", tmp_path)
    backend = ref.backend_tokenizer
    backend.enable_truncation(8)  # a file that names a length must not cut or pad a prompt
    backend.enable_padding(length=64)
    backend.save(str(tmp_path / "tokenizer.json"))  # no vocab.json / merges.txt beside it
    backend.no_truncation()
    backend.no_padding()
    _assert_same(load_tokenizer(tmp_path), ref)


def test_checkpoints_of_one_vocabulary_share_its_merges_but_not_their_added_tokens(monkeypatch):
    monkeypatch.setattr(tokenizer, "_BPE_MODELS", {})
    aura, tts = load_tokenizer(dummy_tokenizer_dir("aura")), load_tokenizer(dummy_tokenizer_dir("tts"))
    assert len(tokenizer._BPE_MODELS) == 1  # one BPE built for both
    assert aura.convert_tokens_to_ids("<|silent|>") == 151669 and tts.convert_tokens_to_ids("<|silent|>") is None
    assert tts.convert_tokens_to_ids("<tts_text_eod>") == 151673 and aura.convert_tokens_to_ids("<tts_text_eod>") is None
