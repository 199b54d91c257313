"""Deterministic tiny random Qwen3-TTS 12 Hz checkpoints with the real file set, config schema, key
names and special ids (qwen3_tts.md §5.1 dimensions), for CPU tests and the tiny demo.

Written files (like Qwen/Qwen3-TTS-12Hz-*): config.json, generation_config.json, model.safetensors,
vocab.json, merges.txt, tokenizer_config.json, preprocessor_config.json, speech_tokenizer/.
Weights come from our own native modules, so their key names are ours = the real ones.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from aura_omni.models.qwen3_tts.checkpoint_config import Qwen3TTSConfig
from aura_omni.models.qwen3_tts.talker import Talker
from aura_omni.models.qwen_vocab import TTS_EXTRA_TOKENS, write_qwen_tokenizer

# Real talker codec-vocabulary ids (identical in every released 12 Hz checkpoint).
CODEC_IDS = dict(codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150, codec_think_id=2154,
                 codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157)
LANGUAGE_IDS = {"chinese": 2055, "english": 2050, "german": 2053, "italian": 2070, "portuguese": 2071,
                "spanish": 2054, "japanese": 2058, "korean": 2064, "french": 2061, "russian": 2069,
                "beijing_dialect": 2074, "sichuan_dialect": 2062}
SPEAKER_IDS = {"serena": 3066, "vivian": 3065, "uncle_fu": 3010, "ryan": 3061, "aiden": 2861,
               "ono_anna": 2873, "sohee": 2864, "eric": 2875, "dylan": 2878}
SPEAKER_DIALECT = {**{k: False for k in SPEAKER_IDS}, "eric": "sichuan_dialect", "dylan": "beijing_dialect"}
# generation_config.json of every released checkpoint.
GENERATION_CONFIG = {"do_sample": True, "max_new_tokens": 8192, "repetition_penalty": 1.05,
                     "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_k": 50,
                     "subtalker_top_p": 1.0, "temperature": 0.9, "top_k": 50, "top_p": 1.0}
KINDS = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}


def tiny_config(kind: str) -> dict:
    """config.json of a tiny checkpoint: real schema and ids, tiny widths (text_hidden 48 != H 64,
    code predictor 32 != H so small_to_mtp_projection exists, as in 1.7B)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    code_predictor = dict(
        attention_bias=False, attention_dropout=0.0, head_dim=16, hidden_act="silu", hidden_size=32,
        intermediate_size=64, max_position_embeddings=65536, model_type="qwen3_tts_talker_code_predictor",
        num_attention_heads=4, num_code_groups=16, num_hidden_layers=2, num_key_value_heads=2,
        rms_norm_eps=1e-6, rope_scaling=None, rope_theta=1000000, use_cache=True, vocab_size=2048)
    talker = dict(
        attention_bias=False, attention_dropout=0.0, code_predictor_config=code_predictor, head_dim=32,
        hidden_act="silu", hidden_size=64, intermediate_size=128, max_position_embeddings=32768,
        model_type="qwen3_tts_talker", num_attention_heads=4, num_code_groups=16, num_hidden_layers=2,
        num_key_value_heads=2, position_id_per_seconds=13, rms_norm_eps=1e-6,
        rope_scaling={"interleaved": True, "mrope_section": [8, 4, 4], "rope_type": "default", "type": "default"},
        rope_theta=1000000, text_hidden_size=48, text_vocab_size=151936, use_cache=True,
        use_sliding_window=False, vocab_size=3072, codec_language_id=dict(LANGUAGE_IDS),
        spk_id=dict(SPEAKER_IDS) if kind == "custom_voice" else {},
        spk_is_dialect=dict(SPEAKER_DIALECT) if kind == "custom_voice" else {}, **CODEC_IDS)
    cfg = dict(
        architectures=["Qwen3TTSForConditionalGeneration"], assistant_token_id=77091, im_end_token_id=151645,
        im_start_token_id=151644, model_type="qwen3_tts", talker_config=talker,
        tokenizer_type="qwen3_tts_tokenizer_12hz", tts_bos_token_id=151672, tts_eos_token_id=151673,
        tts_model_size="1b7", tts_model_type=kind, tts_pad_token_id=151671)
    if kind == "base":
        cfg["speaker_encoder_config"] = dict(
            enc_attention_channels=16, enc_channels=[32, 32, 32, 32, 96], enc_dilations=[1, 2, 3, 4, 1],
            enc_dim=64, enc_kernel_sizes=[5, 3, 3, 3, 1], enc_res2net_scale=8, enc_se_channels=16,
            mel_dim=128, sample_rate=24000)
    return cfg


@torch.no_grad()
def _randomise(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Deterministic init that keeps the prompt audible in the output: matrices normal(0, 1/sqrt(fan_in))
    so attention and MLP outputs are as large as the residual stream, q/k norms around 3 so attention is
    sharp (q/k RMSNorm would otherwise pin attention logits near std 1), embeddings normal(0, 1)."""
    for name, p in module.named_parameters():
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            p.copy_(3.0 + 0.3 * torch.randn(p.shape, generator=gen))
        elif name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
        elif "embedding" in name:
            p.copy_(torch.randn(p.shape, generator=gen))
        elif p.dim() == 1:
            p.copy_(0.02 * torch.randn(p.shape, generator=gen))
        else:
            p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)


def tiny_talker_weights(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """`talker.*` tensors of a random Talker for config dict `cfg`."""
    talker = Talker(Qwen3TTSConfig.from_dict(cfg).talker)
    _randomise(talker, torch.Generator().manual_seed(seed))
    return {f"talker.{k}": v.contiguous() for k, v in talker.state_dict().items()}


def write_tts_files(out_dir: Path, cfg: dict, tensors: dict[str, torch.Tensor]) -> Path:
    """The main files of a Qwen3-TTS 12 Hz checkpoint of any size (everything but speech_tokenizer/):
    model.safetensors from `tensors`, config.json from `cfg`, the real generation and preprocessor
    configs, and the Qwen tokenizer with the TTS added tokens."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps({"processor_class": "Qwen3TTSProcessor"}, indent=2))
    write_qwen_tokenizer(out, TTS_EXTRA_TOKENS)
    return out


def write_tiny_tts(out_dir: Path, kind: str = "custom_voice", seed: int = 0, *, with_codec: bool = True) -> Path:
    """Write a tiny checkpoint of `kind` ("base" | "custom_voice" | "voice_design") into `out_dir`.
    `with_codec=False` leaves out speech_tokenizer/ (talker-only tests)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(kind)
    tensors = tiny_talker_weights(cfg, seed)
    if kind == "base":
        from aura_omni.testing.tiny_codec import tiny_speaker_encoder_weights  # ECAPA of §5.1, our module

        cfg["speaker_encoder_config"], speaker = tiny_speaker_encoder_weights(cfg["talker_config"]["hidden_size"], seed)
        tensors.update(speaker)
    write_tts_files(out, cfg, tensors)
    if with_codec:
        from aura_omni.testing.tiny_codec import write_tiny_codec

        write_tiny_codec(out / "speech_tokenizer", seed)
    return out
