"""Text tokenizers of the checkpoints (Qwen2 byte-level BPE from vocab.json + merges.txt), via transformers."""

import threading
from pathlib import Path


def load_tokenizer(ckpt: str | Path):
    """The tokenizer in a checkpoint directory (for dummy weights: qwen_vocab.dummy_tokenizer_dir)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ckpt))


def import_ahead() -> threading.Thread:
    """Import transformers' tokenizer machinery (seconds of Python) on a thread of its own while the first stage
    builds its model on the device, so the stage's tokenizer load finds it imported."""

    def run() -> None:
        from transformers import AutoTokenizer  # noqa: F401

    thread = threading.Thread(target=run, name="import-ahead", daemon=True)
    thread.start()
    return thread
