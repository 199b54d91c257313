"""The Talker stage's engine: an LLMEngine over `TalkerAdapter` plus the frame decoder (code predictor graphs).

One stage loop steps it for every caller, so concurrent streams share decode steps; aborting a request frees its KV
blocks and its frame-decoder slot before the next step. Taking a request plans its prompt on the host; the prompts
taken between two steps are embedded together at the start of the next one (`talker_inputs`: one upload and one pass
of each embedding for a burst of them, not one each) and join the engine then. A request whose text is still
arriving (a `TextFeed`) is marked on each `feed`, and the next step embeds every marked request's new text in one
pass (AURA feeds 32 streams a token each per step: an embedding call per feed kept the loop from stepping); until its
prompt can be planned (the first body token, or ICL's text under the reference frames) it waits outside the engine.
"""

import secrets
import time
from typing import Any, Callable

import torch

from aura_omni import step_trace
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.engine.talker_adapter import TalkerAdapter
from aura_omni.layers import kernel_switches
from aura_omni.models.qwen3_tts.generate import (FrameDecoder, TalkerInput, TalkerPlan, TalkerRequestState,
                                                take_texts, talker_inputs)
from aura_omni.models.qwen3_tts.sampling import seed_key
from aura_omni.models.qwen3_tts.talker import Talker
from aura_omni.stages.loop_metrics import LatencyHistogram
from aura_omni.stages.llm import LLMStageEngine


def frames_of(output) -> list[torch.Tensor]:
    """A Talker output's codec frames: the final token (EOS or the budget's last) carries none."""
    return [] if output.finished else output.new_extras


class TalkerEngine:
    """The Talker's LLMEngine and frame decoder; `stage_engine` puts them under a stage loop."""

    def __init__(self, talker: Talker, pad_embed: torch.Tensor, config: EngineConfig, name: str = "talker"):
        cuda = talker.codec_head.weight.device.type == "cuda"
        self.adapter = TalkerAdapter(talker, pad_embed)
        self.engine = LLMEngine(self.adapter, config, eos_token_ids=[talker.config.codec_eos_token_id], name=name)
        # after the engine: its start-up picks the kernels (and fuses the backbone) the frame graphs then capture
        with kernel_switches.using(config.kernels):  # the frame graphs capture this stage's kernels
            self.adapter.decoder = FrameDecoder(talker, config.max_num_seqs, use_graphs=cuda and not config.enforce_eager,
                                                buckets=config.graph_batch_sizes)

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

    def stage_engine(self, plan: Callable[[Any], TalkerPlan | None], text_eos_id: int | None = None
                     ) -> "TalkerStageEngine":
        """The Talker as a stage loop's engine; `plan` turns a stage request into its TalkerPlan (on the loop
        thread; its embeddings are made there too, on the stage's stream), or None while its streamed text is too
        short for a prompt; it raises for a bad request (its sampling parameters included), which then fails
        alone. Each output carries the step's frames (`new_extras`, [16] long on the host); the final one (EOS or
        the budget's last token) carries none. `text_eos_id`: <tts_text_eod>, ending a streamed text."""
        return TalkerStageEngine(self, plan, text_eos_id)


class TalkerStageEngine(LLMStageEngine):
    """`LLMStageEngine` of the Talker, plus prompts embedded together and streamed text: `feed(request_id)` takes what
    the request's TextFeed got since; a request not yet able to plan its prompt is parked here (no seat, no blocks)
    until it can; a planned one waits here for the next step, which embeds every planned prompt at once."""

    def __init__(self, talker: TalkerEngine, plan: Callable[[Any], TalkerPlan | None], text_eos_id: int | None):
        super().__init__(talker.engine, on_add=TalkerEngine._start, after_step=talker.adapter.decoder.release_finished)
        self.plan, self.talker, self.text_eos_id = plan, talker.adapter.model, text_eos_id
        self.parked: dict[str, tuple[Any, float]] = {}  # request id -> (stage request whose prompt needs more text,
        #                                                  when it was parked)
        self.planned: dict[str, TalkerPlan] = {}  # request id -> its plan, until the next step embeds it
        self.fed: set[str] = set()  # running requests whose feed got text since the last step took it
        # how long each request waited for the text its prompt needs (0 for a whole text): the stage loop serves it
        # as the stage's `input_wait` latency, apart from the Talker's own time to its first frame
        self.latency = {"input_wait": LatencyHistogram()}

    def add(self, request_id: str, request: Any, parked_at: float | None = None) -> None:
        if request_id in self.engine.requests or request_id in self.parked or request_id in self.planned:
            raise ValueError(f"request id {request_id!r} is already running")
        plan = self.plan(request)
        if plan is None:
            self.parked[request_id] = (request, parked_at or time.perf_counter())
            step_trace.record("parked", request_id)
            return
        self.engine.check_prompt_length(len(plan.prompt))  # here, not when the next step embeds it with others
        self.latency["input_wait"].observe(0.0 if parked_at is None else time.perf_counter() - parked_at)
        self.planned[request_id] = plan
        step_trace.record("planned", request_id, len(plan.prompt))

    def feed(self, request_id: str, item: Any = None) -> None:
        if request_id in self.parked:
            self.add(request_id, *self.parked.pop(request_id))
            return
        if request_id in self.engine.requests:  # (a planned request takes its text when it joins the engine)
            self.fed.add(request_id)  # taken with the others' at the next step: one embedding pass for all

    def has_work(self) -> bool:
        return bool(self.planned) or bool(self.fed) or super().has_work()

    def step(self):
        start = time.perf_counter()
        if self.planned:
            self._admit()
        if self.fed:
            fed, self.fed = self.fed, set()
            take_texts([seq.model_state for rid in fed if (seq := self.engine.requests.get(rid)) is not None],
                       self.talker.embed_text, self.text_eos_id)
        if step_trace.enabled():
            step_trace.record("talker_inputs", f"{time.perf_counter() - start:.6f}")
        return super().step()

    def _admit(self) -> None:
        """Every planned prompt embedded in one pass (on the loop's stream), then into the engine."""
        planned, self.planned = self.planned, {}
        step_trace.record("admitted", len(planned))
        inputs = talker_inputs(self.talker, list(planned.values()))
        step_trace.record("embedded", len(planned))  # apart from the adds after it (scripts/step_trace_report.py)
        for request_id, inp in zip(planned, inputs):
            seq = self.engine.add_request(request_id, *TalkerEngine._request(inp))
            TalkerEngine._start(seq, inp)
            self.fed.add(request_id)  # what arrived between planning the prompt and now

    def abort(self, request_id: str) -> None:
        self.fed.discard(request_id)
        if self.parked.pop(request_id, None) is None and self.planned.pop(request_id, None) is None:
            super().abort(request_id)  # its KV blocks and frame-decoder slot come back now

    def stats(self) -> dict[str, float]:
        stats = self.engine.stats()
        return stats | {"waiting": stats.get("waiting", 0) + len(self.planned)}
