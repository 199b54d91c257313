"""Deploy YAML schema (the vLLM-Omni `aura_omni` / `qwen3_tts` deploy files), validated at start.

A deploy file names a `pipeline` topology, inter-stage `connectors`, per-stage engine arguments in
`stages[]`, and per-platform overrides (`platforms.<name>.stages[]`, merged over `stages` by
`stage_id`). Every mistake is refused with the file and the field path, e.g.
`configs/x.yaml: stages[1].gpu_memory_utilization: must be <= 1 (got 7)`.

Which stages exist decides which endpoints the server offers: a stage's role (`model_stage`) is
given explicitly or follows from its `stage_id` in the pipeline's upstream layout.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from aura_omni.engine.sampling_params import MAX_TOP_K, SEED_RANGE
from aura_omni.media.limits import Limits

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
    """Our extension: per-stage kernel switches (None: the process default, from the environment: aura_omni/env.py;
    on). Each kernel is
    still used only where its self-check passed on the stage's device (layers/attention_backend.py)."""

    fast_attention: bool | None = None  # flash / Triton attention and fused layers; off: plain torch
    gemv: bool | None = None  # one-row Triton GEMVs
    pdl: bool | None = None  # programmatic dependent launch of our Triton kernels
    prefill_graphs: bool | None = None  # CUDA graphs of short prefill steps
    prefill_graph_tokens: int | None = Field(None, ge=1)  # the longest step they replay (512); longer ones run eagerly
    stage_stream: bool | None = None  # a CUDA stream of the stage's own; asr only


class Admission(_Strict):
    """Our extension: when the asr stage takes new clips into its engine (stages/asr/prompt_hold.py). Clips added while
    others decode wait while their summed wait is under `hold_factor` x the delay their prompt step would add to the
    clips decoding, at most `max_hold_ms` and only while clips arrive closer together than that, so several share one
    prompt step. 0: each at the next step."""

    hold_factor: float = Field(0.0, ge=0)
    max_hold_ms: float = Field(100.0, gt=0)


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
    admission: Admission = Field(default_factory=Admission)
    # one step, add or call of the stage's loop running longer: stalled (/health 503, its requests fail); None: 60 s
    # on a GPU, ten times that on the CPU, where a real model's long prefill step can take minutes
    stall_s: float | None = Field(None, gt=0)
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
    admission: Admission | None = None
    stall_s: float | None = Field(None, gt=0)
    num_replicas: int | None = Field(None, ge=1)


class Platform(_Strict):
    stages: list[StageOverride] = Field(default_factory=list)


class TurnSettings(_Strict):
    """Our extension: how a turn runs. Each is on by default; off is the baseline of an A/B run (docs/benchmarks.md)."""

    prefix_prefill: bool = True  # a turn's prompt through its vision prefilled into AURA's prefix cache while ASR runs
    stream_talker_text: bool = True  # with async_chunk: AURA's text streamed into the Talker (False: by sentence)
    transcribe_ahead: bool = True  # server VAD: the speech transcribed in the silence before the commit


class DuplexSession(_Strict):
    max_sessions: int = Field(1, ge=1)
    disconnect_grace_s: float = Field(30.0, ge=0)  # a dropped duplex socket's session is kept this long for resume


class DeployConfig(_Strict):
    pipeline: Literal["aura_omni", "qwen3_tts"] = "aura_omni"
    async_chunk: bool = False
    turn: TurnSettings = Field(default_factory=TurnSettings)
    gc_freeze: bool = True  # start-up objects frozen out of garbage collection once warm (server/gc_pauses.py)
    # how long a thread may hold the interpreter while another waits for it (Python's default: 5 ms); every stage
    # thread gives it up at each torch call, so each call may wait this long behind the event loop (server/gil.py)
    gil_switch_interval_ms: float = Field(0.5, gt=0, le=100)
    # how often the C heap's free pages go back to the system (malloc_trim; 0: never): without it resident memory
    # keeps every peak's high-water mark (stages/heap_trim.py)
    heap_trim_interval_s: float = Field(10.0, ge=0, le=3600)
    session_mode: Literal["turn", "duplex"] = "turn"
    duplex_session: DuplexSession | None = None
    connectors: dict[str, Connector] = Field(default_factory=dict)
    stages: list[Stage] = Field(min_length=1)
    platforms: dict[str, Platform] = Field(default_factory=dict)
    limits: dict[str, float] = Field(default_factory=dict)  # media.limits.Limits fields; `serve --max-...` flags win
    distributed_executor_backend: Literal["ray"] | None = None  # None: every stage in this process; docs/ray.md
    # with `ray`: the stages (model_stage names) that run as Ray actors, the rest in this process; None: every stage
    ray_stages: list[str] | None = None
    ray_address: str | None = None  # an existing Ray cluster (`serve --ray-address`); None: a local Ray
    # stages (model_stage names) that run in a process of their own on this machine, without Ray: away from the
    # interpreter lock the event loop and the other stages share (placement/process_stages.py). A name: each stage of
    # that role in a process of its own; a list of names: their stages together in one process
    process_stages: list[str | list[str]] = Field(default_factory=list)
    # the stages of this process load on a thread each (pipeline/runtime.py `load_stages`); false: one after another
    parallel_load: bool = True
    # realtime sessions: OpenAI voice name -> a Talker speaker or registered voice; None: session/session_config.py's table
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

    def in_ray(self, stage: Stage) -> bool:
        """Whether the stage runs in a Ray actor (Code2Wav: in its Talker's)."""
        if self.distributed_executor_backend != "ray":
            return False
        role = self.role_of(stage)
        return self.ray_stages is None or (TALKER if role == CODE2WAV else role) in self.ray_stages

    def in_own_process(self, stage: Stage) -> bool:
        """Whether the stage runs in a process of its own (`process_stages`; Code2Wav: in its Talker's)."""
        return self.process_group_of(stage) is not None

    def process_group_of(self, stage: Stage) -> int | None:
        """The `process_stages` entry whose process runs the stage (Code2Wav: its Talker's), None: the server's."""
        role = self.role_of(stage)
        role = TALKER if role == CODE2WAV else role
        return next((j for j, entry in enumerate(self.process_stages)
                     if role == entry or (isinstance(entry, list) and role in entry)), None)

    def code2wav_of(self, talker: Stage) -> Stage:
        """The Code2Wav stage that decodes `talker`'s codes (the one loading the same checkpoint)."""
        return next(s for s in self.stages if self.role_of(s) == CODE2WAV and s.model == talker.model)

    def stage(self, role: str) -> Stage | None:
        return next((s for s in self.stages if self.role_of(s) == role), None)

    def stage_with_id(self, stage_id: int) -> Stage:
        return next(s for s in self.stages if s.stage_id == stage_id)

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
