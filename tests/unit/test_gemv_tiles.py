"""The one-row GEMV tiles (layers/triton_gemv.py): the tuned H200 table covers every one-row projection of the
shipped models, and its tiles and the rule for other shapes stay inside what the kernel and an SM can take."""

import json

import pytest
import torch

from aura_omni.layers import triton_gemv
from aura_omni.models.loader import PRESETS_DIR

H200 = "NVIDIA H200"


def _text_configs():
    """(preset/part, text config, has an LM head run by the engine) of every shipped model."""
    for path in sorted(PRESETS_DIR.glob("*/config.json")):
        cfg = json.loads(path.read_text())
        if "text_config" in cfg:  # AURA (Qwen3-VL)
            yield f"{path.parent.name}/lm", cfg["text_config"], True
        if "thinker_config" in cfg:  # Qwen3-ASR
            yield f"{path.parent.name}/lm", cfg["thinker_config"]["text_config"], True
        if "talker_config" in cfg:  # Qwen3-TTS: the codec heads go through the Talker's own sampling
            yield f"{path.parent.name}/talker", cfg["talker_config"], False
            yield f"{path.parent.name}/code_predictor", cfg["talker_config"]["code_predictor_config"], False


def _one_row_shapes(t: dict, lm_head: bool) -> list[tuple[int, int]]:
    hidden, heads, kv = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"]
    head_dim, inter = t.get("head_dim", hidden // heads), t["intermediate_size"]
    shapes = [((heads + 2 * kv) * head_dim, hidden), (hidden, heads * head_dim), (2 * inter, hidden), (hidden, inter)]
    return shapes + ([(t["vocab_size"], hidden)] if lm_head else [])


@pytest.mark.parametrize("model,text,lm_head", [pytest.param(*c, id=c[0]) for c in _text_configs()])
def test_every_one_row_projection_of_the_shipped_models_has_a_tuned_h200_tile(model, text, lm_head):
    tuned = triton_gemv.tuned_tiles(H200)
    missing = [f"{n}x{k}" for n, k in _one_row_shapes(text, lm_head) if (n, k) not in tuned]
    assert not missing, f"{model}: run scripts/bench_gemv.py --rows 1 --sweep --write-table on an H200 for {missing}"


def test_tuned_tiles_are_tiles_the_kernel_takes():
    for (n, k), (block_n, block_k, warps, stages) in triton_gemv.tuned_tiles(H200).items():
        assert block_n & (block_n - 1) == 0 and block_k & (block_k - 1) == 0 and block_k <= k, (n, k)
        assert block_n * block_k * 2 <= 32768 and warps in (4, 8) and 1 <= stages <= 4, (n, k)


@pytest.mark.parametrize("itemsize", [2, 4])
def test_the_rule_for_untuned_shapes_keeps_32kb_tiles_without_half_masked_steps(itemsize):
    sms = 132
    for n in (24, 208, 1024, 3072, 151936):
        for k in (64, 272, 1040, 1536, 3072, 4096, 12288):
            block_n, block_k, _, _ = triton_gemv._one_row_tile(n, k, itemsize, sms)
            assert block_n * block_k * itemsize <= 32768 and block_n >= 2
            if k & -k >= 64:  # K has a power-of-two factor a step can take: steps tile K exactly
                assert k % block_k == 0, (n, k)
            assert block_n == 2 or -(-n // block_n) >= 3 * sms, (n, k)  # enough programs to fill the SMs


def test_one_row_config_uses_the_table_only_for_its_gpu_and_16_bit_weights(monkeypatch):
    gpu = torch.device("cuda", 0)  # never touched: the device's name and SM count are stubbed
    monkeypatch.setattr(triton_gemv, "_sm_count", lambda device: 132)
    for name in (H200, "NVIDIA H100 80GB HBM3"):
        monkeypatch.setattr(triton_gemv, "_device_name", lambda device, name=name: name)
        for itemsize in (2, 4):
            tile = triton_gemv._config(1, 6144, 4096, itemsize, gpu)[2:]
            tuned = name == H200 and itemsize == 2
            assert tile == (triton_gemv.tuned_tiles(H200)[6144, 4096] if tuned
                            else triton_gemv._one_row_tile(6144, 4096, itemsize, 132))
    cpu = torch.device("cpu")
    assert triton_gemv._config(1, 6144, 4096, 2, cpu)[2:] == triton_gemv._one_row_tile(6144, 4096, 2, 132)
    assert triton_gemv._config(8, 6144, 4096, 2, cpu)[0]  # several rows: tensor cores
