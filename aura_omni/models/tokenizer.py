"""Text tokenizers of the checkpoints (Qwen2 byte-level BPE from vocab.json + merges.txt), via transformers."""

import threading
from pathlib import Path

_import_ahead: threading.Thread | None = None

# Words whose BPE merges the Rust tokenizer keeps (its default is 10,000). The cache only ever fills: with replies
# of novel words (random weights, names, numbers) it grows for hours towards ~6 MiB per tokenizer, which a soak
# reads as a leak. 1,000 hold ~0.6 MiB and cost ~15 us more per 200 characters encoded (docs/reliability.md).
BPE_WORD_CACHE = 1000


def load_tokenizer(ckpt: str | Path):
    """The tokenizer in a checkpoint directory (for dummy weights: qwen_vocab.dummy_tokenizer_dir)."""
    wait_for_import()
    from transformers import AutoTokenizer

    return bound_word_cache(AutoTokenizer.from_pretrained(str(ckpt)))


def bound_word_cache(tokenizer, words: int = BPE_WORD_CACHE):
    """Cap the BPE word cache of a transformers tokenizer backed by `tokenizers` (a no-op for any other)."""
    model = getattr(getattr(tokenizer, "_tokenizer", None), "model", None)
    if hasattr(model, "_resize_cache"):
        model._resize_cache(words)
    return tokenizer


def import_ahead() -> None:
    """Import transformers' tokenizer machinery (seconds of Python) on a thread of its own while the first stage
    builds its model on the device. Every tokenizer load waits for it first (`wait_for_import`): transformers'
    lazy modules fail an import made while another thread is halfway through the same one."""
    global _import_ahead

    def run() -> None:
        from transformers import AutoTokenizer  # noqa: F401

    if _import_ahead is None:
        _import_ahead = threading.Thread(target=run, name="import-ahead", daemon=True)
        _import_ahead.start()


def wait_for_import() -> None:
    if _import_ahead is not None:
        _import_ahead.join()
