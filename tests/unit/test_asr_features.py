"""Qwen3-ASR front end and encoder shapes (the values themselves are checked in tests/parity)."""

import numpy as np
import pytest
import torch

from aura_omni.media.asr_features import MIN_SAMPLES, log_mel_spectrogram, num_frames, pad_to_min_length
from aura_omni.media.audio import AudioDecodeError
from aura_omni.models.qwen3_asr_encoder import AudioEncoderConfig, Qwen3ASRAudioEncoder, num_audio_tokens


@pytest.mark.parametrize("seconds, tokens", [(0.5, 7), (1, 13), (1.37, 18), (2, 26), (8, 104), (8.5, 111), (30, 390), (60, 780)])
def test_audio_token_count_formula(seconds, tokens):
    # counts measured with the reference processor (shared reference doc, section 1.3)
    assert num_audio_tokens(num_frames(int(seconds * 16000))) == tokens


def test_features_shape_and_silence_is_finite():
    feats = log_mel_spectrogram(np.zeros(32000, dtype=np.float32))
    assert feats.shape == (128, 200)
    assert torch.isfinite(feats).all() and torch.allclose(feats, torch.full_like(feats, -1.5))


def test_short_clips_padded_to_half_a_second():
    assert pad_to_min_length(np.ones(100, dtype=np.float32)).shape == (MIN_SAMPLES,)
    assert pad_to_min_length(np.ones(9000, dtype=np.float32)).shape == (9000,)


def test_too_short_or_multichannel_input_is_a_decode_error():
    with pytest.raises(AudioDecodeError):
        log_mel_spectrogram(np.zeros(100, dtype=np.float32))
    with pytest.raises(AudioDecodeError):
        log_mel_spectrogram(np.zeros((2, 16000), dtype=np.float32))


def test_encoder_batch_equals_each_clip_alone():
    torch.manual_seed(0)
    cfg = AudioEncoderConfig(d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
                             output_dim=8, downsample_hidden_size=4)
    enc = Qwen3ASRAudioEncoder(cfg).eval()
    feats = [torch.randn(128, n) for n in (50, 137, 930)]  # 930 frames: two attention windows
    with torch.no_grad():
        together = enc(feats)
        alone = [enc([f])[0] for f in feats]
    for t, a, f in zip(together, alone, feats):
        assert t.shape == (num_audio_tokens(f.shape[1]), 8)
        torch.testing.assert_close(t, a, atol=1e-5, rtol=0)
