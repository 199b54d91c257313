"""The AURA stage on the serving engine: streamed deltas, stop strings."""

import asyncio

import pytest
import torch

from aura_omni.config import Stage
from aura_omni.pipeline.aura_stage import AuraPipelineStage, stop_prefix_len
from aura_omni.pipeline.processors import asr2aura
from aura_omni.testing.tiny_vl import write_tiny_aura


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    ckpt = write_tiny_aura(tmp_path_factory.mktemp("aura"))
    st = AuraPipelineStage.load(Stage(stage_id=1, model=str(ckpt), max_model_len=1024), "cpu", torch.float32, "auto")
    yield st
    st.close()


def reply(stage, rid, **sampling):
    async def run():
        return [d async for d in stage.generate(asr2aura("hello"), [], request_id=rid, sampling=sampling)]
    return asyncio.run(run())


def test_stop_prefix_len():
    assert stop_prefix_len("hello wor", ["world"]) == 3 and stop_prefix_len("abc", ["xyz"]) == 0
    assert stop_prefix_len("xa", ["ab", "a!"]) == 1 and stop_prefix_len("ab", ["ab"]) == 0  # a whole stop is the engine's


def test_stop_string_is_neither_streamed_nor_returned(stage):
    free = "".join(d.text for d in reply(stage, "free", temperature=0, max_tokens=12, ignore_eos=True))
    assert len(free) > 6
    stop = free[3:6]  # somewhere in the middle of the greedy reply
    deltas = reply(stage, "stopped", temperature=0, max_tokens=12, ignore_eos=True, stop=[stop])
    text = "".join(d.text for d in deltas)
    assert text == free[:free.index(stop)] and deltas[-1].finish_reason == "stop"
    kept = "".join(d.text for d in reply(stage, "kept", temperature=0, max_tokens=12, ignore_eos=True, stop=[stop],
                                         include_stop_str_in_output=True))
    assert kept == free[:free.index(stop) + len(stop)]


def test_prompt_ids_expand_pads_like_tokenising_the_expanded_prompt(stage):
    import numpy as np

    from aura_omni.media.vision_preprocess import preprocess_image, preprocess_video
    from aura_omni.pipeline.prompt_tokens import expand_vision_placeholders, prompt_token_ids

    rng = np.random.RandomState(0)
    video = preprocess_video(rng.randint(0, 256, (4, 64, 96, 3), dtype=np.uint8), video_fps=2.0)
    image = preprocess_image(rng.randint(0, 256, (64, 64, 3), dtype=np.uint8))
    vision = [video, video, image]  # text that touches the placeholders on both sides, incl. '<' and spaces
    prompt = asr2aura("hello <there> ", vision_items=["video", "image"], text_parts=[" x<y "],
                      history=[("user", "a <b ", ["video"]), ("assistant", "<|silent|>")], system_prompt="S <")
    pads = (151655, 151656)
    want = stage.tokenizer.encode(expand_vision_placeholders(prompt, vision), add_special_tokens=False)
    assert prompt_token_ids(stage.prompt_tokens, prompt, vision, pads) == want
    assert sum(t in pads for t in want) == 2 * video.num_tokens + image.num_tokens
    with pytest.raises(ValueError, match="fewer"):
        prompt_token_ids(stage.prompt_tokens, prompt, vision + [image], pads)
    with pytest.raises(ValueError, match="more vision placeholder"):
        prompt_token_ids(stage.prompt_tokens, prompt + "<|image_pad|>", vision, pads)
