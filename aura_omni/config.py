"""Deploy YAML schema (the vLLM-Omni `aura_omni` / `qwen3_tts` deploy files), validated at start.

A deploy file names a `pipeline` topology, inter-stage `connectors`, per-stage engine arguments in
`stages[]`, and per-platform overrides (`platforms.<name>.stages[]`, merged over `stages` by
`stage_id`). Every mistake is refused with the file and the field path, e.g.
`configs/x.yaml: stages[1].gpu_memory_utilization: must be <= 1 (got 7)`.

Which stages exist decides which endpoints the server offers: a stage's role (`model_stage`) is
given explicitly or follows from its `stage_id` in the pipeline's upstream layout.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .engine.sampling_params import MAX_TOP_K, SEED_RANGE
from .media.limits import Limits

# Roles a stage can play; spelled as upstream's `model_stage`.
ASR, AURA, TALKER, CODE2WAV = "asr", "aura", "qwen3_tts", "code2wav"
STAGE_ROLES = (ASR, AURA, TALKER, CODE2WAV)

# Upstream stage layouts by `stage_id` (vllm-omni models/aura_omni/pipeline.py, models/qwen3_tts/pipeline.py).
PIPELINE_LAYOUTS: dict[str, dict[int, str]] = {
    "aura_omni": {0: ASR, 1: AURA, 2: TALKER, 3: CODE2WAV},
    "qwen3_tts": {0: TALKER, 1: CODE2WAV},
}


class DeployConfigError(ValueError):
    """A deploy file that cannot be served; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SamplingParams(_Strict):
    """The subset of vLLM's SamplingParams that deploy files use (stage defaults)."""

    n: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, le=MAX_TOP_K)
    min_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    min_tokens: int | None = Field(None, ge=0)
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    repetition_penalty: float | None = Field(None, gt=0)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None
    detokenize: bool | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    logprobs: int | None = None


class SubtalkerSamplingParams(_Strict):
    """Sampling of the Qwen3-TTS code predictor ("sub-talker") that fills codebooks 1..15."""

    do_sample: bool | None = None
    temperature: float | None = Field(None, ge=0)
    top_k: int | None = Field(None, ge=-1, le=MAX_TOP_K)
    top_p: float | None = Field(None, gt=0, le=1)


class ConnectorExtra(_Strict):
    """`connectors.<name>.extra`: transport and Code2Wav chunking (upstream defaults in comments)."""

    shm_threshold_bytes: int | None = Field(None, ge=0)
    codec_streaming: bool | None = None
    connector_get_sleep_s: float | None = Field(None, ge=0)
    connector_get_max_wait_first_chunk: int | None = Field(None, ge=0)
    connector_get_max_wait: int | None = Field(None, ge=0)
    codec_chunk_frames: int = Field(25, ge=1)  # 25 frames = 2.0 s at 12.5 Hz
    codec_left_context_frames: int = Field(25, ge=0)  # processor default 25; AURA sets 72
    initial_codec_chunk_frames: int = Field(0, ge=0)  # 0 = dynamic power-of-two first chunk
    decode_cudagraph_capture_sizes: list[int] | None = None
    ref_code_context_frames: int | None = Field(None, ge=0)  # default: left context
    codec_chunk_ramp: list[int] | None = None
    codec_chunk_adaptive: bool | None = None
    codec_chunk_min_frames: int | None = Field(None, ge=1)
    codec_chunk_safety_margin_ms: float | None = Field(None, ge=0)
    codec_chunk_ramp_divisor: float | None = Field(None, gt=0)
    codec_chunk_ramp_delta_min: int | None = Field(None, ge=0)
    # our extension: how long Code2Wav may hold a stream's later window for other streams' to fill its step (never a
    # first window, never past 150 ms before its stream's audio runs out); 0: step as soon as one is waiting
    codec_batch_wait_ms: float = Field(250.0, ge=0)

    @property
    def first_window(self) -> int:
        """Frames of a stream's first Code2Wav window (0 = dynamic: the smallest step, 2 frames)."""
        return min(self.initial_codec_chunk_frames or 2, self.codec_chunk_frames)


class Connector(_Strict):
    name: str = "SharedMemoryConnector"
    extra: ConnectorExtra = Field(default_factory=ConnectorExtra)


class Kernels(_Strict):
    """Our extension: per-stage kernel switches (None: the process default, `AURA_OMNI_<NAME>` env, on). Each kernel is
    still used only where its self-check passed on the stage's device (layers/attention_backend.py)."""

    fast_attention: bool | None = None  # flash / Triton attention and fused layers; off: plain torch
    gemv: bool | None = None  # one-row Triton GEMVs (AURA_OMNI_GEMV)
    pdl: bool | None = None  # programmatic dependent launch of our Triton kernels (AURA_OMNI_PDL)
    prefill_graphs: bool | None = None  # CUDA graphs of short prefill steps (AURA_OMNI_PREFILL_GRAPHS)
    stage_stream: bool | None = None  # a CUDA stream of the stage's own; asr only (AURA_OMNI_STAGE_STREAMS)


class Stage(_Strict):
    """One engine stage: which checkpoint, where it runs, and its engine/sampling defaults."""

    stage_id: int = Field(ge=0)
    model: str
    model_stage: Literal["asr", "aura", "qwen3_tts", "code2wav"] | None = None
    devices: str = "0"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_num_seqs: int = Field(8, ge=1)
    max_model_len: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_prefix_caching: bool = False
    async_scheduling: bool = False
    trust_remote_code: bool = False  # accepted; checkpoint code is never executed
    enforce_eager: bool = False
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    load_format: Literal["auto", "safetensors", "dummy"] = "auto"
    default_sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    subtalker_sampling_params: SubtalkerSamplingParams | None = None
    kernels: Kernels = Field(default_factory=Kernels)
    num_replicas: int = Field(1, ge=1)  # copies of the stage, each a Ray actor (distributed_executor_backend: ray)
    input_connectors: dict[str, str] = Field(default_factory=dict)
    output_connectors: dict[str, str] = Field(default_factory=dict)

    @field_validator("devices", mode="before")
    @classmethod
    def _devices_as_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v  # `devices: 0` in YAML is an int


class StageOverride(_Strict):
    """`platforms.<name>.stages[]`: any stage field except the id, merged by `stage_id`."""

    stage_id: int = Field(ge=0)
    model: str | None = None
    devices: str | None = None
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_model_len: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_prefix_caching: bool | None = None
    async_scheduling: bool | None = None
    trust_remote_code: bool | None = None
    enforce_eager: bool | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] | None = None
    load_format: Literal["auto", "safetensors", "dummy"] | None = None
    default_sampling_params: SamplingParams | None = None
    subtalker_sampling_params: SubtalkerSamplingParams | None = None
    kernels: Kernels | None = None
    num_replicas: int | None = Field(None, ge=1)


class Platform(_Strict):
    stages: list[StageOverride] = Field(default_factory=list)


class DuplexSession(_Strict):
    max_sessions: int = Field(1, ge=1)
    disconnect_grace_s: float = Field(30.0, ge=0)  # a dropped duplex socket's session is kept this long for resume


class DeployConfig(_Strict):
    pipeline: Literal["aura_omni", "qwen3_tts"] = "aura_omni"
    async_chunk: bool = False
    session_mode: Literal["turn", "duplex"] = "turn"
    duplex_session: DuplexSession | None = None
    connectors: dict[str, Connector] = Field(default_factory=dict)
    stages: list[Stage] = Field(min_length=1)
    platforms: dict[str, Platform] = Field(default_factory=dict)
    limits: dict[str, float] = Field(default_factory=dict)  # media.limits.Limits fields; `serve --max-...` flags win
    distributed_executor_backend: Literal["ray"] | None = None  # None: every stage in this process; docs/ray.md
    ray_address: str | None = None  # an existing Ray cluster (`serve --ray-address`); None: a local Ray
    # realtime sessions: OpenAI voice name -> a Talker speaker or registered voice; None: session/config.py's table
    voice_aliases: dict[str, str] | None = None
    cache_dir: str | None = None  # compile caches, and the voice library's default home (`serve --cache-dir`)
    voice_dir: str | None = None  # registered voices, vLLM-Omni's custom_voice_dir (`serve --voice-dir`)
    _source: str = PrivateAttr("<memory>")  # the file it came from, for messages

    @field_validator("limits")
    @classmethod
    def _known_limits(cls, v: dict[str, float]) -> dict[str, float]:
        Limits.from_values(v)  # unknown or non-positive limits are refused at start
        return v

    @property
    def source(self) -> str:
        return self._source

    @model_validator(mode="after")
    def _check_topology(self) -> DeployConfig:
        ids = [s.stage_id for s in self.stages]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"stages: stage_id {dup[0]} appears more than once")
        layout = PIPELINE_LAYOUTS[self.pipeline]
        for i, s in enumerate(self.stages):
            if s.model_stage is None and s.stage_id not in layout:
                raise ValueError(
                    f"stages[{i}].model_stage: stage_id {s.stage_id} has no role in pipeline {self.pipeline!r} "
                    f"(ids {sorted(layout)}); set model_stage to one of {list(STAGE_ROLES)}")
        roles = [self.role_of(s) for s in self.stages]
        for r in (ASR, AURA):
            if roles.count(r) > 1:
                raise ValueError(f"stages: more than one stage has role {r!r}")
        # Talkers come with a Code2Wav stage of the same checkpoint; several pairs serve several task types (the
        # demo's Base beside its CustomVoice)
        talkers = sorted(s.model for s in self.stages if self.role_of(s) == TALKER)
        decoders = sorted(s.model for s in self.stages if self.role_of(s) == CODE2WAV)
        if bool(talkers) != bool(decoders):
            have, lack = (TALKER, CODE2WAV) if not decoders else (CODE2WAV, TALKER)
            raise ValueError(f"stages: a {have} stage needs a {lack} stage (Talker codes are decoded by Code2Wav)")
        if talkers != decoders:
            raise ValueError(f"stages: each {TALKER} stage needs a {CODE2WAV} stage loading the same checkpoint "
                             f"(got {talkers} and {decoders})")
        if len(set(talkers)) != len(talkers):
            raise ValueError(f"stages: more than one {TALKER} stage loads {talkers[0]!r}")
        for i, s in enumerate(self.stages):
            for field, edges in (("input_connectors", s.input_connectors), ("output_connectors", s.output_connectors)):
                for edge, name in edges.items():
                    if name not in self.connectors:
                        raise ValueError(f"stages[{i}].{field}.{edge}: unknown connector {name!r} "
                                         f"(defined: {sorted(self.connectors)})")
        for pname, plat in self.platforms.items():
            for j, o in enumerate(plat.stages):
                if o.stage_id not in ids:
                    raise ValueError(f"platforms.{pname}.stages[{j}].stage_id: no stage has id {o.stage_id}")
        return self

    # --- queries -------------------------------------------------------------------------------

    def role_of(self, stage: Stage) -> str:
        return stage.model_stage or PIPELINE_LAYOUTS[self.pipeline][stage.stage_id]

    def code2wav_of(self, talker: Stage) -> Stage:
        """The Code2Wav stage that decodes `talker`'s codes (the one loading the same checkpoint)."""
        return next(s for s in self.stages if self.role_of(s) == CODE2WAV and s.model == talker.model)

    def stage(self, role: str) -> Stage | None:
        return next((s for s in self.stages if self.role_of(s) == role), None)

    @property
    def roles(self) -> set[str]:
        return {self.role_of(s) for s in self.stages}

    def codec_streaming(self) -> ConnectorExtra:
        """Chunking settings of the Talker -> Code2Wav edge (its output connector, else defaults)."""
        talker = self.stage(TALKER)
        if talker is not None:
            for name in talker.output_connectors.values():
                return self.connectors[name].extra
        return ConnectorExtra()

    def for_platform(self, platform: str) -> DeployConfig:
        """This config with `platforms.<platform>` overrides merged over `stages` by stage_id."""
        plat = self.platforms.get(platform)
        if plat is None:
            return self
        stages = []
        for s in self.stages:
            merged = s.model_dump(exclude_unset=True)  # unset fields stay unset: refusals look at what a file sets
            for o in plat.stages:
                if o.stage_id == s.stage_id:
                    merged.update(o.model_dump(exclude_unset=True))
            stages.append(Stage.model_validate(merged))
        return self.model_copy(update={"stages": stages})


# --- what this build honours ---------------------------------------------------------------------------
# A field the schema accepts but this build would ignore is refused with the reason, naming file and field (issue 13):
# a deploy file means what it says. docs/deploy.md lists every field and what it does here.

CODEC_NUM_QUANTIZERS = 16  # codes per Qwen3-TTS 12 Hz codec frame (Code2Wav counts "tokens" as codes)
CODEC_ATTENTION_WINDOW = 72  # Qwen3-TTS-Tokenizer-12Hz decoder `sliding_window`, frames
TALKER_MIN_TOKENS = 2  # qwen-tts generate(min_new_tokens=2), models/qwen3_tts/sampling.py MIN_NEW_TOKENS
TALKER_STOP_IDS = [2150]  # Qwen3-TTS talker codec stop id, always a stop
PLATFORMS = ("cuda", "cpu", "npu")  # keys of `platforms:`: the kind of the first stage's device
IN_PROCESS = "stages run in one process and hand their data through in-memory queues"
REFUSED_EXTRAS = {
    "shm_threshold_bytes": f"there is no shared-memory transport: {IN_PROCESS}",
    "connector_get_sleep_s": f"nothing polls: {IN_PROCESS}, whose consumers wake on arrival",
    "connector_get_max_wait_first_chunk": f"nothing polls: {IN_PROCESS}; a turn is bounded by its request timeout",
    "connector_get_max_wait": f"nothing polls: {IN_PROCESS}; a turn is bounded by its request timeout",
    "decode_cudagraph_capture_sizes": "Code2Wav captures a CUDA graph for each window length of its schedule "
                                      "(initial_codec_chunk_frames doubling up to codec_chunk_frames) at each batch "
                                      "size up to max_num_seqs by itself; set enforce_eager: true on the code2wav stage "
                                      "for none",
    "ref_code_context_frames": "the voice-clone reference codes prime the stateful Code2Wav decoder in full",
    **{k: "adaptive codec chunk scheduling is not implemented; windows are initial_codec_chunk_frames, then "
          "codec_chunk_frames" for k in ("codec_chunk_ramp", "codec_chunk_adaptive", "codec_chunk_min_frames",
                                          "codec_chunk_safety_margin_ms", "codec_chunk_ramp_divisor",
                                          "codec_chunk_ramp_delta_min")},
}
ANY = object()  # any value: the field cannot change what the stage does (e.g. a seed of a greedy decoder)
# default_sampling_params a stage applies; every other key must be absent or hold a value the stage acts on anyway.
HONOURED_SAMPLING = {
    ASR: {"max_tokens"},
    AURA: {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
           "seed", "stop_token_ids", "stop", "include_stop_str_in_output", "min_tokens", "max_tokens", "ignore_eos"},
    TALKER: {"temperature", "top_k", "top_p", "repetition_penalty", "seed", "max_tokens"},
    CODE2WAV: {"max_tokens"},  # codes of one request: checked against what the Talker can produce
}
NEUTRAL_SAMPLING = {"n": [1], "top_p": [1.0], "top_k": [-1, 0], "min_p": [0.0], "repetition_penalty": [1.0],
                    "presence_penalty": [0.0], "frequency_penalty": [0.0], "min_tokens": [0], "ignore_eos": [False],
                    "stop": [[]], "stop_token_ids": [[]], "logprobs": [None]}
MATCHING_SAMPLING = {  # what the stage does anyway, per role
    ASR: {"temperature": [0.0], "seed": ANY, "detokenize": [True], "skip_special_tokens": [True]},
    AURA: {"detokenize": [True], "skip_special_tokens": [False]},
    TALKER: {"min_tokens": [TALKER_MIN_TOKENS], "stop_token_ids": [[], TALKER_STOP_IDS], "detokenize": [False]},
    CODE2WAV: {"temperature": [0.0], "seed": ANY, "detokenize": [True, False]},
}
SAMPLING_WHY = {ASR: "the asr stage decodes greedily; per-request sampling goes in sampling_params_list",
                AURA: "the aura stage streams its text with special tokens kept (<|silent|> stays visible)",
                TALKER: "the Talker samples codec frames with temperature / top_k / top_p / repetition_penalty / seed",
                CODE2WAV: "Code2Wav is a deterministic decoder: it does not sample"}


def _device_name(devices: str) -> str:
    return devices.strip().removeprefix("cuda:")  # "0" and "cuda:0" are one GPU


def _is_cuda(devices: str) -> bool:
    return devices.strip().isdigit() or devices.strip().startswith("cuda")


def refusals(cfg: DeployConfig) -> list[tuple[str, str]]:
    """(field path, why) for every field this build would not honour as written."""
    out: list[tuple[str, str]] = []
    if cfg.pipeline == "qwen3_tts" and "async_chunk" in cfg.model_fields_set and not cfg.async_chunk:
        out.append(("async_chunk", "false asks Code2Wav to decode after the Talker finishes; this build always "
                                   "streams codec windows (set true)"))
    if cfg.session_mode == "duplex" and cfg.pipeline != "aura_omni":
        out.append(("session_mode", f"duplex sessions are an aura_omni pipeline mode (got pipeline {cfg.pipeline!r})"))
    for name, conn in cfg.connectors.items():
        where = f"connectors.{name}"
        if conn.name != "SharedMemoryConnector":
            out.append((f"{where}.name", f"only SharedMemoryConnector (single host): {IN_PROCESS} (got {conn.name!r})"))
        extra = conn.extra
        for key in sorted(extra.model_fields_set):
            if key in REFUSED_EXTRAS:
                out.append((f"{where}.extra.{key}", REFUSED_EXTRAS[key]))
        if "codec_streaming" in extra.model_fields_set and extra.codec_streaming is not True:
            out.append((f"{where}.extra.codec_streaming", "the Talker always streams codec frames to Code2Wav"))
        if ("codec_left_context_frames" in extra.model_fields_set
                and extra.codec_left_context_frames < CODEC_ATTENTION_WINDOW):
            out.append((f"{where}.extra.codec_left_context_frames",
                        f"the stateful Code2Wav decoder keeps every frame's state, so its audio equals the full "
                        f"decode, which a re-decoded left context of >= {CODEC_ATTENTION_WINDOW} frames (the decoder's "
                        f"attention window) stands for; a shorter, approximate context is not implemented "
                        f"(got {extra.codec_left_context_frames})"))
        if "initial_codec_chunk_frames" in extra.model_fields_set and extra.initial_codec_chunk_frames == 0:
            out.append((f"{where}.extra.initial_codec_chunk_frames",
                        "0 (a first window sized by load) is not implemented; give a frame count (absent: 2)"))
    talker = cfg.stage(TALKER)
    codec_edge = set(talker.output_connectors.values()) if talker is not None else set()
    used = set()
    for i, st in enumerate(cfg.stages):
        for field, edges in (("input_connectors", st.input_connectors), ("output_connectors", st.output_connectors)):
            used |= set(edges.values())
            role = cfg.role_of(st)
            if edges and not ((role == TALKER and field == "output_connectors")
                              or (role == CODE2WAV and field == "input_connectors")):
                out.append((f"stages[{i}].{field}", "only the Talker -> Code2Wav edge has a connector: the other "
                                                    "edges hand their data over in process"))
            elif role == CODE2WAV and set(edges.values()) - codec_edge:
                out.append((f"stages[{i}].{field}", f"must name the Talker's output connector "
                                                    f"({', '.join(sorted(codec_edge)) or 'none'}): its settings are "
                                                    f"the codec windows'"))
    for name in sorted(set(cfg.connectors) - used):
        out.append((f"connectors.{name}", "no stage uses it"))
    for name in sorted(set(cfg.platforms) - set(PLATFORMS)):
        out.append((f"platforms.{name}", f"a platform is one of {', '.join(PLATFORMS)} (a stage device's kind)"))
    if cfg.ray_address is not None and cfg.distributed_executor_backend != "ray":
        out.append(("ray_address", "a Ray cluster serves stages only with distributed_executor_backend: ray"))
    gpu_shares: dict[str, list[float]] = {}
    for i, st in enumerate(cfg.stages):
        role, where, given = cfg.role_of(st), f"stages[{i}]", st.model_fields_set
        if st.num_replicas > 1 and cfg.distributed_executor_backend != "ray":
            out.append((f"{where}.num_replicas", "replicas are Ray actors: set distributed_executor_backend: ray "
                                                 "(or serve --distributed-executor-backend ray)"))
        if "," in st.devices:
            out.append((f"{where}.devices", f"a stage runs on one device in this build (got {st.devices!r})"))
        if "gpu_memory_utilization" in given and _is_cuda(st.devices):
            gpu_shares.setdefault(_device_name(st.devices), []).append(st.gpu_memory_utilization)
        if st.subtalker_sampling_params is not None and role != TALKER:
            out.append((f"{where}.subtalker_sampling_params", "only the Talker has a code predictor (sub-talker)"))
        k = st.kernels
        if k.stage_stream and role != ASR:
            out.append((f"{where}.kernels.stage_stream", "only the asr stage runs on a stream of its own: AURA, the "
                                                         "Talker and Code2Wav hand device tensors to each other"))
        if role in (TALKER, CODE2WAV) and st.enable_prefix_caching:
            out.append((f"{where}.enable_prefix_caching", f"{role} prompts are embeddings without content hashes: "
                                                          "never cached"))
        sp = st.default_sampling_params
        for key in sorted(sp.model_fields_set - HONOURED_SAMPLING[role]):
            value = getattr(sp, key)
            ok = MATCHING_SAMPLING[role].get(key, NEUTRAL_SAMPLING.get(key, []))
            if ok is not ANY and value not in ok:
                out.append((f"{where}.default_sampling_params.{key}", f"{SAMPLING_WHY[role]} (got {value!r}; "
                                                                      f"accepted: {', '.join(map(repr, ok)) or 'none'})"))
        if role == CODE2WAV and talker is not None:
            out += _code2wav_refusals(cfg, st, talker, where)
    for device, shares in gpu_shares.items():
        if sum(shares) > 1 + 1e-9:
            out.append(("stages", f"the gpu_memory_utilization of the stages on GPU {device} add up to "
                                  f"{sum(shares):g} > 1 (each stage's share is its own)"))
    return out


def _code2wav_refusals(cfg: DeployConfig, st: Stage, talker: Stage, where: str) -> list[tuple[str, str]]:
    """Code2Wav is no engine here: one stateful decoder per stream, streams' windows decoded together in a batch, on
    the Talker's device."""
    out, given = [], st.model_fields_set
    if _device_name(st.devices) != _device_name(talker.devices):
        out.append((f"{where}.devices", f"Code2Wav runs on the Talker's device ({talker.devices!r}) in this build"))
    if st.load_format != talker.load_format:
        out.append((f"{where}.load_format", f"Code2Wav loads with the Talker's checkpoint ({talker.load_format!r})"))
    if "num_replicas" in given and st.num_replicas != talker.num_replicas:
        out.append((f"{where}.num_replicas", f"Code2Wav runs inside each Talker replica (the Qwen3-TTS facade), "
                                             f"so it has the Talker's num_replicas ({talker.num_replicas}); "
                                             f"remove the key or set it equal"))
    if "async_scheduling" in given and not st.async_scheduling:
        out.append((f"{where}.async_scheduling", "Code2Wav windows are always decoded while the Talker keeps "
                                                 "stepping (it never waits for them)"))
    window = cfg.codec_streaming().codec_chunk_frames * CODEC_NUM_QUANTIZERS
    if st.max_num_batched_tokens is not None and st.max_num_batched_tokens < window:
        out.append((f"{where}.max_num_batched_tokens", f"one codec window of codec_chunk_frames needs {window} codes "
                                                       f"per step (got {st.max_num_batched_tokens})"))
    if talker.max_model_len is not None:
        need = talker.max_model_len * CODEC_NUM_QUANTIZERS  # a Talker request produces fewer frames than this
        for field, value in (("max_model_len", st.max_model_len),
                             ("default_sampling_params.max_tokens", st.default_sampling_params.max_tokens)):
            if value is not None and value < need:
                out.append((f"{where}.{field}", f"a Talker request (max_model_len {talker.max_model_len}) may produce "
                                                f"{need} codes; Code2Wav would have to cut it (got {value})"))
    return out


# --- loading ---------------------------------------------------------------------------------------

def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _explain(err: dict) -> tuple[str, str]:
    """(field path, message) for one pydantic error, in plain words."""
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p and p.startswith(("function", "literal"))))
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        return _loc(loc), "unknown key"
    if kind == "missing":
        return _loc(loc), "required key is missing"
    bounds = {"less_than_equal": "<=", "less_than": "<", "greater_than_equal": ">=", "greater_than": ">"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        limit = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
        return _loc(loc), f"must be {bounds[kind]} {limit} (got {got!r})"
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        path, sep, rest = msg.partition(": ")
        if sep and loc == () and " " not in path:
            return path, rest
        return _loc(loc), msg
    return _loc(loc), f"{err['msg'].rstrip('.').lower()} (got {got!r})"


def parse_deploy_config(data: Any, source: str = "<memory>", default_model: str | None = None) -> DeployConfig:
    """Validate a parsed deploy mapping; `default_model` (the CLI's MODEL) fills stages without `model`."""
    if not isinstance(data, dict):
        raise DeployConfigError(f"{source}: the deploy file must be a mapping of keys (got {type(data).__name__})")
    if default_model and isinstance(data.get("stages"), list):
        data = dict(data, stages=[dict(s, model=s.get("model") or default_model) if isinstance(s, dict) else s
                                  for s in data["stages"]])
    try:
        cfg = DeployConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            path, msg = _explain(err)
            lines.append(f"{source}: {path}: {msg}" if path else f"{source}: {msg}")
        raise DeployConfigError("\n".join(lines)) from None
    cfg._source = source
    for name in ["", *cfg.platforms]:  # the file as written, and as each platform's overrides make it
        refused = refusals(cfg.for_platform(name) if name else cfg)
        if refused:
            on = f" (platforms.{name} merged)" if name else ""
            raise DeployConfigError("\n".join(f"{source}: {path}: {why}{on}" for path, why in refused))
    return cfg


def load_deploy_config(path: str | os.PathLike, default_model: str | None = None,
                       overrides: dict[str, Any] | None = None) -> DeployConfig:
    """Read and validate a deploy YAML; relative stage `model` paths resolve against the file's folder.
    `overrides` (top-level keys, from `serve` flags) replace the file's before it is checked, so a file whose
    replicas need Ray is valid when the flag asks for Ray."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DeployConfigError(f"{path}: cannot read deploy file ({e.strerror or e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DeployConfigError(f"{path}: not valid YAML ({e})") from None
    if overrides and isinstance(data, dict):
        data = {**data, **overrides}
    cfg = parse_deploy_config(data, str(path), default_model)
    for s in cfg.stages:
        if s.model.startswith(("./", "../")):
            s.model = str((path.parent / s.model).resolve())
    for key in ("cache_dir", "voice_dir"):  # a relative directory is the file's neighbour, as a relative model is
        value = getattr(cfg, key)
        if value and not Path(value).expanduser().is_absolute():
            setattr(cfg, key, str((path.parent / value).resolve()))
    return cfg


def single_model_config(model: str, pipeline: str = "qwen3_tts") -> DeployConfig:
    """The deploy config implied by `aura-omni serve MODEL` without --deploy-config (TTS checkpoints only)."""
    if pipeline != "qwen3_tts":
        raise DeployConfigError(f"serving {model!r} alone needs --deploy-config for pipeline {pipeline!r}")
    return parse_deploy_config({
        "pipeline": "qwen3_tts",
        "stages": [{"stage_id": 0, "model": model}, {"stage_id": 1, "model": model}],
    }, f"<serve {model}>")
