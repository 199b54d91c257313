"""The Talker stage's engine: an LLMEngine over `TalkerAdapter` plus the frame decoder (code predictor graphs).

One stage loop steps it for every caller, so concurrent streams share decode steps; aborting a request frees its KV
blocks and its frame-decoder slot before the next step.
"""

import secrets
from typing import Any, Callable

import torch

from aura_omni.engine.config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.engine.talker_adapter import TalkerAdapter
from aura_omni.layers import kernel_switches
from aura_omni.models.qwen3_tts.generate import FrameDecoder, TalkerInput, TalkerRequestState
from aura_omni.models.qwen3_tts.sampling import seed_key
from aura_omni.models.qwen3_tts.talker import Talker
from aura_omni.stages.llm import LLMStageEngine


class TalkerEngine:
    """The Talker's LLMEngine and frame decoder; `stage_engine` puts them under a stage loop."""

    def __init__(self, talker: Talker, pad_embed: torch.Tensor, config: EngineConfig, name: str = "talker"):
        cuda = talker.codec_head.weight.device.type == "cuda"
        self.adapter = TalkerAdapter(talker, pad_embed)
        self.engine = LLMEngine(self.adapter, config, eos_token_ids=[talker.config.codec_eos_token_id], name=name)
        # after the engine: its start-up picks the kernels (and fuses the backbone) the frame graphs then capture
        with kernel_switches.using(config.kernels):  # the frame graphs capture this stage's kernels
            self.adapter.decoder = FrameDecoder(talker, config.max_num_seqs, use_graphs=cuda and not config.enforce_eager,
                                                buckets=config.cuda_graph_batch_sizes)

    @staticmethod
    def _start(seq, inp: TalkerInput) -> None:
        key = seed_key(inp.seed) if inp.seed is not None else secrets.randbits(32)
        seq.model_state = TalkerRequestState(inp, key)

    @staticmethod
    def _request(inp: TalkerInput):
        """Engine-level request: stops at EOS or the budget (the frame decoder samples; these params never do)."""
        inp.sampling.validate()
        return None, SamplingParams(temperature=0, max_tokens=inp.sampling.max_new_tokens), MultimodalPrompt(inp.prompt_embeds)

    def add_request(self, request_id: str, inp: TalkerInput) -> None:
        """Queue a request for a caller that steps `self.engine` itself (benchmarks); servers use `stage_engine`."""
        seq = self.engine.add_request(request_id, *self._request(inp))
        self._start(seq, inp)

    def stage_engine(self, build: Callable[[Any], TalkerInput]) -> LLMStageEngine:
        """The Talker as a stage loop's engine; `build` turns a stage request into its TalkerInput (prompt
        embeddings: on the loop thread, so on the stage's stream). Each output carries the step's frames
        (`new_extras`, [16] long on the host); the final one (EOS or the budget's last token) carries none."""
        def prepare(request):
            inp = build(request)
            return (*self._request(inp), inp)

        return LLMStageEngine(self.engine, prepare, on_add=self._start, after_step=self.adapter.decoder.release_finished)

    def stats(self) -> dict[str, float]:
        return self.engine.stats()
