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


def test_encoder_layers_through_the_graphs_padded_buffers_equal_the_eager_layers():
    # on CPU the graph path runs eagerly over the same padded buffers: windows padded to a power of two, widths to 32,
    # 64 or the full window, keys past each window's length masked
    torch.manual_seed(0)
    cfg = AudioEncoderConfig(d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32,
                             output_dim=8, downsample_hidden_size=4)
    enc = Qwen3ASRAudioEncoder(cfg).eval()
    graphed = Qwen3ASRAudioEncoder(cfg).eval()
    graphed.load_state_dict(enc.state_dict())
    graphed.use_layer_graphs(max_windows=4, capture=False)
    bursts = [[torch.randn(128, 300)],  # one window of 39 tokens: width 64, 1 window
              [torch.randn(128, n) for n in (300, 80, 137)],  # 3 windows padded to 4
              [torch.randn(128, 930)],  # two windows, one of the full 104 tokens
              [torch.randn(128, 300) for _ in range(5)]]  # more windows than any bucket: eager
    with torch.no_grad():
        for feats in bursts:
            for ours, ref in zip(graphed(feats), enc(feats)):
                torch.testing.assert_close(ours, ref, atol=1e-5, rtol=0)
    assert graphed.layer_graphs.counts == [1, 2, 4] and graphed.layer_graphs.widths == [32, 64, 104]

