"""Qwen3-TTS 12 Hz checkpoint configuration: `config.json` and `generation_config.json` as dataclasses.

Field names follow the real files (Qwen/Qwen3-TTS-12Hz-{1.7B,0.6B}-{Base,CustomVoice,VoiceDesign}).
The talker's `rope_scaling` declares interleaved MRoPE, but its three position streams are always
identical, so the talker runs plain 1-D RoPE (`mrope_section` is dropped on purpose).
"""

from dataclasses import dataclass, field, fields
from pathlib import Path

from aura_omni.models.loader import read_json
from aura_omni.models.qwen3 import Qwen3Config

MODEL_TYPES = ("base", "custom_voice", "voice_design")


class TTSConfigError(ValueError):
    """config.json is not a Qwen3-TTS 12 Hz checkpoint config."""


def _backbone(cfg: dict) -> Qwen3Config:
    backbone = Qwen3Config.from_hf(cfg)
    backbone.mrope_section = None  # t/h/w streams identical -> exact 1-D RoPE
    return backbone


@dataclass
class CodePredictorConfig:
    backbone: Qwen3Config
    vocab_size: int = 2048  # entries per acoustic codebook
    num_code_groups: int = 16

    @classmethod
    def from_dict(cls, cfg: dict) -> "CodePredictorConfig":
        return cls(backbone=_backbone(cfg), vocab_size=cfg.get("vocab_size", 2048),
                   num_code_groups=cfg.get("num_code_groups", 16))


@dataclass
class TalkerConfig:
    backbone: Qwen3Config
    code_predictor: CodePredictorConfig
    vocab_size: int = 3072  # codec vocabulary: 0..2047 codes, then special/language/speaker ids
    text_vocab_size: int = 151936
    text_hidden_size: int = 2048
    num_code_groups: int = 16
    codec_pad_id: int = 2148
    codec_bos_id: int = 2149
    codec_eos_token_id: int = 2150
    codec_think_id: int = 2154
    codec_nothink_id: int = 2155
    codec_think_bos_id: int = 2156
    codec_think_eos_id: int = 2157
    codec_language_id: dict[str, int] = field(default_factory=dict)
    spk_id: dict[str, int] = field(default_factory=dict)
    spk_is_dialect: dict[str, str | bool] = field(default_factory=dict)

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    @classmethod
    def from_dict(cls, cfg: dict) -> "TalkerConfig":
        if "code_predictor_config" not in cfg:
            raise TTSConfigError("talker_config has no code_predictor_config")
        names = ("vocab_size", "text_vocab_size", "text_hidden_size", "num_code_groups", "codec_pad_id",
                 "codec_bos_id", "codec_eos_token_id", "codec_think_id", "codec_nothink_id",
                 "codec_think_bos_id", "codec_think_eos_id")
        scalars = {k: cfg[k] for k in names if k in cfg}
        # Speaker ids: the real files list them in (mostly) lower case; lookups are case-insensitive.
        spk_id = {k.lower(): int(v) for k, v in (cfg.get("spk_id") or {}).items()}
        dialect = {k.lower(): v for k, v in (cfg.get("spk_is_dialect") or {}).items()}
        langs = {k.lower(): int(v) for k, v in (cfg.get("codec_language_id") or {}).items()}
        return cls(backbone=_backbone(cfg), code_predictor=CodePredictorConfig.from_dict(cfg["code_predictor_config"]),
                   codec_language_id=langs, spk_id=spk_id, spk_is_dialect=dialect, **scalars)


@dataclass
class Qwen3TTSConfig:
    talker: TalkerConfig
    tts_model_type: str  # "base" | "custom_voice" | "voice_design"
    tts_model_size: str  # "1b7" | "0b6"
    tokenizer_type: str = "qwen3_tts_tokenizer_12hz"
    speaker_encoder: dict | None = None  # Base only: {"enc_dim": H, "sample_rate": 24000, ...}
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    assistant_token_id: int = 77091
    tts_pad_token_id: int = 151671  # <tts_pad>
    tts_bos_token_id: int = 151672  # <tts_text_bos>
    tts_eos_token_id: int = 151673  # <tts_text_eod>

    @property
    def languages(self) -> list[str]:
        """What a request may name: "auto" plus every non-dialect language of the codec vocabulary."""
        return ["auto"] + [k for k in self.talker.codec_language_id if "dialect" not in k]

    @property
    def speakers(self) -> list[str]:
        return list(self.talker.spk_id)

    @property
    def supports_instruct(self) -> bool:
        # qwen-tts drops CustomVoice instructions when `tts_model_size in "0b6"` (a substring test).
        return not (isinstance(self.tts_model_size, str) and self.tts_model_size in "0b6")

    @classmethod
    def from_dict(cls, cfg: dict) -> "Qwen3TTSConfig":
        if cfg.get("model_type") not in (None, "qwen3_tts") or "talker_config" not in cfg:
            raise TTSConfigError(f"not a Qwen3-TTS config (model_type={cfg.get('model_type')!r})")
        kind = cfg.get("tts_model_type")
        if kind not in MODEL_TYPES:
            raise TTSConfigError(f"tts_model_type {kind!r} is not one of {MODEL_TYPES}")
        tokenizer_type = cfg.get("tokenizer_type", "qwen3_tts_tokenizer_12hz")
        if tokenizer_type != "qwen3_tts_tokenizer_12hz":
            raise TTSConfigError(f"tokenizer_type {tokenizer_type!r}: only the 12 Hz tokenizer is supported")
        ids = ("im_start_token_id", "im_end_token_id", "assistant_token_id", "tts_pad_token_id",
               "tts_bos_token_id", "tts_eos_token_id")
        speaker = cfg.get("speaker_encoder_config") if kind == "base" else None
        return cls(talker=TalkerConfig.from_dict(cfg["talker_config"]), tts_model_type=kind,
                   tts_model_size=cfg.get("tts_model_size") or "", tokenizer_type=tokenizer_type,
                   speaker_encoder=dict(speaker) if speaker is not None else ({} if kind == "base" else None),
                   **{k: int(cfg[k]) for k in ids if k in cfg})

    @classmethod
    def from_file(cls, path: Path) -> "Qwen3TTSConfig":
        return cls.from_dict(read_json(Path(path)))


@dataclass
class GenerationDefaults:
    """generation_config.json of every released checkpoint (qwen3_tts.md §3). qwen-tts falls back to these
    values key by key when the file lacks one, except max_new_tokens, whose fallback is 2048."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048

    @classmethod
    def from_dict(cls, cfg: dict) -> "GenerationDefaults":
        return cls(**{f.name: cfg.get(f.name, f.default) for f in fields(GenerationDefaults)})

    @classmethod
    def from_dir(cls, ckpt: Path) -> "GenerationDefaults":
        path = Path(ckpt) / "generation_config.json"
        return cls.from_dict(read_json(path) if path.exists() else {})
