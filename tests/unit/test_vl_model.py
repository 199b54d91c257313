"""AURA (Qwen3-VL) model wrapper: loading, preset, prompts, stop/silent handling, on the tiny checkpoint."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from aura_omni.models.loader import CheckpointError
from aura_omni.models.qwen3_vl import SILENT_TOKEN_ID, Qwen3VLConfig, Qwen3VLForCausalLM
from tests.unit.aura_engine import engine_generate
from aura_omni.pipeline.processors import asr2aura
from aura_omni.stages.aura.prompt_tokens import PromptTokenizer
from aura_omni.testing.tiny_vl import tiny_aura_config, write_tiny_aura


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_aura(tmp_path_factory.mktemp("aura"))


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def test_tiny_checkpoint_has_the_real_layout(tiny_dir):
    index = json.loads((tiny_dir / "model.safetensors.index.json").read_text())["weight_map"]
    assert "lm_head.weight" in index and "model.visual.pos_embed.weight" in index
    assert "model.visual.deepstack_merger_list.2.linear_fc2.weight" in index
    assert "model.language_model.layers.3.self_attn.q_norm.weight" in index
    cfg = json.loads((tiny_dir / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_vl" and cfg["vision_config"]["deepstack_visual_indexes"] == [1, 2, 3]
    assert json.loads((tiny_dir / "video_preprocessor_config.json").read_text())["size"]["longest_edge"] == 25165824


def test_tiny_checkpoint_is_deterministic(tmp_path, tiny_dir):
    again = write_tiny_aura(tmp_path / "again", seed=0)
    shards = sorted(p.name for p in tiny_dir.glob("*.safetensors"))
    assert shards == sorted(p.name for p in again.glob("*.safetensors")) and len(shards) == 2
    for name in shards:
        a, b = load_file(str(tiny_dir / name)), load_file(str(again / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_missing_weight_is_a_checkpoint_error(tmp_path, tiny_dir):
    broken = write_tiny_aura(tmp_path / "broken")
    name = "model-00002-of-00002.safetensors"
    tensors = load_file(str(broken / name))
    del tensors["model.visual.merger.norm.weight"]
    save_file(tensors, str(broken / name))
    with pytest.raises(CheckpointError, match="visual.merger.norm.weight"):
        Qwen3VLForCausalLM.from_pretrained(broken)


def test_preset_is_qwen3_vl_8b():
    from importlib.resources import files

    cfg = Qwen3VLConfig.from_hf(json.loads((files("aura_omni") / "presets/aurateam__AURA/config.json").read_text()))
    assert (cfg.text.hidden_size, cfg.text.num_hidden_layers, cfg.text.mrope_section) == (4096, 36, [24, 20, 20])
    assert cfg.text.rope_theta == 5_000_000 and cfg.vision.deepstack_visual_indexes == [8, 16, 24]
    assert not cfg.tie_word_embeddings


def test_dummy_load_format_builds_random_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(tiny_aura_config()))
    model = Qwen3VLForCausalLM.from_pretrained(tmp_path, load_format="dummy")
    assert model.backbone.layers[0].input_layernorm.weight.eq(1).all()
    assert model.lm_head.weight.std() > 0


def test_rejects_non_qwen3_vl_config():
    with pytest.raises(ValueError, match="Qwen3-VL"):
        Qwen3VLConfig.from_hf({"model_type": "qwen3", "hidden_size": 8})


def test_aura_prompt_tokens(tokenizer):
    prompt = asr2aura(None, text_parts=["hi"], system_prompt="S", history=[("user", "q"), ("assistant", "<|silent|>")])
    ids = PromptTokenizer(tokenizer)(prompt, [])
    assert ids == tokenizer("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
                            "<|silent|><|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    assert ids[:4] == [151644, 8948, 198, 50] and SILENT_TOKEN_ID in ids and ids[-3:] == [151644, 77091, 198]


def test_silent_stops_generation_and_stays_visible(tiny_dir, tokenizer):
    model = Qwen3VLForCausalLM.from_pretrained(tiny_dir)
    prompt = model.build_prompt(PromptTokenizer(tokenizer)(asr2aura(None, text_parts=["anything?"]), []))
    free = engine_generate(model, [prompt], 4)[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 4 and SILENT_TOKEN_ID not in free.token_ids
    original, calls = model.compute_logits, []

    def silent_on_second_step(hidden):
        logits = original(hidden)
        calls.append(1)
        if len(calls) == 2:
            logits[:, SILENT_TOKEN_ID] += 1e4
        return logits

    model.compute_logits = silent_on_second_step
    forced = engine_generate(model, [prompt], 4)[0]
    assert forced.token_ids == [free.token_ids[0], SILENT_TOKEN_ID] and forced.finish_reason == "stop"
    assert tokenizer.decode(forced.token_ids[-1:], skip_special_tokens=False) == "<|silent|>"
