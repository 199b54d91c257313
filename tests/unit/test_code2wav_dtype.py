"""Code2Wav in float16 (configs/qwen3_tts_128.yaml's choice) against float32, qwen-tts's and vLLM-Omni's precision: the
bound docs/benchmarks.md states, on the tiny codec, streamed as the stage decodes."""

import math

import pytest
import torch

from aura_omni.models.qwen3_tts.code2wav import Code2Wav
from aura_omni.testing.tiny_codec import write_tiny_codec

MIN_SNR_DB = 50.0  # 56 dB here; on the H200, full size with random weights: max error 5.8e-3 on a waveform within ±1


@pytest.fixture(scope="module")
def codec_dir(tmp_path_factory):
    return write_tiny_codec(tmp_path_factory.mktemp("codec"))


def _streamed(code2wav: Code2Wav, codes: torch.Tensor, window: int) -> torch.Tensor:
    state = code2wav.new_stream()
    return torch.cat([code2wav.decode_stream(state, codes[i:i + window]) for i in range(0, codes.shape[0], window)])


def test_float16_decodes_within_the_stated_bound_of_float32(codec_dir):
    full = Code2Wav.from_codec_dir(codec_dir)
    half = Code2Wav.from_codec_dir(codec_dir).cast(torch.float16)
    codes = torch.randint(0, 2048, (100, 16), generator=torch.Generator().manual_seed(0))  # past the 72-frame window
    with torch.no_grad():
        want, got = _streamed(full, codes, 25), _streamed(half, codes, 25)
    assert got.dtype == torch.float16 and got.shape == want.shape
    assert torch.isfinite(got).all()
    error = got.float() - want
    snr_db = 10 * math.log10(want.square().mean().item() / error.square().mean().item())
    assert snr_db >= MIN_SNR_DB, snr_db
    assert error.abs().max().item() < 1e-2
    # the RoPE frequencies stay float32: positions run into the thousands of frames
    assert half.pre_transformer.rotary.inv_freq.dtype == torch.float32
