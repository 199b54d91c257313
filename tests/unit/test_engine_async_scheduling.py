"""Async scheduling (engine/llm_engine.py): queuing step k+1 before step k's tokens are read gives every request
exactly the synchronous engine's tokens, text and finish reasons, through staggered arrivals, prefix-cache hits,
preemption, seeded sampling, stop strings, min_tokens, logit_bias, length limits and aborts; steps whose inputs
need the host's token values (penalties, prompts beside decodes) read the queued step first."""

import pytest
from engine_tiny_lm import VOCAB, prompts, tiny_lm

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams

def run(async_scheduling: bool, kv_blocks: int, requests: list[tuple[int, str, list[int], SamplingParams]],
        abort: dict[int, str]):
    """requests: (arrival step, id, prompt, params); abort: step -> request id. Returns per-request outputs and
    how many steps were queued behind a step whose tokens were not read yet."""
    eng = LLMEngine(tiny_lm(), EngineConfig(max_model_len=48, block_size=4, num_kv_blocks=kv_blocks, max_num_seqs=4,
                                            max_num_batched_tokens=32, enable_prefix_caching=True,
                                            async_scheduling=async_scheduling),
                    eos_token_ids=[7], detokenize=lambda ids: "".join(f"<{i}>" for i in ids))
    launch, ahead = eng.runner.launch, []
    eng.runner.launch = lambda sched, **kw: ahead.append(kw.get("pending") is not None) or launch(sched, **kw)
    got = {rid: [] for _, rid, _, _ in requests}
    last = {}
    step = 0
    while step <= max(a for a, *_ in requests) or eng.has_unfinished():
        for arrival, rid, prompt, params in requests:
            if arrival == step:
                eng.add_request(rid, prompt, params)
        if step in abort:
            out = eng.abort(abort[step])
            got[abort[step]] += ["abort", out.num_output_tokens]
        for out in eng.step():
            got[out.request_id] += out.new_token_ids
            last[out.request_id] = (out.finished, out.finish_reason, out.stop_reason, out.text, out.num_output_tokens)
        step += 1
    stats = eng.stats()
    assert stats["free_blocks"] == stats["total_blocks"] and stats["running"] == stats["waiting"] == 0
    return got, last, sum(ahead), stats


@pytest.mark.parametrize("kv_blocks", [96, 14])  # roomy, or so tight that sequences are preempted and recomputed
def test_queued_steps_give_the_synchronous_tokens(kv_blocks):
    system = prompts([9], seed=5)[0]
    p = prompts([3, 11, 6, 4, 8], seed=6)
    free = LLMEngine(tiny_lm(), EngineConfig(max_model_len=48, block_size=4, num_kv_blocks=96)).generate(
        [system + p[1]], SamplingParams(temperature=0, max_tokens=10))[0]
    stop_string = f"<{free[4]}>"
    requests = [
        (0, "greedy", system + p[0], SamplingParams(temperature=0, max_tokens=12)),
        (0, "seeded", system + p[1], SamplingParams(temperature=0.9, top_k=20, seed=3, max_tokens=10)),
        (2, "stop-string", system + p[1], SamplingParams(temperature=0, max_tokens=10, stop=[stop_string])),
        (3, "bias-min", p[2], SamplingParams(temperature=0, max_tokens=9, min_tokens=5,
                                             logit_bias={7: 4.0, VOCAB - 1: -100.0})),
        (5, "penalties", p[3], SamplingParams(temperature=0, max_tokens=8, repetition_penalty=1.3,
                                              frequency_penalty=0.5)),
        (6, "aborted", p[4], SamplingParams(temperature=0, max_tokens=20)),
        (9, "cached", system + p[0], SamplingParams(temperature=0, max_tokens=12)),  # the prefix cache serves it
    ]
    abort = {12: "aborted"}
    sync, sync_last, sync_ahead, _ = run(False, kv_blocks, requests, abort)
    queued, queued_last, queued_ahead, stats = run(True, kv_blocks, requests, abort)
    cut_sync, cut_queued = sync.pop("aborted"), queued.pop("aborted")
    sync_last.pop("aborted"), queued_last.pop("aborted")
    assert queued == sync and queued_last == sync_last
    # aborted at the same step, the queued engine had read one token fewer: its tokens are a prefix, none is lost
    assert cut_queued[-2:] == ["abort", len(cut_queued) - 2] and cut_sync[:len(cut_queued) - 2] == cut_queued[:-2]
    assert sync_ahead == 0 and queued_ahead > 5  # steps really were queued ahead
    assert stats["prefix_cache_hit_rate"] > 0
    assert sync_last["stop-string"][1:3] == ("stop", stop_string) and sync_last["greedy"][1] == "length"
    assert cut_sync[-2:] == ["abort", len(cut_sync) - 2]
    if kv_blocks == 14:
        assert stats["preemptions"] > 0
