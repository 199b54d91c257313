"""Tiny random Qwen3-TTS-Tokenizer-12Hz codec (and tiny ECAPA speaker encoder weights) with the real layout.

`write_tiny_codec(dir)` writes the 4 files of the real codec repository (config.json, configuration.json,
model.safetensors, preprocessor_config.json) with the real config schema and key names (`encoder.*` Mimi
names, `decoder.*` Code2Wav names), tiny dims as in qwen3_tts.md §5.1, and weights from our own modules.
Kept real on purpose: 16 groups of 2048 codes, 24 kHz, the 1920 hop, ratios [8,6,5,4] and [8,5,4,3]+[2,2],
sliding window 72. Tensors that start as zeros (codebook sums, SnakeBeta alpha/beta) are randomised so
tests see signal.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from aura_omni.models.qwen3_tts.code2wav import Code2Wav
from aura_omni.models.qwen3_tts.codec_config import CodecConfig, CodecEncoderConfig, Code2WavConfig
from aura_omni.models.qwen3_tts.codec_encoder import CodecEncoder
from aura_omni.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

# Contents of the real repository's small files (qwen3_tts.md §4).
MODELSCOPE_CONFIGURATION = {"framework": "pytorch", "task": "text-to-speech", "allow_remote": True}
PREPROCESSOR_CONFIG = {"chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
                       "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
                       "sampling_rate": 24000}


def tiny_codec_config() -> CodecConfig:
    decoder = Code2WavConfig(hidden_size=32, latent_dim=32, codebook_dim=16, decoder_dim=32, num_attention_heads=4,
                             num_key_value_heads=4, head_dim=16, intermediate_size=64, num_hidden_layers=2,
                             vector_quantization_hidden_dimension=16)
    encoder = CodecEncoderConfig(hidden_size=32, num_filters=8, codebook_dim=16,
                                 vector_quantization_hidden_dimension=16, upsample_groups=32, num_hidden_layers=2,
                                 intermediate_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=8)
    return CodecConfig(decoder=decoder, encoder=encoder)


def tiny_speaker_encoder_config(enc_dim: int) -> SpeakerEncoderConfig:
    """The tiny ECAPA of qwen3_tts.md §5.1 (channels [32,32,32,32,96]); enc_dim = the talker hidden size."""
    return SpeakerEncoderConfig(enc_dim=enc_dim, enc_channels=[32, 32, 32, 32, 96], enc_attention_channels=16,
                                enc_se_channels=16)


# Random Mimi latents of 0.1-std noise are ~0.03 after input_proj: codebooks a bit smaller make the
# nearest-neighbour codes vary (unit-scale codebooks would always pick the same smallest entry).
ENCODER_CODEBOOK_STD = 0.01


@torch.no_grad()
def randomize_zero_inits(module: torch.nn.Module, codebook_std: float = 1.0) -> None:
    """Codebook sums start at zero, usages at one, SnakeBeta alpha/beta at zero: give them random values."""
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if name.endswith(("embedding_sum", "embed_sum")):
            t.copy_(codebook_std * torch.randn_like(t))
        elif name.endswith("cluster_usage"):
            t.uniform_(0.5, 2.0)
        elif name.endswith(("alpha", "beta")) and t.dim() == 1:
            t.copy_(0.1 * torch.randn_like(t))


def tiny_codec_state_dict(cfg: CodecConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """`encoder.*` + `decoder.*` tensors of a random codec built from our own modules (all 32 Mimi codebooks)."""
    torch.manual_seed(seed)
    encoder = CodecEncoder(cfg.encoder, num_codebooks=cfg.encoder.num_quantizers)
    decoder = Code2Wav(cfg.decoder)
    randomize_zero_inits(encoder, ENCODER_CODEBOOK_STD)
    randomize_zero_inits(decoder)
    tensors = {f"encoder.{k}": v for k, v in encoder.state_dict().items()}
    tensors.update({f"decoder.{k}": v for k, v in decoder.state_dict().items()})
    return {k: v.detach().to(torch.float32).contiguous() for k, v in sorted(tensors.items())}


def write_tiny_codec(out_dir: str | Path, seed: int = 0, config: CodecConfig | None = None) -> Path:
    """Write a deterministic tiny codec directory (or the full-size `config` with random weights)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config or tiny_codec_config()
    save_file(tiny_codec_state_dict(cfg, seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, sort_keys=True) + "\n")
    (out / "configuration.json").write_text(json.dumps(MODELSCOPE_CONFIGURATION))
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2, sort_keys=True) + "\n")
    return out


def tiny_speaker_encoder_weights(enc_dim: int, seed: int = 0) -> tuple[dict, dict[str, torch.Tensor]]:
    """(speaker_encoder_config dict, {"speaker_encoder.<key>": tensor}) for a tiny Base checkpoint."""
    cfg = tiny_speaker_encoder_config(enc_dim)
    torch.manual_seed(seed)
    model = SpeakerEncoder(cfg)
    weights = {f"speaker_encoder.{k}": v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    return cfg.to_dict(), weights
