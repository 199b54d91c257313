"""Text tokenizers of the checkpoints (Qwen2 byte-level BPE from vocab.json + merges.txt), via transformers."""

from pathlib import Path


def load_tokenizer(ckpt: str | Path):
    """The tokenizer in a checkpoint directory (for dummy weights: qwen_vocab.dummy_tokenizer_dir)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ckpt))
