"""Text tokenizers of the checkpoints (Qwen2 byte-level BPE from vocab.json + merges.txt), via transformers."""

import threading
from pathlib import Path

_import_ahead: threading.Thread | None = None


def load_tokenizer(ckpt: str | Path):
    """The tokenizer in a checkpoint directory (for dummy weights: qwen_vocab.dummy_tokenizer_dir)."""
    wait_for_import()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ckpt))


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
