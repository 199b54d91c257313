"""Deploy-file stage settings -> engine settings, and per-request sampling merged over the stage defaults."""

import dataclasses

import torch

from aura_omni.deploy import CODEC_NUM_QUANTIZERS, ConnectorExtra, SamplingParams as DeploySampling, Stage
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.stages.code2wav import window_schedule

# Request keys (OpenAI / vLLM spellings) that map onto engine SamplingParams fields.
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "logit_bias", "seed", "stop_token_ids", "stop", "include_stop_str_in_output",
                 "min_tokens", "max_tokens", "ignore_eos")


def engine_config(stage: Stage, defaults: EngineConfig | None = None, *,
                  cpu_kv_cache_bytes: int | None = None) -> EngineConfig:
    """The stage's engine settings: `defaults` (the model family's own, e.g. the Talker's; else EngineConfig's) with
    the deploy stage's fields laid over them. The one place a deploy stage becomes an EngineConfig: every loader calls
    it, so every field the deploy schema accepts for an engine stage reaches its engine (config.py refuses the rest).
    On CUDA the KV budget is the stage's gpu_memory_utilization share; `cpu_kv_cache_bytes` sets it on the CPU."""
    fields = dict(
        max_num_seqs=stage.max_num_seqs,
        enable_prefix_caching=stage.enable_prefix_caching,
        gpu_memory_utilization=stage.gpu_memory_utilization,
        enforce_eager=stage.enforce_eager,
        async_scheduling=stage.async_scheduling,
        kv_cache_bytes=cpu_kv_cache_bytes,
        prompt_hold_factor=stage.admission.hold_factor,
        prompt_max_hold_s=stage.admission.max_hold_ms / 1000,
    )
    if stage.max_model_len is not None:
        fields["max_model_len"] = stage.max_model_len
    if stage.max_num_batched_tokens is not None:
        fields["max_num_batched_tokens"] = stage.max_num_batched_tokens
    k = stage.kernels
    if k.fast_attention is not None:
        fields["fast_attention"] = k.fast_attention
    fields.update({name: value for name, value in (("gemv", k.gemv), ("pdl", k.pdl), ("prefill_graphs", k.prefill_graphs),
                                                   ("prefill_graph_tokens", k.prefill_graph_tokens),
                                                   ("stage_stream", k.stage_stream)) if value is not None})
    return dataclasses.replace(defaults, **fields) if defaults is not None else EngineConfig(**fields)


def code2wav_settings(stage: Stage, codec: ConnectorExtra) -> dict:
    """The Code2Wav stage's fields for `Qwen3TTS.configure_code2wav`: its batch bound (streams and frames a step), its
    batch wait, its dtype (auto: float32, what qwen-tts decodes in), and CUDA graphs for the window lengths of the codec
    schedule unless `enforce_eager`."""
    return dict(max_batch=stage.max_num_seqs, max_frames=code2wav_max_frames(stage),
                windows=window_schedule(codec.first_window, codec.codec_chunk_frames),
                batch_wait_s=codec.codec_batch_wait_ms / 1000,
                cuda_graphs=not stage.enforce_eager,
                dtype=torch.float32 if stage.dtype == "auto" else getattr(torch, stage.dtype))


def code2wav_max_frames(stage: Stage) -> int | None:
    """Frames one batched Code2Wav decode takes at most (`Code2WavBatch`): its max_num_batched_tokens, 16 codes a
    frame; None when unset (then only max_num_seqs bounds a step)."""
    if stage.max_num_batched_tokens is None:
        return None
    return stage.max_num_batched_tokens // CODEC_NUM_QUANTIZERS


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
