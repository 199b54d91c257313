"""Qwen3-TTS checkpoint layout: tiny writer file set and key names, preset configs against the real
architecture (key counts and parameter counts of the released 1.7B / 0.6B, qwen3_tts.md §1.1, §4)."""

import json
import re

import pytest
import torch
from safetensors import safe_open

from aura_omni.models.qwen3_tts.checkpoint_config import GenerationDefaults, Qwen3TTSConfig, TTSConfigError
from aura_omni.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig
from aura_omni.models.qwen3_tts.talker import Talker
from aura_omni.stages.tts import PRESETS_DIR
from aura_omni.testing.tiny_tts import tiny_config, write_tiny_tts

# Key names of the real checkpoints with the layer index replaced by N (from a meta instantiation of
# qwen-tts 0.1.1's Qwen3TTSForConditionalGeneration; 1.7B; the 0.6B lacks small_to_mtp_projection).
LAYER = ["input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
         "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
         "self_attn.k_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]
REAL_TALKER_KEYS = (
    {f"talker.model.layers.N.{k}" for k in LAYER}
    | {"talker.model.norm.weight", "talker.model.codec_embedding.weight", "talker.model.text_embedding.weight",
       "talker.text_projection.linear_fc1.weight", "talker.text_projection.linear_fc1.bias",
       "talker.text_projection.linear_fc2.weight", "talker.text_projection.linear_fc2.bias", "talker.codec_head.weight",
       "talker.code_predictor.model.norm.weight", "talker.code_predictor.small_to_mtp_projection.weight",
       "talker.code_predictor.small_to_mtp_projection.bias"}
    | {f"talker.code_predictor.model.layers.N.{k}" for k in LAYER}
    | {f"talker.code_predictor.model.codec_embedding.{i}.weight" for i in range(15)}
    | {f"talker.code_predictor.lm_head.{i}.weight" for i in range(15)})
# Parameter counts per group of the real checkpoints (meta instantiation of qwen-tts 0.1.1).
REAL_PARAMS = {
    "1.7B-Base": {"talker.model.layers": 1409408000, "talker.model": 317458432, "talker.text_projection": 8392704,
                  "talker.codec_head": 6291456, "talker.code_predictor.model.layers": 78654720,
                  "talker.code_predictor.model": 62915584, "talker.code_predictor.lm_head": 31457280,
                  "talker.code_predictor.small_to_mtp_projection": 2098176, "speaker_encoder.blocks": 2558656,
                  "speaker_encoder.mfa": 2360832, "speaker_encoder.asp": 788096, "speaker_encoder.fc": 6293504,
                  "keys": 480},
    "0.6B-Base": {"talker.model.layers": 440466432, "talker.model": 314311680, "talker.text_projection": 6294528,
                  "talker.codec_head": 3145728, "talker.code_predictor.model.layers": 78654720,
                  "talker.code_predictor.model": 31458304, "talker.code_predictor.lm_head": 31457280,
                  "speaker_encoder.blocks": 2558656, "speaker_encoder.mfa": 2360832, "speaker_encoder.asp": 788096,
                  "speaker_encoder.fc": 3146752, "keys": 478},
}


def _normalise(key: str) -> str:
    return re.sub(r"\.layers\.\d+\.", ".layers.N.", key)


def test_tiny_writer_has_the_real_file_set_and_key_names(tmp_path):
    d = write_tiny_tts(tmp_path / "cv", "custom_voice", with_codec=False)
    assert {p.name for p in d.iterdir()} == {"config.json", "generation_config.json", "model.safetensors", "vocab.json",
                                             "merges.txt", "tokenizer_config.json", "preprocessor_config.json"}
    with safe_open(str(d / "model.safetensors"), "pt") as f:
        keys = {_normalise(k) for k in f.keys()}
    assert keys == REAL_TALKER_KEYS
    gen = json.loads((d / "generation_config.json").read_text())
    assert gen == {"do_sample": True, "max_new_tokens": 8192, "repetition_penalty": 1.05, "subtalker_dosample": True,
                   "subtalker_temperature": 0.9, "subtalker_top_k": 50, "subtalker_top_p": 1.0, "temperature": 0.9,
                   "top_k": 50, "top_p": 1.0}
    tok = json.loads((d / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert len(tok) == 33
    assert [tok[str(i)]["content"] for i in range(151669, 151676)] == [
        "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>",
        "<|audio_pad|>"]


def test_config_parsing_reads_ids_speakers_and_languages():
    cfg = Qwen3TTSConfig.from_dict(tiny_config("custom_voice"))
    assert cfg.tts_model_type == "custom_voice" and cfg.speaker_encoder is None
    assert len(cfg.speakers) == 9 and cfg.talker.spk_is_dialect["dylan"] == "beijing_dialect"
    assert cfg.languages == ["auto", "chinese", "english", "german", "italian", "portuguese", "spanish", "japanese",
                             "korean", "french", "russian"]
    assert cfg.talker.backbone.mrope_section is None  # identical t/h/w streams -> 1-D RoPE
    assert (cfg.tts_pad_token_id, cfg.tts_bos_token_id, cfg.tts_eos_token_id) == (151671, 151672, 151673)
    assert cfg.talker.codec_eos_token_id == 2150 and cfg.supports_instruct
    small = tiny_config("custom_voice") | {"tts_model_size": "0b6"}
    assert not Qwen3TTSConfig.from_dict(small).supports_instruct
    with pytest.raises(TTSConfigError):
        Qwen3TTSConfig.from_dict(tiny_config("base") | {"tts_model_type": "tts"})
    with pytest.raises(TTSConfigError):
        Qwen3TTSConfig.from_dict(tiny_config("base") | {"tokenizer_type": "qwen3_tts_tokenizer_25hz"})


def test_generation_defaults_fall_back_like_qwen_tts():
    assert GenerationDefaults.from_dict({}).max_new_tokens == 2048
    assert GenerationDefaults.from_dict({"max_new_tokens": 8192, "top_k": 30}).top_k == 30


@pytest.mark.parametrize("name", ["1.7B-Base", "0.6B-Base"])
def test_presets_build_the_real_architecture(name):
    raw = json.loads((PRESETS_DIR / f"Qwen__Qwen3-TTS-12Hz-{name}" / "config.json").read_text())
    cfg = Qwen3TTSConfig.from_dict(raw)
    with torch.device("meta"):
        talker = Talker(cfg.talker)
        speaker = SpeakerEncoder(SpeakerEncoderConfig.from_dict(cfg.speaker_encoder))
    params = {f"talker.{k}": v for k, v in talker.named_parameters()}
    params.update({f"speaker_encoder.{k}": v for k, v in speaker.named_parameters()})
    want = REAL_PARAMS[name]
    assert len(params) == want["keys"]
    for group, count in want.items():
        if group == "keys":
            continue
        got = sum(p.numel() for k, p in params.items()
                  if k.startswith(group + ".") and not any(k.startswith(g + ".") for g in want if len(g) > len(group)
                                                           and g.startswith(group + ".")))
        assert got == count, group


@pytest.mark.parametrize("name,kind,speakers", [("1.7B-CustomVoice", "custom_voice", 9), ("1.7B-VoiceDesign", "voice_design", 0),
                                                ("0.6B-CustomVoice", "custom_voice", 9)])
def test_other_presets_parse(name, kind, speakers):
    cfg = Qwen3TTSConfig.from_file(PRESETS_DIR / f"Qwen__Qwen3-TTS-12Hz-{name}" / "config.json")
    assert cfg.tts_model_type == kind and len(cfg.speakers) == speakers and cfg.speaker_encoder is None
    assert cfg.supports_instruct == name.startswith("1.7B")
