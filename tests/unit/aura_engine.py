"""Greedy AURA generation through the serving engine (what the AURA stage runs), for tests."""

from dataclasses import dataclass

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.prompts import vl_request
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.models.qwen3_vl import AURA_STOP_TOKEN_IDS


@dataclass
class Generated:
    token_ids: list[int]  # the stop id included (AURA's <|silent|> stays visible)
    finish_reason: str


def engine_generate(model, prompts, max_new_tokens: int, block_size: int = 4) -> list[Generated]:
    """VLPrompts (or engine requests: (ids, MultimodalPrompt)) -> greedy outputs, all batched on one engine."""
    engine = LLMEngine(model, EngineConfig(max_model_len=2048, block_size=block_size, num_kv_blocks=512,
                                           enforce_eager=True), eos_token_ids=list(AURA_STOP_TOKEN_IDS))
    params = SamplingParams(temperature=0, max_tokens=max_new_tokens)
    out = {f"r{i}": Generated([], "") for i in range(len(prompts))}
    for i, prompt in enumerate(prompts):
        ids, mm = prompt if isinstance(prompt, tuple) else vl_request(prompt)
        engine.add_request(f"r{i}", ids, params, mm)
    while engine.has_unfinished():
        for o in engine.step():
            out[o.request_id].token_ids += o.new_token_ids
            if o.finished:
                out[o.request_id].finish_reason = o.finish_reason
    return [out[f"r{i}"] for i in range(len(prompts))]
