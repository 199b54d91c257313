"""Deploy-file stage settings -> engine settings, and per-request sampling merged over the stage defaults."""

from aura_omni.config import SamplingParams as DeploySampling, Stage
from aura_omni.engine.config import EngineConfig
from aura_omni.engine.sampling_params import SamplingParams

# Request keys (OpenAI / vLLM spellings) that map onto engine SamplingParams fields.
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "logit_bias", "seed", "stop_token_ids", "stop", "include_stop_str_in_output",
                 "min_tokens", "max_tokens", "ignore_eos")


def engine_config(stage: Stage, *, cpu_kv_cache_bytes: int | None = None) -> EngineConfig:
    fields = dict(
        max_num_seqs=stage.max_num_seqs,
        enable_prefix_caching=stage.enable_prefix_caching,
        gpu_memory_utilization=stage.gpu_memory_utilization,
        enforce_eager=stage.enforce_eager,
        async_scheduling=stage.async_scheduling,
        kv_cache_bytes=cpu_kv_cache_bytes,
    )
    if stage.max_model_len is not None:
        fields["max_model_len"] = stage.max_model_len
    if stage.max_num_batched_tokens is not None:
        fields["max_num_batched_tokens"] = stage.max_num_batched_tokens
    return EngineConfig(**fields)


def sampling_params(defaults: DeploySampling, request: dict | None = None, **forced) -> SamplingParams:
    """Deploy defaults, then the request's own values, then `forced` (e.g. stage stop ids, merged in)."""
    merged = {k: v for k, v in defaults.model_dump().items() if k in SAMPLING_KEYS and v is not None}
    for key, value in (request or {}).items():
        if key in SAMPLING_KEYS and value is not None:
            merged[key] = value
    if "logit_bias" in merged:  # JSON object keys arrive as strings
        merged["logit_bias"] = {int(k): float(v) for k, v in merged["logit_bias"].items()}
    for key, value in forced.items():
        if key == "stop_token_ids":
            merged[key] = sorted(set(merged.get(key, [])) | set(value))
        else:
            merged[key] = value
    return SamplingParams(**merged)
