"""Turns a scheduled step into tensors, runs the model, samples.

Owns the device side of a stage: the KV pages (sized by engine/memory.py), the attention kernel
choice, the decode CUDA graphs and the sampler. The scheduler's plain data comes in; one sampled
token (and the adapter's per-step `extra`) per sequence that reached its last token comes out.
"""

import logging
from typing import Any

import torch

from aura_omni.engine.config import EngineConfig
from aura_omni.engine.cuda_graphs import DecodeGraphs
from aura_omni.engine.kv_cache import allocate_kv_cache, free_kv_cache
from aura_omni.engine.memory import KVPlan, plan_kv_cache
from aura_omni.engine.model_api import ModelAdapter, Piece, StepInputs
from aura_omni.engine.scheduler import ScheduledSeq, SchedulerOutput
from aura_omni.layers import attention_backend
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.layers.sampler import Sampler

log = logging.getLogger(__name__)


def _dtype_of(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


class ModelRunner:
    def __init__(self, adapter: ModelAdapter, config: EngineConfig, name: str = "stage"):
        self.adapter = adapter
        self.config = config
        self.backbone = adapter.backbone
        self.device = next(self.backbone.parameters()).device
        self.dtype = _dtype_of(self.backbone)
        self.kv_dtype = getattr(torch, config.kv_cache_dtype) if config.kv_cache_dtype else self.dtype
        self.block_size = config.block_size
        self.sampler = Sampler()
        self.mrope = self.backbone.config.mrope_section is not None
        attention_backend.select_backend(self.device, self.dtype, config.fast_attention)
        weights = getattr(adapter, "model", self.backbone)
        self.plan: KVPlan = plan_kv_cache(config, self.backbone, weights, self.kv_dtype, self.device,
                                          self._activation_peak(), name)
        # one extra page past the managed ones: the sink for CUDA-graph padding rows
        self.pad_block = self.plan.num_blocks
        allocate_kv_cache(self.backbone.attention_layers(), self.plan.num_blocks + 1, self.block_size,
                          self.kv_dtype, self.device)
        self.graphs: DecodeGraphs | None = None
        if self.device.type == "cuda" and not config.enforce_eager and config.cuda_graph_batch_sizes:
            max_len = config.cuda_graph_max_seq_len or config.max_model_len
            self.graphs = DecodeGraphs(self.backbone, config.cuda_graph_batch_sizes, -(-max_len // self.block_size),
                                       self.pad_block, self.block_size, self.backbone.config.hidden_size,
                                       self.dtype, self.device, self.mrope)

    @property
    def num_blocks(self) -> int:
        return self.plan.num_blocks

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

    def _metadata(self, sched: list[ScheduledSeq]) -> AttentionMetadata:
        bs = self.block_size
        slots, cu = [], [0]
        for s in sched:
            pos = torch.arange(s.start, s.end)
            table = torch.tensor(s.seq.block_table, dtype=torch.long)
            slots.append(table[pos // bs] * bs + pos % bs)
            cu.append(cu[-1] + s.num_tokens)
        width = max(len(s.seq.block_table) for s in sched)
        tables = torch.full((len(sched), width), self.pad_block, dtype=torch.int32)
        for i, s in enumerate(sched):
            tables[i, :len(s.seq.block_table)] = torch.tensor(s.seq.block_table, dtype=torch.int32)
        seq_lens = [s.end for s in sched]
        dev = self.device
        return AttentionMetadata(
            cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=dev),
            query_lens=[s.num_tokens for s in sched],
            context_lens=[s.start for s in sched],
            slot_mapping=torch.cat(slots).to(dev),
            block_tables=tables.to(dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            max_seq_len=max(seq_lens),
        )

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> tuple[list[ScheduledSeq], list[int], list[Any] | None]:
        """Run one step. Returns the sequences that sampled, their new tokens and per-step extras."""
        sched = out.scheduled
        meta = self._metadata(sched)
        decode = all(s.num_tokens == 1 and s.start >= s.seq.prompt_len for s in sched)
        if decode:
            inputs: StepInputs = self.adapter.decode_inputs([s.seq for s in sched], self.device)
        else:
            inputs = self.adapter.build_inputs([Piece(s.seq, s.start, s.end) for s in sched], self.device)
        embeds = inputs.embeds.to(self.dtype)
        if decode and inputs.deepstack is None and self.graphs is not None \
                and self.graphs.fits(len(sched), meta.block_tables.shape[1]):
            hidden = self.graphs.run(embeds, inputs.positions, meta)
        else:
            hidden = self.backbone(embeds, inputs.positions, meta, inputs.deepstack)
        sampling = [s for s in sched if s.samples]
        if not sampling:
            return [], [], None
        ends = torch.tensor([meta_end - 1 for s, meta_end in zip(sched, meta.cu_seqlens_q[1:].tolist()) if s.samples],
                            device=self.device)
        last = hidden[ends]
        seqs = [s.seq for s in sampling]
        logits = self.adapter.compute_logits(last, seqs)
        token_ids = self.sampler(logits, seqs)
        extras = self.adapter.after_sample(seqs, last, token_ids)
        return sampling, token_ids.tolist(), extras

    def shutdown(self) -> None:
        self.graphs = None
        free_kv_cache(self.backbone.attention_layers())
