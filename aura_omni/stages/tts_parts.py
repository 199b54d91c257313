"""The parts of a Qwen3-TTS checkpoint beside the Talker, each loaded real or, for `--load-format dummy`, as the real
architecture with random weights: the codec's decoder (Code2Wav) and encoder, the speaker encoder (its tokenizer:
models/tokenizer.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from aura_omni.models.loader import init_dummy, iter_tensors, load_into
from aura_omni.models.qwen3_tts.checkpoint_config import Qwen3TTSConfig


def code2wav_device(code2wav) -> torch.device:
    return next(code2wav.parameters()).device


def load_code2wav(codec_dir: Path, device, dummy: bool):
    from aura_omni.models.qwen3_tts.code2wav import Code2Wav
    from aura_omni.models.qwen3_tts.codec_config import CodecConfig

    if not dummy:
        return Code2Wav.from_codec_dir(codec_dir, device=device)
    cfg = CodecConfig.from_dir(codec_dir) if (codec_dir / "config.json").exists() else CodecConfig()
    model = Code2Wav(cfg.decoder)
    init_dummy(model)
    return model.to(device).eval()


def load_codec_encoder(codec_dir: Path, device, dummy: bool):
    from aura_omni.models.qwen3_tts.codec_config import CodecConfig
    from aura_omni.models.qwen3_tts.codec_encoder import CodecEncoder

    if not dummy:
        return CodecEncoder.from_codec_dir(codec_dir, device=device)
    cfg = CodecConfig.from_dir(codec_dir) if (codec_dir / "config.json").exists() else CodecConfig()
    model = CodecEncoder(cfg.encoder, cfg.encoder_valid_num_quantizers, cfg.encode_downsample_rate)
    init_dummy(model)
    return model.to(device).eval()


def load_speaker_encoder(ckpt: Path, config: Qwen3TTSConfig, device, dummy: bool):
    from aura_omni.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

    enc = SpeakerEncoder(SpeakerEncoderConfig.from_dict(config.speaker_encoder or {}))
    if dummy:
        init_dummy(enc)
    else:
        load_into(enc, iter_tensors(ckpt, "speaker_encoder."), where=f"{ckpt} speaker_encoder")
    return enc.to(device).eval()  # fp32 like qwen-tts's reference runs; tiny next to the talker
