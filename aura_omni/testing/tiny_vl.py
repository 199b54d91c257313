"""A deterministic tiny random AURA (Qwen3-VL) checkpoint with the real file layout, key names,
config schema, preprocessor configs and Qwen vocabulary (+ <|silent|> = 151669).

Dims are tiny (text width 32, 4 layers; vision width 32, depth 5 with DeepStack after blocks 1, 2, 3),
everything else real: vocab 151936, 48x48 vision position table, patch 16 / temporal 2 / merge 2,
interleaved MRoPE, untied lm_head, bf16 weights in two shards plus an index.
"""

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from aura_omni.media.vision_preprocess import (IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS, VIDEO_FPS, VIDEO_MAX_FRAMES,
                                               VIDEO_MAX_PIXELS, VIDEO_MIN_FRAMES, VIDEO_MIN_PIXELS)
from aura_omni.models.qwen3_vl import Qwen3VLConfig, Qwen3VLForCausalLM
from aura_omni.models.qwen_vocab import AURA_EXTRA_TOKENS, write_qwen_tokenizer

TINY_TEXT_CONFIG = {
    "model_type": "qwen3_vl_text", "vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
    "hidden_act": "silu", "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "rope_theta": 5000000,
    "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
    "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
    "bos_token_id": 151643, "eos_token_id": 151645, "initializer_range": 0.02, "use_cache": True,
}
TINY_VISION_CONFIG = {
    "model_type": "qwen3_vl", "depth": 5, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
    "in_channels": 3, "hidden_act": "gelu_pytorch_tanh", "patch_size": 16, "temporal_patch_size": 2,
    "spatial_merge_size": 2, "out_hidden_size": 32, "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [1, 2, 3], "initializer_range": 0.02,
}
# Our own compact ChatML template with Qwen3-VL vision placeholders (for transformers users of the dir;
# aura_omni builds prompts itself in stages/aura/prompt_tokens.py).
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.content is string -%}{{- m.content -}}"
    "{%- else -%}{%- for c in m.content -%}"
    "{%- if c.type == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif c.type == 'video' -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif c.type == 'text' -%}{{- c.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def tiny_aura_config() -> dict:
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "text_config": dict(TINY_TEXT_CONFIG), "vision_config": dict(TINY_VISION_CONFIG),
        "image_token_id": 151655, "video_token_id": 151656,
        "vision_start_token_id": 151652, "vision_end_token_id": 151653,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.57.6",
    }


def _init_random(model: torch.nn.Module, seed: int) -> None:
    """Well-scaled random weights (fan-in scaled matrices, norms near 1) so logits are not near-ties."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight") or ".norm" in name and name.endswith("weight") and p.dim() == 1:
                p.copy_(1.0 + 0.1 * noise)
            elif p.dim() == 1:
                p.copy_(0.1 * noise)
            elif name in ("embed.weight", "visual.pos_embed.weight"):
                p.copy_(noise)
            else:
                p.copy_(noise / math.sqrt(p[0].numel()))


def _checkpoint_name(name: str) -> str:
    if name.startswith("visual."):
        return "model." + name
    if name.startswith("embed."):
        return "model.language_model.embed_tokens." + name[len("embed."):]
    if name.startswith("backbone."):
        return "model.language_model." + name[len("backbone."):]
    return name  # lm_head.weight


def write_tiny_aura(out_dir, seed: int = 0) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = tiny_aura_config()
    model = Qwen3VLForCausalLM(Qwen3VLConfig.from_hf(config))
    _init_random(model, seed)
    tensors = {_checkpoint_name(n): p.detach().to(torch.bfloat16).contiguous() for n, p in model.named_parameters()}
    shards = {
        "model-00001-of-00002.safetensors": {k: v for k, v in tensors.items() if k.startswith("model.language_model.")},
        "model-00002-of-00002.safetensors": {k: v for k, v in tensors.items() if not k.startswith("model.language_model.")},
    }
    weight_map = {}
    for fname, part in shards.items():
        save_file(part, str(out / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    _write_json(out / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json", {
        "bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
        "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.0})
    common = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
              "image_std": [0.5, 0.5, 0.5], "do_resize": True, "resample": 3, "do_rescale": True,
              "rescale_factor": 1 / 255, "do_normalize": True, "do_convert_rgb": True,
              "processor_class": "Qwen3VLProcessor"}
    _write_json(out / "preprocessor_config.json", {
        "image_processor_type": "Qwen2VLImageProcessor", **common,
        "size": {"shortest_edge": IMAGE_MIN_PIXELS, "longest_edge": IMAGE_MAX_PIXELS}})
    _write_json(out / "video_preprocessor_config.json", {
        "video_processor_type": "Qwen3VLVideoProcessor", **common,
        "size": {"shortest_edge": VIDEO_MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS},
        "fps": VIDEO_FPS, "min_frames": VIDEO_MIN_FRAMES, "max_frames": VIDEO_MAX_FRAMES, "do_sample_frames": True})
    write_qwen_tokenizer(out, AURA_EXTRA_TOKENS, extra_config={"model_max_length": 262144})
    _write_json(out / "chat_template.json", {"chat_template": CHAT_TEMPLATE})
    return out


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False))
