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
