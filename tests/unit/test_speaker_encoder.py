"""ECAPA speaker encoder: log-mel front end against a plain numpy STFT, resampling, batching, config, errors."""

import numpy as np
import pytest
import torch

from aura_omni.media.audio import mel_filterbank, resample
from aura_omni.models.qwen3_tts.speaker_encoder import (SpeakerAudioError, SpeakerEncoder, SpeakerEncoderConfig,
                                                        speaker_mel)
from aura_omni.testing.tiny_codec import tiny_speaker_encoder_config, tiny_speaker_encoder_weights


def _tone(seconds: float, sr: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 1330 * t)
            + 0.01 * rng.standard_normal(t.shape)).astype(np.float32)


@pytest.fixture(scope="module")
def encoder() -> SpeakerEncoder:
    cfg, weights = tiny_speaker_encoder_weights(enc_dim=64, seed=0)
    model = SpeakerEncoder(SpeakerEncoderConfig.from_dict(cfg))
    model.load_state_dict({k.removeprefix("speaker_encoder."): v for k, v in weights.items()})
    return model.eval()


def test_log_mel_matches_numpy_stft():
    """Reflect pad 384, periodic Hann 1024, hop 256, no centring, sqrt(|X|^2 + 1e-9), slaney mels, log(max(., 1e-5))."""
    wav = _tone(0.5, 24000)
    y = np.pad(wav.astype(np.float64), 384, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(1024) / 1024)
    frames = np.stack([y[i:i + 1024] * window for i in range(0, len(y) - 1024 + 1, 256)])
    spec = np.fft.rfft(frames, axis=1)
    mag = np.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
    expect = np.log(np.maximum(mag @ mel_filterbank(24000, 1024, 128, 0.0, 12000).T.astype(np.float64), 1e-5))
    got = speaker_mel(wav, 24000)
    assert got.shape == (1, expect.shape[0], 128)
    assert np.abs(got[0].numpy() - expect).max() < 1e-3


def test_speaker_embedding_resamples_to_24k_first(encoder):
    wav16 = _tone(1.0, 16000, seed=1)
    at16 = encoder.speaker_embedding(wav16, 16000)
    at24 = encoder.speaker_embedding(resample(wav16, 16000, 24000), 24000)
    assert at16.shape == (64,)
    assert torch.allclose(at16, at24, atol=1e-6)


def test_batch_rows_equal_single_rows(encoder):
    a, b = speaker_mel(_tone(0.6, 24000, 2), 24000), speaker_mel(_tone(0.6, 24000, 3), 24000)
    with torch.no_grad():
        both = encoder(torch.cat([a, b]))
        assert torch.allclose(both[0], encoder(a)[0], atol=1e-5)
        assert torch.allclose(both[1], encoder(b)[0], atol=1e-5)
    assert not torch.allclose(both[0], both[1], atol=1e-3)  # different voices, different x-vectors


def test_real_config_defaults_give_the_released_architecture():
    """Real Base configs carry only enc_dim and sample_rate; the rest are qwen-tts defaults."""
    cfg = SpeakerEncoderConfig.from_dict({"enc_dim": 2048, "sample_rate": 24000})
    assert cfg.enc_channels == [512, 512, 512, 512, 1536] and cfg.enc_attention_channels == 128
    with torch.device("meta"):
        model = SpeakerEncoder(cfg)
    assert model.fc.weight.shape == (2048, 3072, 1)
    assert model.blocks[1].res2net_block.blocks[0].conv.weight.shape == (64, 64, 3)


def test_tiny_weights_have_checkpoint_key_names():
    cfg, weights = tiny_speaker_encoder_weights(enc_dim=64)
    assert cfg == tiny_speaker_encoder_config(64).to_dict()
    assert {"speaker_encoder.blocks.0.conv.weight", "speaker_encoder.blocks.3.se_block.conv2.bias",
            "speaker_encoder.mfa.conv.weight", "speaker_encoder.asp.tdnn.conv.weight", "speaker_encoder.asp.conv.bias",
            "speaker_encoder.fc.weight"} <= set(weights)
    again = tiny_speaker_encoder_weights(enc_dim=64)[1]
    assert all(torch.equal(weights[k], again[k]) for k in weights)  # deterministic


@pytest.mark.parametrize("wav, sr", [
    (np.zeros(100, dtype=np.float32), 24000),  # shorter than the reflect padding
    (np.zeros((2, 24000), dtype=np.float32), 24000),  # stereo
    (np.full(24000, np.nan, dtype=np.float32), 24000),
])
def test_unusable_audio_raises(encoder, wav, sr):
    with pytest.raises(SpeakerAudioError):
        encoder.speaker_embedding(wav, sr)


def test_config_rejects_other_mel_sizes():
    with pytest.raises(ValueError):
        SpeakerEncoderConfig.from_dict({"mel_dim": 80})
