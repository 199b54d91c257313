"""Turns a scheduled step into tensors, runs the model, samples.

Owns the device side of a stage: the KV pages (sized by engine/memory.py), the attention kernel
choice, the decode CUDA graphs and the sampler. The scheduler's plain data comes in; one sampled
token (and the adapter's per-step `extra`) per sequence that reached its last token comes out.

Per step the host does plain-int work only: the step's integer inputs (slots, tables, lengths,
offsets, and for a decode of a plain LM the token ids and positions) are packed with numpy and cross
to the device in one copy; the sampled ids come back in one copy. On CUDA the backbone's projections
are fused at start-up (models/qwen3.py), and a decode step of a plain LM replays one CUDA graph that
embeds, runs the backbone, the LM head and the greedy argmax. Other steps of up to
`prefill_graph_tokens` tokens (prefix-cached turns, short prompts, chunks beside decodes) replay a graph
of the backbone captured at their padded token count (engine/prefill_graphs.py); longer ones run eagerly.
"""

import logging
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.cuda_graphs import DecodeGraphs
from aura_omni.engine.memory import KVPlan, plan_kv_cache
from aura_omni.engine.model_api import CausalLMAdapter, ModelAdapter, Piece, StepInputs
from aura_omni.engine.prefill_graphs import PrefillGraphs, graph_sizes
from aura_omni.engine.sampler import Sampler, is_plain_greedy
from aura_omni.engine.scheduler import ScheduledSeq, SchedulerOutput
from aura_omni.engine.sequence import NON_FINITE
from aura_omni.layers import attention_backend, kernel_switches, measure_gate
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.layers.device import on_device, upload, upload_async, wait_event
from aura_omni.layers.kv_cache import allocate_kv_cache, free_kv_cache

log = logging.getLogger(__name__)



def _dtype_of(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


def token_bucket(n: int) -> int:
    """Padded token count of an eager step: exact up to 16, then multiples of 16 / 64 / 256 / 512 (at most
    ~6% padding above 256 tokens), so a stage sees a few dozen GEMM row counts instead of every one."""
    for limit, step in ((16, 1), (256, 16), (1024, 64), (4096, 256)):
        if n <= limit:
            return -(-n // step) * step
    return -(-n // 512) * 512


class LaunchedStep:
    """A step queued on the device, with its sampled ids and extras (one row per sampling sequence). `ahead` (the
    engine queues the next step before reading this one): they start copying to pinned host memory at once and
    `result` waits for that copy only; otherwise `result` reads them directly. `finite` [rows] (bool, device): a
    row whose hidden state was not finite reads as NON_FINITE on the host, while the device keeps its sampled id
    (a step queued behind this one embeds it, and -2 would fault there)."""

    def __init__(self, sampling: list[ScheduledSeq], token_ids: torch.Tensor | None, extras: torch.Tensor | None,
                 ahead: bool = False, finite: torch.Tensor | None = None):
        self.sampling = sampling
        self.device_ids = token_ids  # what a step queued behind this one feeds its rows from
        if finite is not None and token_ids is not None:
            token_ids = torch.where(finite, token_ids, NON_FINITE)
        self._ids, self._extras, self._copied = token_ids, extras, None
        if ahead and token_ids is not None and token_ids.is_cuda:
            self._copy()

    def _copy(self) -> None:
        """Queue the ids' (and extras') copy to the host behind the step, with an event to wait on."""
        self._ids = self._ids.to("cpu", non_blocking=True)
        self._extras = self._extras.to("cpu", non_blocking=True) if self._extras is not None else None
        self._copied = torch.cuda.Event()
        self._copied.record()

    def result(self) -> tuple[list[ScheduledSeq], list[int], list[Any] | None]:
        """(sequences that sampled, their new token ids, their extras or None)."""
        if self._ids is None:
            return [], [], None
        if self._copied is None and self._ids.is_cuda:  # a step not run ahead: copied now, behind it
            self._copy()
        if self._copied is not None:
            wait_event(self._copied)  # the step's wait for the device, counted per stage thread
        extras = list(self._extras.cpu().unbind(0)) if self._extras is not None else None
        return self.sampling, self._ids.tolist(), extras


def _deepstack_layers(adapter: ModelAdapter) -> int:
    """Layers that take DeepStack features (a vision LM: AURA), 0 for the other models."""
    visual = getattr(getattr(adapter, "model", None), "visual", None)
    return len(visual.config.deepstack_visual_indexes) if visual is not None else 0


class ModelRunner:
    def __init__(self, adapter: ModelAdapter, config: EngineConfig, name: str = "stage"):
        # this stage's kernel switches, in force for everything the runner runs (layers/kernel_switches.py)
        self.kernels = config.kernels
        with kernel_switches.using(self.kernels):
            self._setup(adapter, config, name)

    def _setup(self, adapter: ModelAdapter, config: EngineConfig, name: str) -> None:
        self.adapter = adapter
        self.config = config
        self.backbone = adapter.backbone
        self.device = next(self.backbone.parameters()).device
        self.dtype = _dtype_of(self.backbone)
        self.kv_dtype = getattr(torch, config.kv_cache_dtype) if config.kv_cache_dtype else self.dtype
        self.block_size = config.block_size
        self.sampler = Sampler()
        self.mrope = self.backbone.config.mrope_section is not None
        # a plain causal LM's decode needs only ids and positions: the graph can own the whole step
        self.plain_lm = type(adapter) is CausalLMAdapter
        attention_backend.select_backend(self.device, self.dtype, config.fast_attention)
        if self.device.type == "cuda":
            self.backbone.fuse_projections()
            with torch.inference_mode():  # a one-row LM head may be a Triton GEMV: compile it now, not in a request
                adapter.compute_logits(torch.zeros(1, self.backbone.config.hidden_size, dtype=self.dtype,
                                                   device=self.device), [])
        pad = config.pad_prefill_tokens
        self.pad_tokens = self.device.type == "cuda" if pad is None else pad
        if self.pad_tokens and self.device.type == "cuda":
            self._plan_gemms(name)
        weights = getattr(adapter, "model", self.backbone)
        with measure_gate.measuring():  # stages loading beside this one wait (layers/measure_gate.py)
            self.plan: KVPlan = plan_kv_cache(config, self.backbone, weights, self.kv_dtype, self.device,
                                              self._activation_peak(), name)
            # one extra page past the managed ones: the sink for CUDA-graph padding rows
            self.pad_block = self.plan.num_blocks
            allocate_kv_cache(self.backbone.attention_layers(), self.plan.num_blocks + 1, self.block_size,
                              self.kv_dtype, self.device)
        self.graphs: DecodeGraphs | None = None
        if self.device.type == "cuda" and not config.enforce_eager and config.graph_batch_sizes:
            max_len = config.cuda_graph_max_seq_len or config.max_model_len
            embeds = None if self.plain_lm else (self.backbone.config.hidden_size, self.dtype)
            self.graphs = DecodeGraphs(self._graph_step, config.graph_batch_sizes, -(-max_len // self.block_size),
                                       self.pad_block, self.block_size, self.device, embeds, self.mrope)
        self.prefill_graphs = self._prefill_graphs(name)

    def _prefill_graphs(self, name: str) -> PrefillGraphs | None:
        """Graphs for steps of up to `prefill_graph_tokens` tokens: on CUDA where the Triton paged prefill passed its
        check (None = 512); elsewhere only when set, run eagerly over the same static buffers (tests). Off for a stage
        with `prefill_graphs` off (or by the process default, aura_omni/env.py: A/B benchmarks)."""
        limit, cuda = self.config.prefill_graph_tokens, self.device.type == "cuda"
        if not self.config.use_prefill_graphs:
            return None
        if cuda:
            probe = torch.empty(1, dtype=self.dtype, device=self.device)
            head_dim = self.backbone.config.head_dim
            if self.config.enforce_eager or not attention_backend.triton_prefill_enabled(probe, head_dim):
                return None
            limit = 512 if limit is None else limit
        if not limit:
            return None
        try:
            return PrefillGraphs(self.backbone, graph_sizes(limit), self.config.max_num_seqs,
                                 -(-self.config.max_model_len // self.block_size), self.pad_block, self.block_size,
                                 self.dtype, self.device, _deepstack_layers(self.adapter), capture=cuda)
        except Exception as e:  # noqa: BLE001 - a failed capture costs speed, never the stage
            log.warning("%s: prefill graphs unavailable (%s: %s); prefill steps run eagerly", name, type(e).__name__, e)
            return None

    @property
    def num_blocks(self) -> int:
        return self.plan.num_blocks

    def _graph_step(self, inputs: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata):
        if not self.plain_lm:
            return (self.backbone(inputs, positions, meta),)
        model = self.adapter.model
        embeds = model.embed_tokens(inputs).to(self.dtype)
        # decode positions are equal on the three MRoPE streams, where MRoPE reduces to 1-D RoPE
        hidden = self.backbone(embeds, positions, meta)
        logits = model.compute_logits(hidden)
        return hidden, logits, logits.argmax(-1)

    @torch.inference_mode()
    def _activation_peak(self) -> int:
        """Peak extra memory of the largest step (a cache-less prefill of max_num_batched_tokens), CUDA only."""
        if self.device.type != "cuda" or self.config.num_kv_blocks or self.config.kv_cache_bytes:
            return 0
        n = min(self.config.max_num_batched_tokens, self.config.max_model_len)
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        x = torch.zeros(n, self.backbone.config.hidden_size, dtype=self.dtype, device=self.device)
        pos = torch.arange(n, device=self.device)
        hidden = self.backbone(x, pos.expand(3, -1) if self.mrope else pos, AttentionMetadata.prefill([n], self.device))
        self.adapter.compute_logits(hidden[-min(n, self.config.max_num_seqs):], [])
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device) - before
        del x, hidden
        torch.cuda.empty_cache()
        return peak

    @torch.inference_mode()
    def _plan_gemms(self, name: str) -> None:
        """Run every projection once at every padded row count, so cuBLAS plans them now, not in a request."""
        t = time.perf_counter()
        weights: dict[tuple, torch.Tensor] = {}
        for m in self.backbone.modules():
            for w in (m.weight if isinstance(m, nn.Linear) else None, getattr(m, "qkv_weight", None),
                      getattr(m, "gate_up_weight", None)):
                if isinstance(w, torch.Tensor) and w.dim() == 2:
                    weights.setdefault((tuple(w.shape), w.dtype), w)
        top = token_bucket(self.config.max_num_batched_tokens)
        inputs = {k: torch.zeros(top, k, dtype=self.dtype, device=self.device) for k in {w.shape[1] for w in weights.values()}}
        sizes = sorted({token_bucket(n) for n in range(17, top + 1)})
        for size in sizes:
            for w in weights.values():
                F.linear(inputs[w.shape[1]][:size], w)
        torch.cuda.current_stream(self.device).synchronize()  # not the device's: another stage may be capturing
        log.info("%s: planned %d GEMM shapes at %d padded token counts in %.2f s", name, len(weights), len(sizes),
                 time.perf_counter() - t)

    def _step_arrays(self, sched: list[ScheduledSeq], pad: int = 0) -> dict[str, np.ndarray]:
        """The step's integer inputs (numpy): starts, ends, qlens, tables, cu, slots and the flat rows that sample.
        `pad` > 0 appends a dummy sequence of that many tokens on the scratch page (token_bucket padding)."""
        bs = self.block_size
        tables_in = [s.seq.block_table for s in sched] + ([[self.pad_block] * -(-pad // bs)] if pad else [])
        n = len(tables_in)
        starts = np.fromiter([s.start for s in sched] + [0] * bool(pad), np.int64, n)
        ends = np.fromiter([s.end for s in sched] + [pad] * bool(pad), np.int64, n)
        qlens = ends - starts
        width = max(len(t) for t in tables_in)
        tables = np.full((n, width), self.pad_block, dtype=np.int32)
        for i, t in enumerate(tables_in):
            tables[i, :len(t)] = t
        cu = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(qlens, out=cu[1:])
        rows = np.repeat(np.arange(n), qlens)
        pos = np.arange(int(cu[-1])) - np.repeat(cu[:-1].astype(np.int64) - starts, qlens)
        slots = tables[rows, pos // bs].astype(np.int64) * bs + pos % bs
        samples = np.fromiter([s.samples for s in sched] + [False] * bool(pad), bool, n)
        return {"starts": starts, "ends": ends, "qlens": qlens, "tables": tables, "cu": cu, "slots": slots,
                "sample_rows": (cu[1:].astype(np.int64) - 1)[samples]}

    def _metadata(self, sched: list[ScheduledSeq], decode: bool, pad: int = 0) -> tuple[AttentionMetadata, torch.Tensor]:
        """The step's attention metadata and the flat rows that sample, uploaded in one copy."""
        a = self._step_arrays(sched, pad)
        starts, ends, qlens, tables, cu = a["starts"], a["ends"], a["qlens"], a["tables"], a["cu"]
        n = len(starts)
        bs = self.block_size
        arrays = [cu, a["slots"], tables, ends.astype(np.int32), a["sample_rows"]]
        has_context = bool(starts.any())
        if has_context and not decode:  # every key of every sequence, for one flash call over the batch
            krows = np.repeat(np.arange(n), ends)
            kpos = np.arange(int(ends.sum())) - np.repeat(np.cumsum(ends) - ends, ends)
            cu_k = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(ends, out=cu_k[1:])
            arrays += [tables[krows, kpos // bs].astype(np.int64) * bs + kpos % bs, cu_k]
        dev = upload(arrays, self.device)
        meta = AttentionMetadata(
            cu_seqlens_q=dev[0], query_lens=qlens.tolist(), context_lens=starts.tolist(), slot_mapping=dev[1],
            block_tables=dev[2], seq_lens=dev[3], max_seq_len=int(ends.max()),
            kv_slots=dev[5] if len(dev) > 5 else None, cu_seqlens_k=dev[6] if len(dev) > 5 else None)
        return meta, dev[4]

    def can_run_ahead(self, sched: list[ScheduledSeq]) -> bool:
        """Whether this step can be queued while the previous step's tokens are still PENDING on the host: the Talker's
        inputs never need them; a causal LM takes them from the device in a decode step, unless a penalty reads
        the token history on the host. A grammar row's matcher takes the previous token once this step's forward is
        queued (`_advance_grammars`)."""
        if getattr(self.adapter, "device_decode_inputs", False):
            return True
        return (self.plain_lm and all(s.num_tokens == 1 and s.start >= s.seq.prompt_len for s in sched)
                and not any(s.seq.params.needs_penalties for s in sched))

    @staticmethod
    def _advance_grammars(seqs: list, pending: LaunchedStep | None) -> None:
        """Feed constrained rows' PENDING input tokens (the queued step's samples) to their matchers: called after
        this step's forward is queued and before its mask is filled, so the grammar's host work (waiting for the
        token, consuming it, filling the mask) overlaps the device's forward."""
        rows = [s for s in seqs if s.grammar is not None and s.num_known_tokens < s.num_tokens]
        if pending is None or not rows:
            return
        sampled, ids, _ = pending.result()
        token_of = {id(s.seq): token for s, token in zip(sampled, ids)}
        for seq in rows:
            token = token_of.get(id(seq))
            if token is not None and token >= 0:  # NON_FINITE: the engine fails the request when it reads the step
                seq.grammar.accept(token, seq.num_known_tokens - seq.prompt_len)

    def _pending_ids(self, sched: list[ScheduledSeq], pending: LaunchedStep | None
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(rows of this decode step, their input ids) for rows whose input token is still PENDING on the host: the
        ids the queued step sampled, gathered on the device. None when every input is known."""
        if pending is None:
            return None
        rows = [i for i, s in enumerate(sched) if s.seq.num_known_tokens < s.seq.num_tokens]
        if not rows:
            return None
        where = {id(s.seq): i for i, s in enumerate(pending.sampling)}
        index = upload_async(torch.tensor([rows, [where[id(sched[i].seq)] for i in rows]]), self.device)
        return index[0], pending.device_ids[index[1]]

    def _graph_decode(self, sched: list[ScheduledSeq], known: tuple[torch.Tensor, torch.Tensor] | None = None
                      ) -> tuple[int, tuple[torch.Tensor, ...]] | None:
        """Replay a captured decode graph for this step if one fits; (batch, outputs) or None. `known`: the
        device-side input ids of rows whose input is PENDING on the host (`_pending_ids`)."""
        if self.graphs is None:
            return None
        width = max(len(s.seq.block_table) for s in sched)
        if not self.graphs.fits(len(sched), width):
            return None
        seqs = [s.seq for s in sched]
        bs = self.block_size
        g = self.graphs.size_for(len(seqs))
        last = [s.num_tokens - 1 for s in seqs]
        positions = [p + (s.mm.rope_delta if s.mm is not None else 0) for p, s in zip(last, seqs)]
        slots = [s.block_table[p // bs] * bs + p % bs for p, s in zip(last, seqs)]
        ids = [s.token_id(p) for p, s in zip(last, seqs)] if self.plain_lm else []
        self.graphs.fill(g, ids, positions, slots, [p + 1 for p in last], [s.block_table for s in seqs])
        if self.plain_lm:
            return len(seqs), self.graphs.run(g, ids=known)
        inputs = self.adapter.decode_inputs(seqs, self.device)
        return len(seqs), self.graphs.run(g, inputs.embeds.to(self.dtype), inputs.positions)

    def _sample(self, hidden: torch.Tensor, seqs) -> torch.Tensor:
        """Token ids of the sampling rows: the adapter's own sampler if it has one (the Talker's frame decoder),
        else the engine's over its logits."""
        own = getattr(self.adapter, "sample", None)
        if own is not None:
            return own(hidden, seqs)
        return self.sampler(self.adapter.compute_logits(hidden, seqs), seqs)

    @torch.inference_mode()
    def launch(self, out: SchedulerOutput, ahead: bool = False, pending: LaunchedStep | None = None) -> LaunchedStep:
        """Queue one step on the device; its sampled tokens (and extras) come back through the returned handle
        (`ahead`: the caller queues another step before reading them). `pending`: the step queued before this one,
        whose tokens some rows here take as input (`can_run_ahead` must have said yes)."""
        with on_device(self.device), kernel_switches.using(self.kernels):
            return self._launch(out.scheduled, ahead, pending)

    def _launch(self, sched: list[ScheduledSeq], ahead: bool, pending: LaunchedStep | None) -> LaunchedStep:
        decode = all(s.num_tokens == 1 and s.start >= s.seq.prompt_len for s in sched)
        known = self._pending_ids(sched, pending) if self.plain_lm and decode else None
        replayed = self._graph_decode(sched, known) if decode else None
        if replayed is not None:
            b, outputs = replayed
            sampling = sched
            seqs = [s.seq for s in sched]
            last = outputs[0][:b]
            if self.plain_lm:
                logits, greedy = outputs[1][:b], outputs[2][:b]
                if all(is_plain_greedy(s) for s in seqs):
                    token_ids = greedy
                else:
                    self._advance_grammars(seqs, pending)
                    token_ids = self.sampler(logits, seqs)
            else:
                token_ids = self._sample(last, seqs)
        else:
            tokens = sum(s.end - s.start for s in sched)
            graph = None
            if self.prefill_graphs is not None:
                graph = self.prefill_graphs.size_for(tokens, len(sched), max(len(s.seq.block_table) for s in sched))
            pad = token_bucket(tokens) - tokens if self.pad_tokens and not decode and graph is None else 0
            if decode and known is not None:
                inputs: StepInputs = self.adapter.decode_inputs([s.seq for s in sched], self.device, known)
            elif decode:
                inputs = self.adapter.decode_inputs([s.seq for s in sched], self.device)
            else:
                inputs = self.adapter.build_inputs([Piece(s.seq, s.start, s.end) for s in sched], self.device)
            embeds, positions = inputs.embeds.to(self.dtype), inputs.positions
            if graph is not None:
                a = self._step_arrays(sched)
                hidden = self.prefill_graphs.run(graph, a["slots"], a["cu"], a["ends"].astype(np.int32), a["tables"],
                                                 embeds, positions, inputs.deepstack)
                ends = upload_async(torch.from_numpy(a["sample_rows"]), self.device)
            else:
                meta, ends = self._metadata(sched, decode, pad)
                if pad:
                    embeds = torch.cat([embeds, embeds.new_zeros(pad, embeds.shape[1])])
                    positions = torch.cat([positions, positions.new_zeros(*positions.shape[:-1], pad)], -1)
                hidden = self.backbone(embeds, positions, meta, inputs.deepstack)
            sampling = [s for s in sched if s.samples]
            if not sampling:
                return LaunchedStep([], None, None)
            last = hidden[ends]
            seqs = [s.seq for s in sampling]
            self._advance_grammars(seqs, pending)
            token_ids = self._sample(last, seqs)
        # one reduction over the sampled rows: a numerical fault (NaN / inf) fails its request instead of streaming
        # whatever the argmax of NaN is (token 0, "!", for AURA)
        return LaunchedStep(sampling, token_ids, self.adapter.after_sample(seqs, last, token_ids), ahead,
                            finite=torch.isfinite(last).all(-1))

    def shutdown(self) -> None:
        self.graphs = self.prefill_graphs = None
        free_kv_cache(self.backbone.attention_layers())
