"""The codec directory (tiny writer, real preset config) and the codec encoder's framing and input errors."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from aura_omni.models.qwen3_tts.code2wav import Code2Wav, CodecInputError
from aura_omni.models.loader import PRESETS_DIR
from aura_omni.models.qwen3_tts.codec_config import CodecConfig, CodecConfigError
from aura_omni.models.qwen3_tts.codec_encoder import CodecEncoder
from aura_omni.testing.tiny_codec import tiny_codec_config, write_tiny_codec


@pytest.fixture(scope="module")
def codec_dir(tmp_path_factory):
    return write_tiny_codec(tmp_path_factory.mktemp("codec"), seed=0)


def test_writer_makes_the_four_real_files_deterministically(codec_dir, tmp_path):
    assert sorted(p.name for p in codec_dir.iterdir()) == [
        "config.json", "configuration.json", "model.safetensors", "preprocessor_config.json"]
    assert json.loads((codec_dir / "preprocessor_config.json").read_text())["feature_extractor_type"] == \
        "EncodecFeatureExtractor"
    again = write_tiny_codec(tmp_path / "again", seed=0)
    with safe_open(str(codec_dir / "model.safetensors"), "pt") as a, \
            safe_open(str(again / "model.safetensors"), "pt") as b:
        assert sorted(a.keys()) == sorted(b.keys())
        assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())
        keys = set(a.keys())
    # real key names on both sides, all 32 Mimi codebooks, the unused RVQ input projections
    assert {"encoder.encoder.layers.0.conv.weight", "encoder.encoder_transformer.layers.1.mlp.fc2.weight",
            "encoder.downsample.conv.weight",
            "encoder.quantizer.acoustic_residual_vector_quantizer.layers.30.codebook.embed_sum",
            "encoder.quantizer.semantic_residual_vector_quantizer.layers.0.codebook.initialized",
            "decoder.quantizer.rvq_rest.vq.layers.14._codebook.cluster_usage",
            "decoder.quantizer.rvq_first.input_proj.weight", "decoder.pre_conv.conv.bias",
            "decoder.pre_transformer.layers.1.mlp_layer_scale.scale", "decoder.upsample.1.1.gamma",
            "decoder.decoder.4.block.4.conv2.conv.weight", "decoder.decoder.5.beta",
            "decoder.decoder.6.conv.weight"} <= keys


def test_config_round_trips_through_the_real_schema(codec_dir):
    raw = json.loads((codec_dir / "config.json").read_text())
    assert raw["model_type"] == "qwen3_tts_tokenizer_12hz" and raw["encoder_config"]["_frame_rate"] == 12.5
    assert CodecConfig.from_dict(raw) == tiny_codec_config()
    with pytest.raises(CodecConfigError):
        CodecConfig.from_dict({**raw, "model_type": "mimi"})


def test_preset_is_the_released_codec():
    """56.2M encoder + 114.3M decoder parameters = the 682 MB fp32 file of Qwen3-TTS-Tokenizer-12Hz."""
    cfg = CodecConfig.from_dir(PRESETS_DIR / "Qwen__Qwen3-TTS-Tokenizer-12Hz")
    with torch.device("meta"):
        encoder = CodecEncoder(cfg.encoder, num_codebooks=cfg.encoder.num_quantizers)
        decoder = Code2Wav(cfg.decoder)
    count = lambda m: sum(t.numel() for t in m.state_dict().values())  # noqa: E731
    assert round(count(encoder) / 1e6, 1) == 56.2
    assert round(count(decoder) / 1e6, 1) == 114.3
    assert decoder.samples_per_frame == 1920


@pytest.mark.parametrize("samples", [1, 1919, 1920, 1921, 12345])
def test_encoder_emits_one_frame_per_started_1920_samples(codec_dir, samples):
    encoder = CodecEncoder.from_codec_dir(codec_dir)
    wav = 0.1 * np.random.default_rng(samples).standard_normal(samples).astype(np.float32)
    codes = encoder.encode(wav, 24000)
    assert codes.shape == (-(-samples // 1920), 16) and codes.dtype == torch.long
    assert int(codes.min()) >= 0 and int(codes.max()) < 2048


def test_encoder_is_causal_so_a_prefix_encodes_the_same(codec_dir):
    """The causal encoder's frames depend only on past audio (away from the padded last frame)."""
    encoder = CodecEncoder.from_codec_dir(codec_dir)
    wav = 0.1 * np.random.default_rng(0).standard_normal(19200).astype(np.float32)
    full, prefix = encoder.encode(wav, 24000), encoder.encode(wav[:9600], 24000)
    assert torch.equal(full[:4], prefix[:4])
    assert len({tuple(r) for r in full.tolist()}) > 1  # the tiny codebooks give varied codes


@pytest.mark.parametrize("wav", [np.zeros(0, np.float32), np.zeros((2, 4800), np.float32),
                                 np.array([0.0, np.inf] * 2400, np.float32)])
def test_encoder_refuses_unusable_audio(codec_dir, wav):
    with pytest.raises(CodecInputError):
        CodecEncoder.from_codec_dir(codec_dir).encode(wav, 24000)
