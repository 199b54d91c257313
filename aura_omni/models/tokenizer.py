"""Text tokenizers of the checkpoints (Qwen2 byte-level BPE from vocab.json + merges.txt), via transformers."""

from pathlib import Path


def load_tokenizer(ckpt: str | Path | None):
    """The checkpoint's tokenizer; with no checkpoint (`--load-format dummy`), the real Qwen vocabulary."""
    from transformers import AutoTokenizer

    if ckpt is None:
        from aura_omni.models.qwen_vocab import qwen_vocab_dir

        ckpt = qwen_vocab_dir()
    return AutoTokenizer.from_pretrained(str(ckpt))
