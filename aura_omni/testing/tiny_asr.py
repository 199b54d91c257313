"""Tiny random Qwen3-ASR checkpoints in the ORIGINAL Qwen/Qwen3-ASR-{1.7B,0.6B} layout.

Same files, config schema (`thinker_config` with `audio_config` / `text_config`), tensor names
(`thinker.audio_tower.*`, `thinker.model.*`, `thinker.lm_head.weight` untied in 1.7B, absent in the
tied 0.6B), real vocabulary and ASR added-token ids; only widths and depths are tiny. Weights are
saved in bf16 like the released checkpoints. Deterministic for a given seed.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from aura_omni.models.qwen_vocab import write_asr_tokenizer

VOCAB_SIZE = 151936  # embedding rows of every Qwen3 text model

SUPPORTED_LANGUAGES = [
    "Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish", "Portuguese",
    "Indonesian", "Italian", "Korean", "Russian", "Thai", "Vietnamese", "Japanese", "Turkish",
    "Hindi", "Malay", "Dutch", "Swedish", "Danish", "Finnish", "Polish", "Czech", "Filipino",
    "Persian", "Greek", "Romanian", "Hungarian", "Macedonian",
]

# Tiny stand-ins (real 1.7B: encoder 1024 wide, 24 layers, 16 heads, ffn 4096, conv 480; LM 2048 wide,
# 28 layers, 16/8 heads, head_dim 128, ffn 6144. Real 0.6B: encoder 896/18/14/3584; LM 1024, ffn 3072, tied).
TINY_AUDIO = dict(d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64, downsample_hidden_size=8)
TINY_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=16)

# Our own rendering of the Qwen3-ASR prompt: all system text in one system turn, every audio item as
# <|audio_start|><|audio_pad|><|audio_end|> in one user turn, then assistant turns.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='', audio='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{%- if m.content is string -%}{%- set ns.system = ns.system + m.content -%}"
    "{%- else -%}{%- for c in m.content if c.type == 'text' -%}{%- set ns.system = ns.system + c.text -%}{%- endfor -%}{%- endif -%}"
    "{%- elif m.role == 'user' and m.content is not string -%}"
    "{%- for c in m.content if c.type == 'audio' -%}{%- set ns.audio = ns.audio + '<|audio_start|><|audio_pad|><|audio_end|>' -%}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n<|im_start|>user\\n' + ns.audio + '<|im_end|>\\n' -}}"
    "{%- for m in messages if m.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + (m.content if m.content is string else '') + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def asr_config(size: str, audio: dict, text: dict) -> dict:
    """config.json in the original schema (model_type qwen3_asr with a thinker_config)."""
    tied = size == "0.6b"
    head_dim = text["head_dim"]
    # interleaved MRoPE sections sum to head_dim / 2: the real [24, 20, 20] for head_dim 128, scaled down for tiny ones
    section = [24, 20, 20] if head_dim == 128 else [head_dim // 2 - 2 * (head_dim // 8), head_dim // 8, head_dim // 8]
    audio_config = dict(
        model_type="qwen3_asr_audio_encoder", num_mel_bins=128, max_source_positions=1500, n_window=50,
        n_window_infer=800, conv_chunksize=500, output_dim=text["hidden_size"], activation_function="gelu",
        scale_embedding=False, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, **audio)
    text_config = dict(
        model_type="qwen3_asr_text", vocab_size=VOCAB_SIZE, max_position_embeddings=65536, rms_norm_eps=1e-6,
        rope_theta=1000000.0, rope_scaling={"rope_type": "default", "mrope_section": section,
                                            "mrope_interleaved": True, "interleaved": True},
        hidden_act="silu", attention_bias=False, attention_dropout=0.0, tie_word_embeddings=tied,
        bos_token_id=151643, eos_token_id=151645, use_cache=True, **text)
    return {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "support_languages": SUPPORTED_LANGUAGES,
        "thinker_config": {
            "model_type": "qwen3_asr_thinker", "audio_config": audio_config, "text_config": text_config,
            "audio_token_id": 151676, "audio_start_token_id": 151669, "audio_end_token_id": 151670,
            "user_token_id": 872, "initializer_range": 0.02, "tie_word_embeddings": tied, "dtype": "bfloat16",
        },
        "tie_word_embeddings": tied,
        "dtype": "bfloat16",
        "transformers_version": "4.57.6",
    }


def _random_state_dict(model: torch.nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Weights with unit-scale activations (std 1/sqrt(fan_in)) so greedy choices are far from ties."""
    out = {}
    for name, p in model.named_parameters():
        if "norm" in name or "ln_post" in name:
            t = (1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(p.shape, generator=gen)
        elif name.endswith("bias"):
            t = 0.05 * torch.randn(p.shape, generator=gen)
        elif name == "embed_tokens.weight":
            t = torch.randn(p.shape, generator=gen)
        else:
            fan_in = p[0].numel()
            t = torch.randn(p.shape, generator=gen) / fan_in**0.5
        out[name] = t.to(torch.bfloat16)
    return out


def write_tiny_asr(out_dir: str | Path, seed: int = 0, size: str = "1.7b") -> Path:
    """Write a tiny random checkpoint; `size` picks the layout: "1.7b" (untied head, 2 shards) or "0.6b" (tied, 1 file)."""
    from aura_omni.models.qwen3_asr import Qwen3ASR, Qwen3ASRConfig

    if size not in ("1.7b", "0.6b"):
        raise ValueError(f"size must be '1.7b' or '0.6b', got {size!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = asr_config(size, TINY_AUDIO, TINY_TEXT)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    with torch.device("meta"):
        model = Qwen3ASR(Qwen3ASRConfig.from_hf(config))
    ours = _random_state_dict(model, torch.Generator().manual_seed(seed))
    tensors = {Qwen3ASR.original_key(k): v for k, v in ours.items()}
    if size == "0.6b":
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    else:  # the released 1.7B is sharded: keep the index path exercised
        first = {k: v for k, v in tensors.items() if k.startswith(("thinker.audio_tower.", "thinker.model.embed_tokens."))}
        shards = {"model-00001-of-00002.safetensors": first,
                  "model-00002-of-00002.safetensors": {k: v for k, v in tensors.items() if k not in first}}
        weight_map = {}
        for file, part in shards.items():
            save_file(part, str(out / file), metadata={"format": "pt"})
            weight_map.update({k: file for k in part})
        total = sum(v.numel() * v.element_size() for v in tensors.values())
        (out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    (out / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [151645, 151643], "pad_token_id": 151643, "do_sample": False, "max_new_tokens": 4096}, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps({
        "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "sampling_rate": 16000,
        "hop_length": 160, "n_fft": 400, "chunk_length": 30, "n_samples": 480000, "nb_max_frames": 3000,
        "padding_side": "right", "padding_value": 0.0, "dither": 0.0, "return_attention_mask": True,
        "processor_class": "Qwen3ASRProcessor"}, indent=2))
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2))
    write_asr_tokenizer(out)
    return out
