"""What the server runs on: the stages a deploy config declares, each driven by its stage loop (stages/loop.py).

The event loop never runs model code: requests go to the stage loops and their outputs come back on per-request
asyncio queues, so concurrent requests share each stage's steps. A request's failure stays in that request.
Endpoints ask `require(role)`; a role the deployment lacks answers a clear 400.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import numpy as np

from ..deploy import ASR, AURA, CODE2WAV, TALKER, DeployConfig, DeployConfigError, Stage
from ..layers.measure_gate import side_by_side
from ..stages.asr.service import load_asr_stage
from ..stages.aura.stage import load_aura_stage
from ..stages.supervision import Supervisor
from ..stages.tts import load_qwen3_tts_stage
from .turn import TurnRequest

log = logging.getLogger("aura_omni.server")

# What each endpoint family needs, in words, for "this deployment lacks ..." errors.
ROLE_NAMES = {ASR: "a Qwen3-ASR stage (model_stage: asr)", AURA: "an AURA stage (model_stage: aura)",
              TALKER: "Qwen3-TTS Talker + Code2Wav stages (model_stage: qwen3_tts, code2wav)",
              CODE2WAV: "a Code2Wav stage (model_stage: code2wav)"}

DEFAULT_REQUEST_TIMEOUT_S = 300.0
DEFAULT_GPU_SHARE = 0.9  # vLLM's gpu_memory_utilization default: what stages sharing a GPU split when none is given


class StageNotDeployedError(LookupError):
    """A request needs a stage this deployment lacks (the server answers 400 `stage_not_deployed`)."""


# role -> its loader `(stage, device, dtype, load_format) -> model`. Code2Wav is part of the Qwen3-TTS facade, so it
# has no loader of its own. Stage owners add one line here.
STAGE_LOADERS: dict[str, Callable[..., Any]] = {
    TALKER: load_qwen3_tts_stage,
    ASR: load_asr_stage,
    AURA: load_aura_stage,
}


def device_spec(stage: Stage, override: str | None) -> str:
    """`--device` wins; else the stage's `devices` ("0" -> cuda:0, "cpu" -> cpu, first of a list)."""
    spec = (override or stage.devices).split(",")[0].strip()
    return f"cuda:{spec}" if spec.isdigit() else spec


def split_gpu_shares(deploy: DeployConfig, override: str | None) -> DeployConfig:
    """Stages that share a GPU and give no `gpu_memory_utilization` split what the given shares leave of the default
    0.9, instead of each taking 0.9 of the GPU for its KV cache (a CPU deploy served with `--device cuda`). Code2Wav
    keeps no KV cache and takes no share."""
    by_gpu: dict[str, list[Stage]] = {}
    for s in deploy.stages:
        spec = device_spec(s, override)
        if spec.startswith("cuda") and deploy.role_of(s) != CODE2WAV:
            by_gpu.setdefault("cuda:0" if spec == "cuda" else spec, []).append(s)
    shares: dict[int, float] = {}
    for gpu, stages in by_gpu.items():
        unset = [s for s in stages if "gpu_memory_utilization" not in s.model_fields_set]
        if len(stages) < 2 or not unset:
            continue
        left = DEFAULT_GPU_SHARE - sum(s.gpu_memory_utilization for s in stages
                                       if "gpu_memory_utilization" in s.model_fields_set)
        if left <= 0.05 * len(unset):
            raise DeployConfigError(f"{deploy.source}: stages: the stages on {gpu} that give a gpu_memory_utilization "
                                    f"leave {max(left, 0):.2f} of the GPU for the {len(unset)} that give none; set "
                                    f"theirs too")
        shares.update({s.stage_id: round(left / len(unset), 4) for s in unset})
    if not shares:
        return deploy
    return deploy.model_copy(update={"stages": [
        s.model_copy(update={"gpu_memory_utilization": shares[s.stage_id]}) if s.stage_id in shares else s
        for s in deploy.stages]})


def stage_device(stage: Stage, override: str | None) -> str:
    """The stage's device (`device_spec`), refused when it names a GPU this machine does not have."""
    import torch

    spec = device_spec(stage, override)
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"stage {stage.stage_id} ({stage.model}) asks for device {spec!r} but CUDA is not "
                           f"available; pass --device cpu or set `devices: cpu` in the deploy file")
    return spec


def stage_dtype(stage: Stage, override: str | None, device: str):
    import torch

    name = override or stage.dtype
    if name == "auto":
        name = "float32" if device == "cpu" else "bfloat16"
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def platform_of(device: str) -> str:
    return device.split(":")[0]  # "cuda", "cpu", "npu": the keys of `platforms:` overrides


class Runtime:
    """Loaded stages keyed by role (each driven by its stage loops), their warm start, counters and supervisor."""

    def __init__(self, deploy: DeployConfig, models: dict[str, Any] | None = None, *, placement: Any = None):
        self.deploy = deploy
        self.models: dict[str, Any] = dict(models or {})
        self.placement = placement  # None: stages in this process; else where the others run (placement/)
        self._pipeline = None
        self.request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S  # a turn past this is cancelled (504)
        self.turn_observer: Callable[[dict[str, float]], None] | None = None  # each turn's phases (server metrics)
        # a loop that dies is restarted over the same engine; one whose GPU failed calls `supervisor.on_device_lost`
        # (`aura-omni serve` exits, so its supervisor starts a new process)
        self.supervisor = Supervisor()
        for loop in self.loops().values():
            self.supervisor.supervise(loop)

    @classmethod
    def load(cls, deploy: DeployConfig, *, device: str | None = None, dtype: str | None = None,
             load_format: str | None = None) -> Runtime:
        """Load every declared stage (Code2Wav is part of the Qwen3-TTS facade): in this process, in processes of
        their own (`process_stages`), or as Ray actors (`distributed_executor_backend: ray`: every stage, or those
        `ray_stages` names); placement/ puts proxies of the same surface in front of the last two."""
        here, apart = local_roles(deploy), {deploy.role_of(s) for s in deploy.stages if deploy.in_own_process(s)}
        if here | apart:
            first = next(s for s in deploy.stages if deploy.role_of(s) in here | apart)
            deploy = split_gpu_shares(deploy.for_platform(platform_of(stage_device(first, device))), device)
        models: dict[str, Any] = {}
        talkers = []

        def load_local() -> None:
            mine = [stage for stage in deploy.stages if deploy.role_of(stage) in here]
            for stage, model in zip(mine, load_stages(deploy, mine, device, dtype, load_format)):
                models[deploy.role_of(stage)] = model
                if deploy.role_of(stage) == TALKER:
                    talkers.append(model)

        placement = None
        try:
            if deploy.distributed_executor_backend == "ray":
                from ..placement.ray_stages import RayPlacement

                placement = RayPlacement.start(deploy, load_stage, warm_models, device=device, dtype=dtype,
                                               load_format=load_format, meanwhile=load_local)
                deploy = placement.deploy
            elif apart:
                from ..placement.process_stages import ProcessPlacement

                devices = {s.stage_id: stage_device(s, device) for s in deploy.stages if deploy.in_own_process(s)}
                placement = ProcessPlacement.start(deploy, functools.partial(load_stages, device=device),
                                                   warm_models, devices=devices, dtype=dtype,
                                                   load_format=load_format, meanwhile=load_local,
                                                   warm_after_ready=warm_models_after_ready)
            else:
                load_local()
            if placement is not None:
                models.update(placement.models)
        except BaseException:  # the stages loaded so far let go of their loops
            _close_all(list({id(m): m for m in [*models.values(), *talkers]}.values()))
            raise
        if len(talkers) > 1:  # one checkpoint per task type (Base beside CustomVoice): routed by the request
            from ..stages.talker_set import TalkerSet

            models[TALKER] = TalkerSet(talkers)
        return cls(deploy, models, placement=placement)

    @property
    def tts(self):
        return self.models.get(TALKER)

    @property
    def pipeline(self):
        """The ASR -> AURA -> TTS orchestrator over the loaded stages, built on first use (chat, offline API)."""
        if self._pipeline is None:
            from ..stages.asr.stage import AsrPipelineStage
            from ..pipeline.orchestrator import AuraOmniPipeline
            from ..stages.speech_stage import SpeechPipelineStage

            asr, tts = self.models.get(ASR), self.models.get(TALKER)
            codec = self.deploy.codec_streaming()
            self._pipeline = AuraOmniPipeline(
                AsrPipelineStage(asr) if asr is not None else None,
                self.models.get(AURA),
                SpeechPipelineStage(tts, initial_chunk_frames=codec.first_window,
                                    chunk_frames=codec.codec_chunk_frames) if tts is not None else None,
                default_timeout_s=self.request_timeout_s, stream_text_to_talker=self.deploy.async_chunk,
                on_phases=self._turn_phases, turn_settings=self.deploy.turn)
        return self._pipeline

    def _turn_phases(self, phases: dict[str, float]) -> None:
        if self.turn_observer is not None:
            self.turn_observer(phases)

    def require(self, role: str, endpoint: str) -> Any:
        """The model serving `role`, or StageNotDeployedError saying what this deployment lacks."""
        if role in self.models:
            return self.models[role]
        raise StageNotDeployedError(f"{endpoint} is not available: this deployment ({Path(self.deploy.source).name}, pipeline "
                                    f"{self.deploy.pipeline!r}, stages {sorted(self.deploy.roles)}) lacks "
                                    f"{ROLE_NAMES[role]}")

    # ---- the async surfaces endpoints use (stable while the stage loops underneath change) ----------------
    def speak(self, tts_request, initial_chunk_frames: int, chunk_frames: int) -> AsyncIterator:
        """24 kHz float32 chunks of one Talker + Code2Wav request; closing the iterator cancels it in both stages."""
        return self.models[TALKER].astream(tts_request, initial_chunk_frames, chunk_frames)

    async def transcribe(self, samples, sample_rate: int, *, language: str | None = None, context: str | None = None,
                         temperature: float = 0.0, max_new_tokens: int | None = None):
        """One clip's Transcript (/v1/audio/transcriptions), through the pipeline's one way into ASR; cancelling the
        awaiting task aborts its ASR work."""
        req = TurnRequest(f"transcription-{uuid.uuid4().hex}", audio=(samples, sample_rate), asr_language=language,
                          asr_context=context, asr_sampling={"temperature": temperature, "max_tokens": max_new_tokens})
        return await self.pipeline.transcribe(req)

    async def voice_prompt(self, wav, sample_rate: int, ref_text: str | None, x_vector_only: bool):
        """A cloned voice (x-vector, and reference codes for in-context cloning) from reference audio."""
        return await asyncio.to_thread(self.models[TALKER].create_voice_prompt, wav, sample_rate, ref_text, x_vector_only)

    async def warm_up(self) -> dict[str, float]:
        """One small request through every stage (pipeline/warmup.py); the server calls it before it says ready.
        Ray actors warm their own stage as they start (and restart): this waits for them."""
        took = await self.placement.warm_up() if self.placement is not None else {}
        local = {role: m for role, m in self.models.items() if role in local_roles(self.deploy)}
        if local:
            took.update(await warm_models(local, self.deploy, all_graphs=False))
        for loop in self._each_loop():
            loop.serving()  # a slow step from now on is a stall to explain
        return took

    def serve_here(self) -> None:
        """On the server's event loop as it starts serving: the stages placed apart report to it from now on."""
        if self.placement is not None:
            self.placement.serve_here()

    def process_memory(self) -> dict[str, dict]:
        """The stage processes' memory (`process_stages`; /metrics shows it beside the server's own)."""
        return self.placement.process_memory() if self.placement is not None else {}

    async def warm_after_ready(self) -> None:
        """What the warm start left for after the server is ready: AURA's grammar machinery, then the Code2Wav graphs
        of batches of several streams and the ASR encoder's of several clips (`/health` and `/metrics` show
        `graphs_pending` until they are captured). Ray actors warm everything first: only this process's stages."""
        here = local_roles(self.deploy)
        await warm_models_after_ready({role: m for role, m in self.models.items() if role in here}, self.busy)

    def busy(self) -> bool:
        """Whether any stage holds a request (queued or in flight)."""
        return any(stats.get("queued") or stats.get("in_flight") for stats in self.stage_stats().values())

    def stage_stats(self) -> dict[str, dict[str, float]]:
        """Per stage: what its loop published after its last step (alive, queued, in_flight, steps, batch_size,
        step_seconds, busy_s, and the engine's running, waiting, free_blocks, total_blocks, prefix_cache_hit_rate, ...).
        Takes no lock and never waits for a step. Ray actors: per replica (`aura/0`), as last polled."""
        remote = self.placement.stage_stats() if self.placement is not None else {}
        return {**remote, **{name: loop.stats() for name, loop in self.loops().items()}}

    def stage_latencies(self) -> dict[str, dict[str, Any]]:
        """Per stage: its loop's queue and first-output latency histograms (stages/loop_metrics.py snapshots). Ray
        actors: per replica (`aura/0`), as last polled."""
        remote = self.placement.stage_latencies() if self.placement is not None else {}
        return {**remote, **{name: loop.latencies() for name, loop in self.loops().items()}}

    def loops(self) -> dict[str, Any]:
        """Every stage loop by stage name (asr, aura, talker, code2wav)."""
        return {loop.name: loop for loop in self._each_loop()}

    def _each_loop(self):
        for model in self.models.values():
            for part in getattr(model, "facades", [model]):  # a TalkerSet: each Talker's loops
                for attr in ("loop", "talker_loop", "code2wav_loop"):
                    if (loop := getattr(part, attr, None)) is not None:
                        yield loop

    def close(self) -> None:
        if self.placement is not None:
            self.placement.close()
        for role, model in self.models.items():  # this process's stage loops
            if role not in local_roles(self.deploy):
                continue
            close = getattr(model, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing the rest matters more
                    log.exception("closing %s failed", type(model).__name__)


def local_roles(deploy: DeployConfig) -> set[str]:
    """The roles whose stages run in this process (Code2Wav's inside its Talker's facade)."""
    return {deploy.role_of(s) for s in deploy.stages
            if deploy.role_of(s) != CODE2WAV and not deploy.in_ray(s) and not deploy.in_own_process(s)}


def load_stages(deploy: DeployConfig, stages: list[Stage], device: str | None, dtype: str | None,
                load_format: str | None) -> list[Any]:
    """The stages' models, in order. With `parallel_load` (the default) each loads on a thread of its own: weights,
    tokenizers, Triton compiles and graph captures overlap, while the device measurements that size each KV cache take
    turns (layers/measure_gate.py). If one fails, those that loaded are closed and the first error is raised."""
    def one(stage: Stage) -> Any:
        return load_stage(deploy, stage, stage_device(stage, device), dtype, load_format)

    if not deploy.parallel_load or len(stages) < 2:
        loaded: list[Any] = []
        try:
            for stage in stages:
                loaded.append(one(stage))
        except BaseException:
            _close_all(loaded)
            raise
        return loaded
    t0 = time.perf_counter()
    futures = side_by_side([functools.partial(one, stage) for stage in stages])
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        _close_all([f.result() for f in futures if f.exception() is None])
        raise errors[0]
    log.info("%d stages loaded in parallel in %.1f s", len(stages), time.perf_counter() - t0)
    return [f.result() for f in futures]


def _close_all(models: list[Any]) -> None:
    """Loaded stages let go of their loops (a proxy's close does nothing)."""
    for model in models:
        if callable(close := getattr(model, "close", None)):
            close()


def load_stage(deploy: DeployConfig, stage: Stage, device: str, dtype: str | None, load_format: str | None) -> Any:
    """One stage's model by its role's loader (Ray actors call this too); Code2Wav comes with the Talker."""
    role = deploy.role_of(stage)
    fmt = load_format or stage.load_format
    loader = STAGE_LOADERS[role]
    log.info("loading stage %d (%s) from %s on %s", stage.stage_id, role, stage.model, device)
    t0 = time.perf_counter()
    model = loader(stage, device, stage_dtype(stage, dtype, device), "auto" if fmt == "safetensors" else fmt)
    if role == TALKER and getattr(model, "code2wav_loop", None) is not None:
        from ..stages.deploy_settings import code2wav_settings  # the Code2Wav stage's fields

        model.configure_code2wav(**code2wav_settings(deploy.code2wav_of(stage), deploy.codec_streaming()))
        if deploy.code2wav_of(stage).stall_s is not None:
            model.code2wav_loop.stall_s = deploy.code2wav_of(stage).stall_s
    for attr in ("loop", "talker_loop"):  # the stage's own loop (Code2Wav's is its own stage's, above)
        if stage.stall_s is not None and (loop := getattr(model, attr, None)) is not None:
            loop.stall_s = stage.stall_s
    # weights, KV cache and graph captures: what a restart costs, stage by stage (the warm start logs the rest)
    log.info("stage %d (%s) loaded in %.1f s", stage.stage_id, role, time.perf_counter() - t0)
    return model


async def warm_models(models: dict[str, Any], deploy: DeployConfig, all_graphs: bool = True) -> dict[str, float]:
    """Small requests through each given stage (pipeline/warmup.py); a Ray actor passes the one it hosts.
    `all_graphs`: every Code2Wav graph before this returns (else `Runtime.warm_after_ready` captures the rest)."""
    from ..pipeline.warmup import AURA_LAYOUTS, warm_up
    from ..media.request_media import load_image_input

    aura, frames = models.get(AURA), []
    if aura is not None:  # 640x480 camera frames, the live path's vision layout; distinct, so none is a cache hit
        rng = np.random.default_rng(0)
        frames = [await asyncio.to_thread(load_image_input, rng.integers(0, 256, (480, 640, 3), dtype=np.uint8), None,
                                          aura.stage.model) for _ in range(sum(AURA_LAYOUTS))]
    codec = deploy.codec_streaming()
    return await warm_up(models.get(ASR), aura, models.get(TALKER), frames=frames,
                         initial_chunk_frames=codec.first_window,
                         chunk_frames=codec.codec_chunk_frames, all_graphs=all_graphs)


async def warm_models_after_ready(models: dict[str, Any], busy: Callable[[], bool]) -> None:
    """What `warm_models(all_graphs=False)` left for after the server is ready (`busy()`: a stage holds a request):
    AURA's grammar machinery, then Code2Wav's graphs of batches of streams, then the ASR encoder's of several clips.
    The server's runtime calls it for its own stages, a stage's process (`process_stages`) for its stage."""
    from ..pipeline.warmup import capture_after_ready, warm_grammar

    took = await warm_grammar(models.get(AURA))
    if took:
        log.info("background warm start: %s", ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in took.items()))
    asr, tts = models.get(ASR), models.get(TALKER)
    # Code2Wav's first: until they are captured a batch of streams goes through a lone stream's graphs in
    # turns, while an ASR step without its encoder's graphs only runs the layers eagerly
    loops = [getattr(t, "code2wav_loop", None) for t in (tts.facades if tts else [])] + [getattr(asr, "loop", None)]
    await capture_after_ready([loop for loop in loops if loop is not None], busy)
