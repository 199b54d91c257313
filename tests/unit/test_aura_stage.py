"""The AURA stage on the serving engine: streamed deltas, stop strings."""

import asyncio

import pytest
import torch

from aura_omni.deploy import Stage
from aura_omni.stages.aura.stage import AuraPipelineStage, stop_prefix_len
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
        return [d async for d in stage.generate(asr2aura(None, text_parts=["hello"]), [], request_id=rid, sampling=sampling)]
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


def test_a_prefix_prefilled_while_asr_runs_serves_the_turn_from_the_cache(stage, tmp_path_factory):
    """`prefill_prefix` (the orchestrator calls it beside the ASR) leaves the prompt through the turn's last vision item
    in the prefix cache: the turn's request then computes only what follows, and its reply is unchanged."""
    import numpy as np

    from aura_omni.stages.asr.transcript import Transcript
    from aura_omni.media.vision_preprocess import preprocess_image

    cached = AuraPipelineStage.load(Stage(stage_id=1, model=stage.stage.model, max_model_len=1024,
                                          enable_prefix_caching=True), "cpu", torch.float32, "auto")
    try:
        rng = np.random.RandomState(3)
        vision = [preprocess_image(rng.randint(0, 256, (64, 96, 3), dtype=np.uint8)) for _ in range(2)]
        words = asr2aura(Transcript("English", "what do you see"), vision_items=["image", "image"])
        before = asr2aura(None, vision_items=["image", "image"])  # the prompt as known before the transcript
        greedy = {"temperature": 0, "max_tokens": 8, "ignore_eos": True}

        async def reply(st, rid):
            return [d async for d in st.generate(words, vision, request_id=rid, sampling=greedy)]

        want = asyncio.run(reply(stage, "plain"))  # no prefix cache at all
        assert asyncio.run(stage.prefill_prefix(before, vision, request_id="no-cache")) == 0
        assert asyncio.run(cached.prefill_prefix(before, [], request_id="no-vision")) == 0

        n = asyncio.run(cached.prefill_prefix(before, vision, request_id="prefix"))
        full = cached.prompt_ids(words, vision)
        assert full[:n] == cached.prompt_ids(before, vision)[:n] and full[n - 1] == cached.prompt_tokens.vision_end
        assert n > sum(v.num_tokens for v in vision)  # every vision token is in it
        blocks = cached.engine.blocks
        hits = blocks.prefix_hit_tokens
        got = asyncio.run(reply(cached, "turn"))
        assert [d.token_ids for d in got] == [d.token_ids for d in want]
        assert blocks.prefix_hit_tokens - hits == n // blocks.block_size * blocks.block_size
        assert cached.stats()["running"] == 0 and cached.stats()["free_blocks"] == cached.stats()["total_blocks"]
    finally:
        cached.close()
