"""The Rust tokenizer's BPE word cache is bounded (models/tokenizer.py): replies of novel words must not grow the
C heap for hours, as they did with its default of 10,000 words."""

import gc
import random

import pytest

from aura_omni.models.qwen_vocab import dummy_tokenizer_dir
from aura_omni.models.tokenizer import BPE_WORD_CACHE, bound_word_cache, load_tokenizer
from aura_omni.stages import heap_trim

glibc = pytest.mark.skipif(not heap_trim.TRIMMER.available, reason="no mallinfo2 in this C library")


def _novel_words(rng: random.Random, n: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyzäéßø"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(4, 12))) for _ in range(n)]


def _heap_after(tokenizer, words: list[str]) -> int:
    for i in range(0, len(words), 50):
        tokenizer.encode(" ".join(words[i:i + 50]))
    gc.collect()
    heap_trim.HeapTrimmer().trim()
    return heap_trim.heap_in_use_bytes()


@glibc
def test_novel_words_do_not_grow_the_heap_past_the_bounded_cache():
    rng = random.Random(0)
    directory = dummy_tokenizer_dir("aura")
    bounded = load_tokenizer(directory, share_vocab=False)
    before = _heap_after(bounded, _novel_words(rng, 2 * BPE_WORD_CACHE))  # the cache filled
    grown = _heap_after(bounded, _novel_words(rng, 20_000)) - before
    assert grown < 1 << 20, f"{grown / 2**20:.2f} MiB held after 20,000 novel words"

    default = load_tokenizer(directory, share_vocab=False)
    bound_word_cache(default, 10_000)  # the library's default, for contrast: the same words fill it
    before = _heap_after(default, [])
    grown_default = _heap_after(default, _novel_words(rng, 20_000)) - before
    assert grown_default > 2 << 20, "the contrast no longer shows the default cache's growth"


def test_the_bound_does_not_change_the_tokens():
    directory = dummy_tokenizer_dir("aura")
    text = "Gödel's 12 brisk ẞ-foxes: naïve café déjà-vu, 漢字 and emoji 🦊 — " * 3
    bounded, uncached = load_tokenizer(directory, share_vocab=False), load_tokenizer(directory, share_vocab=False)
    bound_word_cache(uncached, 0)
    assert bounded.encode(text) == uncached.encode(text)
    assert bounded.decode(bounded.encode(text)) == text
