"""The engine loop of one stage: add requests, step, stream outputs, abort.

    engine = LLMEngine(model, EngineConfig(...), eos_token_ids=[151645])
    engine.add_request("r1", prompt_ids, SamplingParams(temperature=0))
    while engine.has_unfinished():
        for out in engine.step(): ...   # new tokens of every request that produced one this step

Not thread-safe by itself: one stage loop (stages/loop.py) owns it and steps it on its own thread.

Async scheduling (`EngineConfig.async_scheduling`): `step` queues step k+1 before step k's tokens come back,
then reads step k's, so the host's work between steps (scheduling, inputs, stop checks, streaming) overlaps the
device's. A sampled token is a `PENDING` placeholder until its value arrives; step k+1 takes it from the device
(`ModelRunner.can_run_ahead` says when it can: the Talker always, a causal LM for decode steps without
penalties, which read the history on the host; otherwise step k is read first). A sequence that ends at step k
already has a spare row in step k+1, which is dropped; before a sequence would pass its length limit the engine
reads the queued step first; prefix-cache blocks are registered once their tokens are known.
"""

import logging
from typing import Any, Callable

from aura_omni import step_trace
from aura_omni.engine.block_manager import BlockManager
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.detokenizer import IncrementalDetokenizer
from aura_omni.engine.model_api import CausalLMAdapter, EngineModel, ModelAdapter
from aura_omni.engine.model_runner import LaunchedStep, ModelRunner
from aura_omni.engine.outputs import RequestOutput
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.scheduler import Scheduler
from aura_omni.engine.sequence import NON_FINITE, PENDING, MultimodalPrompt, Sequence

log = logging.getLogger(__name__)


class PromptTooLongError(ValueError):
    """The prompt leaves no room for one output token within max_model_len."""


class LLMEngine:
    def __init__(self, model: EngineModel | ModelAdapter, config: EngineConfig, eos_token_ids: list[int] = (),
                 detokenize: Callable[[list[int]], str] | None = None, name: str = "stage"):
        adapter = model if hasattr(model, "build_inputs") else CausalLMAdapter(model)
        self.config = config
        self.name = name
        self.eos_token_ids = list(eos_token_ids)
        self.detokenize = detokenize
        self.runner = ModelRunner(adapter, config, name)
        self.blocks = BlockManager(self.runner.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.blocks, getattr(adapter, "ready", None))
        self.requests: dict[str, Sequence] = {}
        self.async_steps = config.async_scheduling
        self._in_flight: tuple[LaunchedStep, list[int]] | None = None  # a queued step, its rows' output indexes
        # steps launched, those that took prompt tokens (a prefill alone or beside decodes: no decode graph), and those
        # launched with every seat taken while requests waited for one
        self.num_steps = self.num_prompt_steps = self.num_seat_bound_steps = 0

    # -- requests --------------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int] | None = None,
                    params: SamplingParams | None = None, mm: MultimodalPrompt | None = None,
                    eos_token_ids: list[int] | None = None) -> Sequence:
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already running")
        params = params or SamplingParams()
        if params.stop and self.detokenize is None:
            raise ValueError("stop strings need a detokenizer; this stage has none")
        eos = self.eos_token_ids if eos_token_ids is None else list(eos_token_ids)
        seq = Sequence(request_id, list(prompt_token_ids or []), params, eos, mm, self.config.max_model_len)
        self.check_prompt_length(seq.prompt_len)
        self.requests[request_id] = seq
        self.scheduler.add(seq)
        return seq

    def check_prompt_length(self, prompt_len: int) -> None:
        """PromptTooLongError unless a prompt this long leaves room for an output token."""
        if prompt_len >= self.config.max_model_len:
            raise PromptTooLongError(f"prompt has {prompt_len} tokens; max_model_len is {self.config.max_model_len}")

    def abort(self, request_id: str) -> RequestOutput | None:
        """Drop a request (client gone) and free its KV blocks now. None if it is not running."""
        seq = self.requests.pop(request_id, None)
        if seq is None:
            return None
        self.scheduler.finish(seq, "abort")
        known = seq.num_known_tokens - seq.prompt_len
        del seq.output_token_ids[known:], seq.output_extras[known:]  # queued tokens it will never get
        return self._output(seq, [], [])

    def has_unfinished(self) -> bool:
        """Requests still to run, or a queued step with tokens not yet read (rows of ended requests do not count)."""
        if self.scheduler.has_work():
            return True
        return self._in_flight is not None and any(not s.seq.is_finished for s in self._in_flight[0].sampling)

    # -- the loop --------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one step; returns the new tokens of the step that finished (with async scheduling: the one before)."""
        outputs = []
        if self._in_flight is not None and self._reaches_length_limit(self._in_flight[0]):
            outputs = self._collect(*self._in_flight)  # a sequence ends with it: no spare step past its limit
            self._in_flight = None
        sched = self.scheduler.schedule()
        if self._in_flight is not None and sched.scheduled and not self.runner.can_run_ahead(sched.scheduled):
            outputs += self._collect(*self._in_flight)  # this step needs the queued step's tokens on the host
            self._in_flight = None
            sched.scheduled = [s for s in sched.scheduled if not s.seq.is_finished]  # ended just now: blocks freed
        launched = None
        if sched.scheduled:
            pending = self._in_flight[0] if self._in_flight is not None else None
            queued = self.runner.launch(sched, ahead=self.async_steps, pending=pending)
            self.num_steps += 1
            if step_trace.enabled():
                step_trace.record("engine_step", self.name, sched.num_tokens, len(sched.scheduled))
            self.num_prompt_steps += any(s.start < s.seq.prompt_len for s in sched.scheduled)
            self.num_seat_bound_steps += sched.seats_full
            for s in sched.scheduled:
                s.seq.num_computed_tokens = s.end
                self.blocks.commit(s.seq)
            launched = queued, [s.seq.num_output_tokens for s in queued.sampling]
            for s in queued.sampling:
                s.seq.output_token_ids.append(PENDING)
                s.seq.output_extras.append(None)
        if self._in_flight is not None:
            outputs += self._collect(*self._in_flight)
        self._in_flight = None
        if launched is not None:
            if self.async_steps:
                self._in_flight = launched
            else:
                outputs += self._collect(*launched)
        return outputs

    @staticmethod
    def _reaches_length_limit(step: LaunchedStep) -> bool:
        seqs = [s.seq for s in step.sampling if not s.seq.is_finished]
        return any(seq.max_tokens is not None and seq.num_output_tokens >= seq.max_tokens for seq in seqs)

    def _collect(self, step: LaunchedStep, indexes: list[int]) -> list[RequestOutput]:
        """A launched step's tokens into their sequences (stop checks, finishing); its outputs."""
        sampled, token_ids, extras = step.result()
        outputs = []
        for i, (s, index, token) in enumerate(zip(sampled, indexes, token_ids)):
            seq = s.seq
            if seq.is_finished:
                continue  # aborted, or ended at the step before (async scheduling): a spare row
            if token == NON_FINITE:
                outputs.append(self._fail(seq, index))
                continue
            extra = extras[i] if extras is not None else None
            seq.output_token_ids[index] = token
            seq.output_extras[index] = extra
            if seq.grammar is not None:
                seq.grammar.accept(token, index)
            if self._check_stop(seq, token, index + 1):
                del seq.output_token_ids[index + 1:], seq.output_extras[index + 1:]  # a spare queued token
                self.scheduler.finish(seq, seq.finish_reason)
                self.requests.pop(seq.request_id, None)
            elif seq.num_computed_tokens:
                self.blocks.commit(seq)  # blocks that waited for this token's value
            outputs.append(self._output(seq, [token], [extra] if extras is not None else [], index + 1))
        return outputs

    def _fail(self, seq: Sequence, index: int) -> RequestOutput:
        """A row whose hidden state was NaN or infinite: the request ends with finish_reason "error" and no new
        token, and its blocks leave the prefix cache (their K/V may be what went wrong)."""
        log.error("%s: request %s produced non-finite values at output %d (%d prompt tokens); it is stopped and its "
                  "blocks dropped from the prefix cache", self.name, seq.request_id, index, seq.prompt_len)
        del seq.output_token_ids[index:], seq.output_extras[index:]
        seq.finish_reason, seq.stop_reason = "error", "non-finite"
        self.blocks.forget(seq)
        self.scheduler.finish(seq, "error")
        self.requests.pop(seq.request_id, None)
        return self._output(seq, [], [], index)

    def _check_stop(self, seq: Sequence, token: int, n: int) -> bool:
        """Whether `token`, the sequence's n-th output, ends it (sets its finish and stop reasons)."""
        p = seq.params
        if n >= p.min_tokens:
            if token in p.stop_token_ids or (token in seq.eos_token_ids and not p.ignore_eos):
                seq.finish_reason, seq.stop_reason = "stop", token
                return True
        if p.stop:
            if seq.detokenizer is None:
                seq.detokenizer = IncrementalDetokenizer(self.detokenize)
            before = len(seq.detokenizer.text)
            seq.detokenizer.add(seq.output_token_ids[len(seq.detokenizer.ids):n])
            seq.text = seq.detokenizer.text  # a stop string ending in the new text begins at most len(s) - 1 before it
            hits = [(seq.text.find(s, max(0, before - len(s) + 1)), s) for s in p.stop]
            hits = [(at, s) for at, s in hits if at >= 0]
            if hits and n >= p.min_tokens:
                at, s = min(hits)
                seq.text = seq.text[:at + (len(s) if p.include_stop_str_in_output else 0)]
                seq.finish_reason, seq.stop_reason = "stop", s
                return True
        limit = seq.max_tokens
        if limit is not None and n >= limit:
            seq.finish_reason = "length"
            return True
        return False

    @staticmethod
    def _output(seq: Sequence, new: list[int], extras: list[Any], num_output_tokens: int | None = None
                ) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id, new_token_ids=new,
            num_output_tokens=seq.num_output_tokens if num_output_tokens is None else num_output_tokens,
            finished=seq.is_finished, finish_reason=seq.finish_reason, stop_reason=seq.stop_reason,
            new_extras=extras, text=seq.text, num_prompt_tokens=seq.prompt_len, num_cached_tokens=seq.num_cached_tokens,
        )

    # -- conveniences ----------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
        """Run prompts to completion (offline use, tests); returns each request's output token ids."""
        params = params if isinstance(params, list) else [params] * len(prompts)
        ids = [f"gen-{i}-{id(prompts)}" for i in range(len(prompts))]
        results: dict[str, list[int]] = {i: [] for i in ids}
        for rid, prompt, p in zip(ids, prompts, params):
            self.add_request(rid, prompt, p)
        while any(rid in self.requests for rid in ids):
            for out in self.step():
                if out.request_id in results:
                    results[out.request_id].extend(out.new_token_ids)
        return [results[i] for i in ids]

    def stats(self) -> dict[str, float]:
        return {
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "free_blocks": self.blocks.num_free,
            "total_blocks": self.blocks.num_blocks,
            "prefix_cache_hit_rate": self.blocks.prefix_hit_rate,
            "prefix_cache_blocks": len(self.blocks.cached),
            "preemptions": self.scheduler.num_preemptions,
            "engine_steps": self.num_steps,
            "prompt_steps": self.num_prompt_steps,
            "seat_bound_steps": self.num_seat_bound_steps,
        }
