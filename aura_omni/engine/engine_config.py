"""Engine settings of one autoregressive stage: one dataclass, validated on construction."""

from dataclasses import dataclass, field

from aura_omni import env
from aura_omni.layers.kernel_switches import KernelSwitches


@dataclass
class EngineConfig:
    max_model_len: int = 4096  # prompt + output tokens of one sequence
    max_num_seqs: int = 64  # sequences running at once
    max_num_batched_tokens: int = 2048  # tokens per step (prefill chunks + decodes)
    block_size: int = 16  # tokens per KV block
    enable_prefix_caching: bool = False
    # KV budget. CUDA: this fraction of the device's total memory is this stage's share (weights,
    # activation peak and KV cache together). CPU (or when set): kv_cache_bytes is the KV budget itself.
    gpu_memory_utilization: float = 0.9
    kv_cache_bytes: int | None = None
    num_kv_blocks: int | None = None  # overrides both budgets (tests, benchmarks)
    kv_cache_dtype: str | None = None  # None = the model's dtype
    enforce_eager: bool = False  # no CUDA graphs
    cuda_graph_batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 24, 32, 48, 64])
    cuda_graph_max_seq_len: int | None = None  # decode graphs gather up to this context; None = max_model_len
    # Kernel switches of this stage (deploy `kernels:`); None: the process default (aura_omni/env.py), on.
    fast_attention: bool = True  # flash / Triton attention and fused layers on CUDA (each checked against torch first)
    gemv: bool | None = None  # one-row Triton GEMVs
    pdl: bool | None = None  # programmatic dependent launch of the Triton kernels
    prefill_graphs: bool | None = None  # graphs of short prefill steps, see prefill_graph_tokens
    stage_stream: bool | None = None  # a CUDA stream of the stage's own, for stages that opt in
    # Eager (prefill) steps padded to a few token counts: cuBLAS plans each new GEMM row count on the host
    # (about a millisecond per weight shape), so an unpadded prefill pays that on almost every request.
    # None = on for CUDA. The padding rows form a dummy sequence whose K/V go to the scratch page.
    pad_prefill_tokens: bool | None = None
    # Non-decode steps of up to this many tokens replay a CUDA graph of the backbone (engine/prefill_graphs.py):
    # short prompts and prefix-cached turns are host-bound when eager. None = 512 on CUDA (where the Triton paged
    # prefill passes its check and not enforce_eager); 0 = off. Set on CPU, the same path runs eagerly (tests).
    prefill_graph_tokens: int | None = None
    # Queue each step before the previous one's tokens are back (engine/llm_engine.py): the host's work between
    # steps then overlaps the device's (steps that need the tokens on the host still wait for them).
    async_scheduling: bool = True
    # New prompts held while others decode, to share one prompt step (the ASR stage: stages/asr/prompt_hold.py;
    # deploy `admission`): 0 = taken at the next step
    prompt_hold_factor: float = 0.0
    prompt_max_hold_s: float = 0.1

    @property
    def kernels(self) -> KernelSwitches:
        return KernelSwitches.resolve(self.fast_attention, self.gemv, self.pdl)

    @property
    def graph_batch_sizes(self) -> list[int]:
        """The decode graphs' batch sizes: `cuda_graph_batch_sizes` up to max_num_seqs, and max_num_seqs itself, so a
        full batch replays a graph rather than running eagerly."""
        sizes = {b for b in self.cuda_graph_batch_sizes if 0 < b <= self.max_num_seqs}
        return sorted(sizes | {self.max_num_seqs}) if sizes else []

    @property
    def use_prefill_graphs(self) -> bool:
        return env.current().prefill_graphs if self.prefill_graphs is None else self.prefill_graphs

    @property
    def use_stage_stream(self) -> bool:
        return env.current().stage_streams if self.stage_stream is None else self.stage_stream

    def __post_init__(self):
        checks = [
            (self.max_model_len >= 1, "max_model_len must be >= 1"),
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (self.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
            (self.block_size >= 1, "block_size must be >= 1"),
            (0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization must be in (0, 1]"),
            (self.kv_cache_bytes is None or self.kv_cache_bytes > 0, "kv_cache_bytes must be > 0"),
            (self.num_kv_blocks is None or self.num_kv_blocks > 0, "num_kv_blocks must be > 0"),
            (self.prefill_graph_tokens is None or self.prefill_graph_tokens >= 0, "prefill_graph_tokens must be >= 0"),
            (self.prompt_hold_factor >= 0, "prompt_hold_factor must be >= 0"),
            (self.prompt_max_hold_s > 0, "prompt_max_hold_s must be > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"engine config: {message}")
