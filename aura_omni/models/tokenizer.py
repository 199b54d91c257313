"""Text tokenizers of the checkpoints: Qwen2's byte-level BPE built from vocab.json + merges.txt + tokenizer_config.json
on the Rust `tokenizers` library, as transformers' Qwen2Tokenizer builds it (tests/parity/test_tokenizer_parity.py
compares the two), without importing transformers: that import took 5-9 s of a GPU host's start (docs/deploy.md)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

# Qwen2's pre-tokenizer split: contractions, letter runs with one leading non-letter, single digits, punctuation
# runs, newlines, trailing spaces
PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                     r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

# Words whose BPE merges the Rust tokenizer keeps (its default is 10,000), per vocabulary. The cache only ever fills: with replies
# of novel words (random weights, names, numbers) it grows for hours towards ~6 MiB per tokenizer, which a soak
# reads as a leak. 1,000 hold ~0.6 MiB and cost ~15 us more per 200 characters encoded (docs/reliability.md).
BPE_WORD_CACHE = 1000


_BPE_MODELS: dict[str, BPE] = {}  # one per vocabulary: the ASR, AURA and TTS checkpoints share Qwen's
_BPE_LOCK = threading.Lock()


class QwenTokenizer:
    """The part of a transformers tokenizer's interface the stages use: encode, decode, token <-> id, length."""

    def __init__(self, backend: Tokenizer, name_or_path: str, config: dict):
        self.backend_tokenizer = backend
        self.name_or_path = name_or_path
        self.unk_token_id = self._special_id(config.get("unk_token"))
        self.eos_token_id = self._special_id(config.get("eos_token"))

    def _special_id(self, token) -> int | None:
        if isinstance(token, dict):  # an AddedToken serialised whole
            token = token.get("content")
        return self.backend_tokenizer.token_to_id(token) if token else None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; special tokens written in it are matched whole. Qwen's tokenizers add no BOS/EOS, so
        `add_special_tokens` changes nothing (kept for the transformers signature)."""
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def __call__(self, text: str) -> dict:
        return {"input_ids": self.encode(text)}

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool = False) -> str:
        if clean_up_tokenization_spaces:
            raise ValueError("clean_up_tokenization_spaces is not supported (Qwen's tokenizers turn it off)")
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_ids(self, tokens: str | list[str]):
        if isinstance(tokens, str):
            i = self.backend_tokenizer.token_to_id(tokens)
            return self.unk_token_id if i is None else i
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)


def load_tokenizer(ckpt: str | Path, share_vocab: bool = True) -> QwenTokenizer:
    """The tokenizer in a checkpoint directory (for dummy weights: qwen_vocab.dummy_tokenizer_dir): its
    tokenizer.json, or else the BPE built from vocab.json and merges.txt; and the added tokens of
    tokenizer_config.json's `added_tokens_decoder` it lacks, each at the id the config gives it. `share_vocab`: the
    BPE model (merges and word cache) built once for every checkpoint of the same vocab.json + merges.txt."""
    ckpt = Path(ckpt)
    config_path = ckpt / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    if (ckpt / "tokenizer.json").exists():
        backend = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
        backend.no_padding()  # a prompt is never padded or cut to a length the file may name
        backend.no_truncation()
    else:
        if config.get("tokenizer_class", "Qwen2Tokenizer") not in ("Qwen2Tokenizer", "Qwen2TokenizerFast"):
            raise ValueError(f"{ckpt}: tokenizer_class {config['tokenizer_class']!r} is not a Qwen2 tokenizer")
        backend = Tokenizer(_bpe(ckpt / "vocab.json", ckpt / "merges.txt", share_vocab))
        backend.normalizer = normalizers.NFC()
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=bool(config.get("add_prefix_space", False)), use_regex=False)])
        backend.decoder = decoders.ByteLevel()
    _add_tokens(backend, config.get("added_tokens_decoder", {}), ckpt)
    bound_word_cache(backend)
    return QwenTokenizer(backend, str(ckpt), config)


def _bpe(vocab: Path, merges: Path, shared: bool) -> BPE:
    """The BPE model of these files, built once per process (~0.4 s each) and shared: a Tokenizer's added tokens are
    its own, its model's merges and word cache may be anyone's."""
    def build() -> BPE:
        v, m = BPE.read_file(str(vocab), str(merges))
        return BPE(v, m, dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                   fuse_unk=False, byte_fallback=False)

    if not shared:
        return build()
    key = hashlib.blake2b(vocab.read_bytes() + b"\0" + merges.read_bytes(), digest_size=16).hexdigest()
    with _BPE_LOCK:
        if key not in _BPE_MODELS:
            _BPE_MODELS[key] = build()
        return _BPE_MODELS[key]


def _add_tokens(backend: Tokenizer, added: dict, where: Path) -> None:
    """The config's added tokens a tokenizer.json lacks (all of them for vocab.json + merges.txt), in one call in id
    order (the Rust tokenizer gives each new one the next id; a call per token would rebuild its matcher each time),
    then every one checked against the id the config gives it."""
    tokens = sorted(((int(i), t) for i, t in added.items()), key=lambda x: x[0])
    backend.add_tokens([AddedToken(t["content"], single_word=t.get("single_word", False), lstrip=t.get("lstrip", False),
                                   rstrip=t.get("rstrip", False),
                                   normalized=t.get("normalized", not t.get("special", False)),
                                   special=t.get("special", False))
                        for _, t in tokens if backend.token_to_id(t["content"]) is None])
    for i, t in tokens:
        if backend.token_to_id(t["content"]) != i:
            raise ValueError(f"{where}: added token {t['content']!r} got id {backend.token_to_id(t['content'])}, "
                             f"tokenizer_config.json says {i}")


def bound_word_cache(tokenizer: QwenTokenizer | Tokenizer, words: int = BPE_WORD_CACHE) -> None:
    """Cap the BPE word cache of a tokenizer (a no-op for a model without one)."""
    model = getattr(tokenizer, "backend_tokenizer", tokenizer).model
    if hasattr(model, "_resize_cache"):
        model._resize_cache(words)
