"""Qwen3-TTS-Tokenizer-12Hz (`speech_tokenizer/config.json`): the codec's configuration.

Field names follow the real file: a Mimi `encoder_config` (reference audio -> codes, for ICL) and a
`decoder_config` (Code2Wav: codes -> 24 kHz waveform). Values not present fall back to the defaults
of qwen-tts 0.1.1's `Qwen3TTSTokenizerV2DecoderConfig` / transformers' `MimiConfig`.
"""

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aura_omni.models.loader import read_json

CODEC_MODEL_TYPE = "qwen3_tts_tokenizer_12hz"
SAMPLES_PER_FRAME = 1920  # 24000 Hz / 12.5 frames per second
NUM_CODE_GROUPS = 16  # 1 semantic + 15 acoustic codebooks per frame


class CodecConfigError(ValueError):
    """config.json is not a Qwen3-TTS 12 Hz codec config."""


@dataclass
class Code2WavConfig:
    """`decoder_config`. Defaults = the released codec (qwen3_tts.md §1.6)."""

    codebook_size: int = 2048
    hidden_size: int = 512
    latent_dim: int = 1024
    codebook_dim: int = 512  # RVQ codebooks are codebook_dim // 2 wide
    decoder_dim: int = 1536
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 64
    intermediate_size: int = 1024
    num_hidden_layers: int = 8
    sliding_window: int = 72
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    layer_scale_initial_scale: float = 0.01
    attention_bias: bool = False
    hidden_act: str = "silu"
    max_position_embeddings: int = 8000
    num_quantizers: int = 16
    num_semantic_quantizers: int = 1
    semantic_codebook_size: int = 4096  # in the file, unused by the code: both groups have 2048 entries
    vector_quantization_hidden_dimension: int = 512
    upsample_rates: list[int] = field(default_factory=lambda: [8, 5, 4, 3])
    upsampling_ratios: list[int] = field(default_factory=lambda: [2, 2])
    attention_dropout: float = 0.0

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsample_rates) * math.prod(self.upsampling_ratios)

    @classmethod
    def from_dict(cls, cfg: dict) -> "Code2WavConfig":
        known = cls.__dataclass_fields__
        out = cls(**{k: v for k, v in cfg.items() if k in known})
        out.upsample_rates, out.upsampling_ratios = list(out.upsample_rates), list(out.upsampling_ratios)
        if out.hidden_act != "silu":
            raise CodecConfigError(f"decoder_config.hidden_act {out.hidden_act!r}: only silu is supported")
        return out


@dataclass
class CodecEncoderConfig:
    """`encoder_config`: transformers' MimiConfig. Defaults = the released codec (qwen3_tts.md §1.6)."""

    sampling_rate: int = 24000
    frame_rate: float = 12.5
    audio_channels: int = 1
    hidden_size: int = 512
    num_filters: int = 64
    num_residual_layers: int = 1
    upsampling_ratios: list[int] = field(default_factory=lambda: [8, 6, 5, 4])
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    use_causal_conv: bool = True
    pad_mode: str = "constant"
    compress: int = 2
    trim_right_ratio: float = 1.0
    codebook_size: int = 2048
    codebook_dim: int = 256
    num_quantizers: int = 32
    use_conv_shortcut: bool = False
    vector_quantization_hidden_dimension: int = 256
    num_semantic_quantizers: int = 1
    upsample_groups: int = 512
    num_hidden_layers: int = 8
    intermediate_size: int = 2048
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int = 64
    hidden_act: str = "gelu"
    max_position_embeddings: int = 8000
    norm_eps: float = 1e-5
    use_cache: bool = False
    rope_theta: float = 10000.0
    sliding_window: int = 250
    layer_scale_initial_scale: float = 0.01
    attention_bias: bool = False

    @property
    def hop_length(self) -> int:
        return math.prod(self.upsampling_ratios)

    @property
    def downsample_stride(self) -> int:
        # Mimi: SEANet runs at sampling_rate / hop (25 Hz); one strided conv brings it to frame_rate.
        return int(self.sampling_rate / self.hop_length / self.frame_rate)

    @classmethod
    def from_dict(cls, cfg: dict) -> "CodecEncoderConfig":
        cfg = dict(cfg)
        if "_frame_rate" in cfg:  # how MimiConfig serialises frame_rate
            cfg.setdefault("frame_rate", cfg.pop("_frame_rate"))
        known = cls.__dataclass_fields__
        out = cls(**{k: v for k, v in cfg.items() if k in known})
        out.upsampling_ratios = list(out.upsampling_ratios)
        if not out.use_causal_conv or out.use_conv_shortcut or out.hidden_act != "gelu" or out.audio_channels != 1:
            raise CodecConfigError("encoder_config: only the causal, mono, GELU Mimi encoder of Qwen3-TTS is supported")
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["_frame_rate"] = d.pop("frame_rate")
        d.update(model_type="mimi", initializer_range=0.02, use_streaming=False, attention_dropout=0.0)
        return dict(sorted(d.items()))


@dataclass
class CodecConfig:
    decoder: Code2WavConfig = field(default_factory=Code2WavConfig)
    encoder: CodecEncoderConfig = field(default_factory=CodecEncoderConfig)
    encoder_valid_num_quantizers: int = NUM_CODE_GROUPS  # Mimi has 32 codebooks; Qwen3-TTS keeps the first 16
    input_sample_rate: int = 24000
    output_sample_rate: int = 24000
    encode_downsample_rate: int = SAMPLES_PER_FRAME
    decode_upsample_rate: int = SAMPLES_PER_FRAME

    @classmethod
    def from_dict(cls, cfg: dict) -> "CodecConfig":
        if cfg.get("model_type") != CODEC_MODEL_TYPE:
            raise CodecConfigError(f"not a Qwen3-TTS 12 Hz codec config (model_type={cfg.get('model_type')!r}, "
                                   f"expected {CODEC_MODEL_TYPE!r})")
        scalars = ("encoder_valid_num_quantizers", "input_sample_rate", "output_sample_rate",
                   "encode_downsample_rate", "decode_upsample_rate")
        out = cls(decoder=Code2WavConfig.from_dict(cfg.get("decoder_config") or {}),
                  encoder=CodecEncoderConfig.from_dict(cfg.get("encoder_config") or {}),
                  **{k: int(cfg[k]) for k in scalars if k in cfg})
        if out.decoder.samples_per_frame != out.decode_upsample_rate:
            raise CodecConfigError(f"decoder upsamples by {out.decoder.samples_per_frame}, "
                                   f"config says decode_upsample_rate {out.decode_upsample_rate}")
        return out

    @classmethod
    def from_dir(cls, codec_dir: Path) -> "CodecConfig":
        return cls.from_dict(read_json(Path(codec_dir) / "config.json"))

    def to_dict(self) -> dict:
        """The real file's schema (what transformers 4.57 `save_pretrained` writes for this codec)."""
        dec = asdict(self.decoder)
        dec["model_type"] = ""
        return {
            "architectures": ["Qwen3TTSTokenizerV2Model"],
            "decode_upsample_rate": self.decode_upsample_rate,
            "decoder_config": dict(sorted(dec.items())),
            "dtype": "float32",
            "encode_downsample_rate": self.encode_downsample_rate,
            "encoder_config": self.encoder.to_dict(),
            "encoder_valid_num_quantizers": self.encoder_valid_num_quantizers,
            "input_sample_rate": self.input_sample_rate,
            "model_type": CODEC_MODEL_TYPE,
            "output_sample_rate": self.output_sample_rate,
            "transformers_version": "4.57.3",
        }
