"""The AURA LM (tiny Qwen3-VL: MRoPE, DeepStack, rope_delta) under the engine, mixed with text requests."""

import numpy as np
import pytest
import torch

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.prompts import vl_request
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.media.vision_preprocess import preprocess_image
from aura_omni.models.qwen3_vl import Qwen3VLConfig, Qwen3VLForCausalLM
from aura_omni.testing.tiny_vl import _init_random, tiny_aura_config

IMAGE_PAD = 151655  # Qwen3-VL <|image_pad|>
STEPS = 5


@pytest.fixture(scope="module")
def aura():
    model = Qwen3VLForCausalLM(Qwen3VLConfig.from_hf(tiny_aura_config()))
    _init_random(model, 0)
    model._reset_rotary_buffers()
    return model.eval()


def image(h: int, w: int, shade: int):
    rgb = np.full((h, w, 3), shade, dtype=np.uint8)
    rgb[h // 4:h // 2, w // 4:w // 2] = 255
    return preprocess_image(rgb)


def image_prompt(model, img, text_ids):
    ids = [151644, 872, 198, 151652] + [IMAGE_PAD] * img.num_tokens + [151653] + text_ids + [151645, 198]
    with torch.no_grad():
        return model.build_prompt(ids, [img])


def greedy_alone(model, prompt) -> list[int]:
    """Reference: whole-sequence cache-less recompute at each step (the prompt's own DeepStack and positions)."""
    embeds, positions, out = prompt.inputs_embeds, prompt.positions, []
    with torch.no_grad():
        for _ in range(STEPS):
            n = embeds.shape[0]
            hidden = model(embeds, positions, AttentionMetadata.prefill([n]), prompt.deepstack)
            tok = int(model.compute_logits(hidden[-1:]).argmax(-1))
            out.append(tok)
            embeds = torch.cat([embeds, model.embed_tokens(torch.tensor([tok]))])
            positions = torch.cat([positions, torch.full((3, 1), n + prompt.rope_delta)], dim=1)
    return out


def run_all(engine, requests) -> dict[str, list[int]]:
    for rid, (ids, mm) in requests.items():
        engine.add_request(rid, ids, SamplingParams(temperature=0, max_tokens=STEPS, ignore_eos=True), mm=mm)
    got = {rid: [] for rid in requests}
    while engine.has_unfinished():
        for o in engine.step():
            got[o.request_id] += o.new_token_ids
    return got


def test_image_and_text_prompts_batched_equal_each_alone(aura):
    img_a, img_b = image(64, 96, 40), image(64, 64, 120)
    prompts = {
        "img-a": image_prompt(aura, img_a, [3838, 374, 419, 30]),
        "img-b": image_prompt(aura, img_b, [74785, 13]),
        "text": aura.build_prompt([151644, 872, 198, 9707, 1879, 151645, 198]),
    }
    assert prompts["img-a"].rope_delta != 0 and prompts["img-a"].deepstack is not None
    want = {rid: greedy_alone(aura, p) for rid, p in prompts.items()}
    engine = LLMEngine(aura, EngineConfig(max_model_len=128, block_size=4, num_kv_blocks=96,
                                          max_num_batched_tokens=16, enable_prefix_caching=True))
    media = {"img-a": [img_a], "img-b": [img_b], "text": None}
    got = run_all(engine, {rid: vl_request(p, media[rid]) for rid, p in prompts.items()})
    assert got == want
    # the same image again: its blocks come from the prefix cache, the output is unchanged
    again = run_all(engine, {"img-a2": vl_request(prompts["img-a"], [img_a])})
    assert again["img-a2"] == want["img-a"]
    assert engine.stats()["prefix_cache_hit_rate"] > 0


def test_image_prompt_without_media_is_not_prefix_cached(aura):
    img = image(64, 64, 80)
    p = image_prompt(aura, img, [30])
    ids, mm = vl_request(p)
    assert mm.content_hashes is None
    ids2, mm2 = vl_request(p, [img])
    assert mm2.content_hashes[0][0] == 4  # hash attached at the first <|image_pad|>


def test_placeholder_runs_count_a_videos_split_groups():
    from aura_omni.engine.prompts import placeholder_runs

    V, I, T = 151656, 151655, 7  # video pad, image pad, any text token
    # a 2-group video (2 pads each, a timestamp between the groups), then an image of 3 pads
    ids = [T, T, V, V, T, T, T, V, V, T, T, I, I, I, T]
    assert placeholder_runs(ids, {V, I}, [4, 3]) == [2, 11]
    with pytest.raises(ValueError):
        placeholder_runs(ids, {V, I}, [4, 4])
    with pytest.raises(ValueError):
        placeholder_runs(ids, {V, I}, [4])
