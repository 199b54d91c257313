"""Qwen3-ASR (Qwen/Qwen3-ASR-1.7B, -0.6B): audio encoder + Qwen3 LM whose `<|audio_pad|>` embeddings
are replaced by the encoder's audio tokens.

What the engine drives (docs/architecture.md "Contracts"):
- `prompts_embeds(prompts, features)` -> inputs_embeds [L_i, H] per prompt, its clip's audio tokens in place
  (`encode_audio(features)`: the audio tokens per clip alone);
- `embed_tokens(ids)` for decode steps, `backbone` (the shared Qwen3Model), `compute_logits(hidden)`.

Positions are plain 1-D RoPE: Qwen3-ASR gives the three MRoPE axes the same sequential position, and
identical t/h/w streams reduce interleaved MRoPE exactly to 1-D RoPE.

Loads the original layout (`thinker.audio_tower.*`, `thinker.model.*`, `thinker.lm_head.weight`, the
last absent when tied as in the 0.6B) and transformers' "-hf" layout (`model.audio_tower.*`,
`model.multi_modal_projector.linear_{1,2}`, `model.language_model.*`, `lm_head.weight`).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from aura_omni.models.loader import (CheckpointError, dummy_config_dir, init_dummy, iter_tensors, load_into, read_json,
                                    resolve_checkpoint)
from aura_omni.models.qwen3 import Qwen3Config, Qwen3Model
from aura_omni.models.qwen3_asr_encoder import AudioEncoderConfig, Qwen3ASRAudioEncoder, sinusoid_table, TOKENS_PER_CHUNK
from aura_omni.layers.device import upload_async
from aura_omni.layers.rotary import RotaryEmbedding

AUDIO_PAD_ID = 151676  # thinker_config.audio_token_id (<|audio_pad|>)
EOS_TOKEN_IDS = (151645, 151643)  # generation_config.json: <|im_end|>, <|endoftext|>


@dataclass
class Qwen3ASRConfig:
    audio: AudioEncoderConfig
    text: Qwen3Config
    vocab_size: int
    tie_word_embeddings: bool
    audio_token_id: int = AUDIO_PAD_ID
    audio_start_token_id: int = 151669
    audio_end_token_id: int = 151670
    support_languages: list[str] = field(default_factory=list)

    @classmethod
    def from_hf(cls, cfg: dict) -> "Qwen3ASRConfig":
        """From config.json of either the original layout (`thinker_config`) or transformers' flat "-hf" layout."""
        if cfg.get("model_type") != "qwen3_asr":
            raise CheckpointError(f"not a Qwen3-ASR config (model_type {cfg.get('model_type')!r}, expected 'qwen3_asr')")
        thinker = cfg.get("thinker_config", cfg)
        audio, text = thinker["audio_config"], thinker["text_config"]
        tie = text.get("tie_word_embeddings", thinker.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
        return cls(
            audio=AudioEncoderConfig.from_hf(audio),
            text=Qwen3Config.from_hf(text),
            vocab_size=text["vocab_size"],
            tie_word_embeddings=bool(tie),
            audio_token_id=thinker.get("audio_token_id", AUDIO_PAD_ID),
            audio_start_token_id=thinker.get("audio_start_token_id", 151669),
            audio_end_token_id=thinker.get("audio_end_token_id", 151670),
            support_languages=list(cfg.get("support_languages", [])),
        )


class Qwen3ASR(nn.Module):
    def __init__(self, cfg: Qwen3ASRConfig):
        super().__init__()
        self.config = cfg
        self.audio_tower = Qwen3ASRAudioEncoder(cfg.audio)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.text.hidden_size)
        self.backbone = Qwen3Model(cfg.text)
        self.lm_head = nn.Linear(cfg.text.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    # ---- key names ---------------------------------------------------------------------------
    @staticmethod
    def original_key(name: str) -> str:
        """Our parameter name -> its name in Qwen/Qwen3-ASR-* (original layout)."""
        if name.startswith("backbone."):
            return "thinker.model." + name.removeprefix("backbone.")
        if name.startswith("embed_tokens."):
            return "thinker.model." + name
        return "thinker." + name

    @staticmethod
    def hf_key(name: str) -> str:
        """Our parameter name -> its name in transformers' Qwen3ASRForConditionalGeneration ("-hf" layout)."""
        for ours, theirs in (("audio_tower.proj1.", "model.multi_modal_projector.linear_1."),
                             ("audio_tower.proj2.", "model.multi_modal_projector.linear_2."),
                             ("audio_tower.", "model.audio_tower."),
                             ("embed_tokens.", "model.language_model.embed_tokens."),
                             ("backbone.", "model.language_model.")):
            if name.startswith(ours):
                return theirs + name.removeprefix(ours)
        return name

    # ---- loading -----------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, model: str | Path, *, dtype: torch.dtype = torch.bfloat16,
                        device: torch.device | str = "cpu", load_format: str = "auto") -> "Qwen3ASR":
        """Local dir or HF repo id. load_format "dummy": random weights from presets/<org>__<name>/config.json."""
        if load_format == "dummy":
            cfg = read_json(preset_config_path(model))
        elif load_format == "auto":
            ckpt = resolve_checkpoint(model)
            cfg = read_json(ckpt / "config.json")
        else:
            raise ValueError(f"load_format must be 'auto' or 'dummy', got {load_format!r}")
        with torch.device("meta"):
            net = cls(Qwen3ASRConfig.from_hf(cfg))
        net = net.to_empty(device=device).to(dtype)
        if net.config.tie_word_embeddings:  # to_empty keeps the tie, but be explicit
            net.lm_head.weight = net.embed_tokens.weight
        net._reset_buffers()
        net.requires_grad_(False)  # inference only: plain tensors flow between stages and the engine
        if load_format == "dummy":
            init_dummy(net)
        else:
            net.load_checkpoint(ckpt)
        return net.eval()

    def load_checkpoint(self, ckpt: Path) -> None:
        names = {self.original_key(n): n for n, _ in self.named_parameters()}
        names.update({self.hf_key(n): n for n, _ in self.named_parameters()})
        if self.config.tie_word_embeddings:  # a tied checkpoint may still carry a copy of the head
            names.pop("thinker.lm_head.weight", None), names.pop("lm_head.weight", None)
        skip = ("talker.", "code2wav.", "thinker.lm_head.", "lm_head.") if self.config.tie_word_embeddings else ("talker.", "code2wav.")
        renamed = ((names.get(k, k), t) for k, t in iter_tensors(ckpt))
        load_into(self, renamed, where=f"Qwen3-ASR {ckpt}", ignore=skip)

    def _reset_buffers(self) -> None:
        """Recompute the non-persistent tables (fp32) after building on the meta device."""
        dev = self.embed_tokens.weight.device
        t = self.config.text
        self.backbone.rotary = RotaryEmbedding(t.head_dim, t.rope_theta, t.mrope_section).to(dev)
        self.audio_tower.positions = sinusoid_table(TOKENS_PER_CHUNK, self.config.audio.d_model).to(dev)

    # ---- what the engine drives --------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @torch.inference_mode()
    def encode_audio(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        """Log-mel features [128, L_i] per clip -> audio tokens [num_audio_tokens(L_i), H] per clip."""
        return self.audio_tower([f.to(self.device) for f in features])

    @torch.inference_mode()
    def prompts_embeds(self, prompts: list[list[int]], features: list[torch.Tensor]) -> list[torch.Tensor]:
        """Prompt ids per clip, each with a run of `<|audio_pad|>` as long as its clip's audio tokens, and the clips'
        log-mel features [128, L_i] -> inputs_embeds [L_i, H] per prompt: the audio encoded and every prompt embedded
        in one pass each, the audio tokens put in place with one index (no host synchronisation, nothing per clip)."""
        audio = self.audio_tower.encode([f if f.device == self.device else f.to(self.device) for f in features])
        flat = [t for ids in prompts for t in ids]
        at = [i for i, t in enumerate(flat) if t == self.config.audio_token_id]
        if len(at) != audio.shape[0]:
            raise ValueError(f"prompts have {len(at)} <|audio_pad|> tokens but the audio encodes to {audio.shape[0]}")
        index = upload_async(torch.tensor(flat + at, dtype=torch.long), self.device)
        ids, audio_at = index.split([len(flat), len(at)])
        embeds = self.embed_tokens(ids)
        embeds.index_copy_(0, audio_at, audio.to(embeds.dtype))
        return list(embeds.split([len(ids) for ids in prompts]))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.backbone.logits(hidden, self.lm_head.weight)


def preset_config_path(model: str | Path) -> Path:
    """Config for --load-format dummy: a local dir's config.json, else presets/<org>__<name>/config.json."""
    return dummy_config_dir(model) / "config.json"


def load_generation_eos(ckpt: Path | None) -> tuple[int, ...]:
    """EOS ids from generation_config.json when present, else the released ones."""
    path = None if ckpt is None else Path(ckpt) / "generation_config.json"
    if path is None or not path.exists():
        return EOS_TOKEN_IDS
    eos = json.loads(path.read_text()).get("eos_token_id", list(EOS_TOKEN_IDS))
    return tuple(eos) if isinstance(eos, list) else (eos,)
