"""Stop conditions and the asyncio wrapper: tokens stream as they exist, cancellation frees the cache."""

import asyncio

import pytest
from engine_tiny_lm import prompts, tiny_lm

from aura_omni.engine.async_engine import AsyncLLMEngine
from aura_omni.engine.config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams

CFG = dict(max_model_len=48, block_size=4, num_kv_blocks=64, max_num_batched_tokens=64, max_num_seqs=8)
PROMPT = prompts([6])[0]


def make(**kw) -> LLMEngine:
    return LLMEngine(tiny_lm(), EngineConfig(**CFG), **kw)


def finish(eng: LLMEngine, params: SamplingParams, **kw):
    eng.add_request("r", PROMPT, params, **kw)
    outs = []
    while eng.has_unfinished():
        outs += eng.step()
    return outs


@pytest.fixture(scope="module")
def free_run() -> list[int]:
    return make().generate([PROMPT], SamplingParams(temperature=0, max_tokens=12))[0]


def test_stop_token_ids_and_eos_end_the_request(free_run):
    stop_tok = free_run[3]
    outs = finish(make(), SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop_tok]))
    assert outs[-1].finished and outs[-1].finish_reason == "stop" and outs[-1].stop_reason == stop_tok
    assert [t for o in outs for t in o.new_token_ids] == free_run[:free_run.index(stop_tok) + 1]
    eos_outs = finish(make(eos_token_ids=[stop_tok]), SamplingParams(temperature=0, max_tokens=12))
    assert eos_outs[-1].stop_reason == stop_tok
    ignored = finish(make(eos_token_ids=[stop_tok]), SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    assert ignored[-1].finish_reason == "length" and ignored[-1].num_output_tokens == 12


def test_min_tokens_holds_back_eos(free_run):
    eos = free_run[0]
    outs = finish(make(eos_token_ids=[eos]), SamplingParams(temperature=0, max_tokens=12, min_tokens=4))
    tokens = [t for o in outs for t in o.new_token_ids]
    assert eos not in tokens[:4] and len(tokens) >= 4


def test_stop_strings_cut_the_text_with_a_detokenize_callback(free_run):
    detok = lambda ids: "".join(f"<{i}>" for i in ids)
    stop = f"<{free_run[2]}>"
    outs = finish(make(detokenize=detok), SamplingParams(temperature=0, max_tokens=12, stop=[stop]))
    last = outs[-1]
    assert last.finish_reason == "stop" and last.stop_reason == stop
    assert last.text == detok(free_run[:free_run.index(free_run[2])])
    with pytest.raises(ValueError, match="detokenizer"):
        make().add_request("x", PROMPT, SamplingParams(stop=["a"]))


def test_max_tokens_none_runs_to_max_model_len():
    outs = finish(make(), SamplingParams(temperature=0, max_tokens=None))
    assert outs[-1].finish_reason == "length" and outs[-1].num_output_tokens == CFG["max_model_len"] - len(PROMPT)


def test_async_engine_streams_every_request_and_abort_on_cancel_frees_blocks(free_run):
    eng = make()
    start_free = eng.blocks.num_free
    aeng = AsyncLLMEngine(eng)

    async def collect(rid, prompt, n):
        got = []
        async for out in aeng.generate(rid, prompt, SamplingParams(temperature=0, max_tokens=n)):
            assert len(out.new_token_ids) == 1  # streamed token by token
            got += out.new_token_ids
        return got

    async def cancel_midway():
        async for out in aeng.generate("c", prompts([20])[0], SamplingParams(temperature=0, max_tokens=40)):
            if out.num_output_tokens == 2:
                break  # the client went away

    async def main():
        results = await asyncio.gather(collect("a", PROMPT, 12), collect("b", prompts([9])[0], 5), cancel_midway())
        with pytest.raises(ValueError):
            async for _ in aeng.generate("bad", list(range(48)), SamplingParams(temperature=0)):
                pass
        return results

    try:
        a, b, _ = asyncio.run(asyncio.wait_for(main(), timeout=60))
    finally:
        aeng.shutdown()
    assert a == free_run and len(b) == 5
    assert eng.blocks.num_free == start_free and not eng.has_unfinished()


def test_async_engine_add_does_not_wait_for_a_running_step(free_run):
    """Adding a request from the event loop only queues it: the loop never blocks on the engine lock."""
    import threading
    import time

    eng = make()
    aeng = AsyncLLMEngine(eng)
    released = threading.Event()
    original_step = eng.step

    def slow_step():
        released.wait(5)  # a long prefill chunk holds the engine
        return original_step()

    eng.step = slow_step

    async def main():
        first = aeng.generate("a", PROMPT, SamplingParams(temperature=0, max_tokens=2))
        task = asyncio.ensure_future(anext(first))
        await asyncio.sleep(0.05)  # the step thread is now inside slow_step
        t = time.monotonic()
        second = aeng.generate("b", PROMPT, SamplingParams(temperature=0, max_tokens=2))
        pending = asyncio.ensure_future(anext(second))
        await asyncio.sleep(0)
        queued_s = time.monotonic() - t
        released.set()
        await task
        await pending
        await first.aclose()
        await second.aclose()
        return queued_s

    try:
        queued_s = asyncio.run(asyncio.wait_for(main(), timeout=30))
    finally:
        aeng.shutdown()
    assert queued_s < 0.5
