"""Stages as Ray actors (`distributed_executor_backend: ray`; docs/ray.md).

    placement = RayPlacement.start(deploy, load_stage, warm_models, device=None, dtype=None, load_format=None)
    placement.models        # role -> proxy (placement/proxies.py), what Runtime.models holds in process
    placement.stage_stats() # per replica and loop, as last polled

Each stage (Code2Wav inside the Talker's, as in process) runs as `num_replicas` actors of placement.host.StageHost.
A GPU stage asks Ray for `gpu_memory_utilization` of a GPU (a fraction: Ray packs stages whose shares fit on one GPU,
and the actor sees its GPU as cuda:0); a CPU stage asks for no GPU. Ray runs a local instance unless the deploy's
`ray_address` (`serve --ray-address`) names a cluster. An actor that dies is restarted by Ray (`max_restarts`); its
requests in flight fail with StageUnavailableError and /health shows the replica down until it is back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any, AsyncIterator, Callable

from aura_omni.deploy import CODE2WAV, DeployConfig, Stage
from aura_omni.placement import stage_pythonpath
from aura_omni.placement.host import StageHost
from aura_omni.placement.placed import PlacedStages, replica_set, stage_label
from aura_omni.placement.replicas import ReplicaDied, ReplicaSet, ReplicaUnreachable

log = logging.getLogger(__name__)

# No usage stats; a local Ray stays on loopback (a single-node "cluster": Ray reads this when it is imported).
RAY_ENV_DEFAULTS = {"RAY_USAGE_STATS_ENABLED": "0"}
RAY_LOCAL_ENV_DEFAULTS = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
MAX_RESTARTS = -1  # Ray restarts a dead stage actor every time (a replica that fails to load stays dead)
START_TIMEOUT_S = 1800.0  # loading and warming every replica (a 1.7B checkpoint from disk, graphs, kernels)


def import_ray(local: bool = True):
    """Ray, with our environment defaults set before its first import (`local`: no cluster address is given)."""
    defaults = {**RAY_ENV_DEFAULTS, **(RAY_LOCAL_ENV_DEFAULTS if local and not os.environ.get("RAY_ADDRESS") else {})}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    try:
        import ray
    except ImportError as e:
        raise RuntimeError("distributed_executor_backend: ray needs Ray: pip install 'aura-omni[ray]'") from e
    return ray


def actor_device(stage: Stage, override: str | None) -> str:
    """The device a stage's actor runs on, as the actor sees it: `--device` wins, else the stage's `devices`; a GPU
    is always cuda:0 inside the actor (Ray sets CUDA_VISIBLE_DEVICES to the GPU it assigned)."""
    spec = (override or stage.devices).split(",")[0].strip()
    return "cpu" if spec == "cpu" else "cuda:0"


def actor_options(stage: Stage, device: str) -> dict:
    """Ray resources and restart policy of one replica. CPU stages take no logical CPU: their threads are the stage
    loop's and torch's, bounded by OMP_NUM_THREADS, not by Ray's CPU count."""
    env = {"PYTHONPATH": stage_pythonpath(), **{k: os.environ[k] for k in ("OMP_NUM_THREADS",) if k in os.environ}}
    return dict(num_cpus=0, num_gpus=stage.gpu_memory_utilization if device != "cpu" else 0,
                max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=1000,
                runtime_env={"env_vars": env})


class RayPlacement(PlacedStages):
    def __init__(self, deploy: DeployConfig, sets: dict[str, ReplicaSet], infos: dict[str, list[dict]],
                 own_ray: bool):
        super().__init__(deploy, sets, infos)
        self.own_ray = own_ray
        self.poller = StatsPoller(list(sets.values())).start()

    @classmethod
    def start(cls, deploy: DeployConfig, load: Callable, warm: Callable, *, device: str | None = None,
              dtype: str | None = None, load_format: str | None = None,
              meanwhile: Callable[[], None] | None = None) -> RayPlacement:
        """Start (or join) Ray, start the replicas of every stage in Ray (`deploy.in_ray`), and wait until each is
        loaded and warm; `meanwhile` (this process's stages loading) runs while the actors load theirs."""
        ray = import_ray(local=deploy.ray_address is None)
        own_ray = not ray.is_initialized()
        if own_ray:
            ray.init(address=deploy.ray_address, include_dashboard=False, log_to_driver=True)
        first = actor_device(deploy.stages[0], device)
        deploy = deploy.for_platform("cpu" if first == "cpu" else "cuda")
        stages = [s for s in deploy.stages if deploy.role_of(s) != CODE2WAV and deploy.in_ray(s)]
        _check_gpus(ray, stages, device)
        host = ray.remote(StageHost)
        actors: dict[str, list] = {}
        t = time.perf_counter()
        for stage in stages:
            dev = actor_device(stage, device)
            opts = actor_options(stage, dev)
            log.info("stage %d (%s): %d Ray actor(s) on %s, %s GPU each", stage.stage_id, deploy.role_of(stage),
                     stage.num_replicas, dev, opts["num_gpus"])
            label = stage_label(deploy, stage, stages)
            actors[label] = [host.options(**opts).remote(deploy, stage.stage_id, load, warm, dev, dtype, load_format)
                             for _ in range(stage.num_replicas)]
        try:
            if meanwhile is not None:
                meanwhile()
            infos = {label: ray.get([a.info.remote() for a in handles], timeout=START_TIMEOUT_S)
                     for label, handles in actors.items()}
        except BaseException as e:
            for handles in actors.values():
                for a in handles:
                    ray.kill(a, no_restart=True)
            if isinstance(e, ray.exceptions.RayError):  # a stage failed to load or warm in its actor: its last line
                cause = next((line for line in reversed(str(e).splitlines()) if line.strip()), type(e).__name__)
                raise RuntimeError(f"a stage actor failed to start: {cause}") from e
            raise
        log.info("Ray stages ready in %.1f s: %s", time.perf_counter() - t,
                 ", ".join(f"{label} x{len(h)}" for label, h in actors.items()))
        sets = {label: replica_set(label, [RayActor(a) for a in handles], infos[label])
                for label, handles in actors.items()}
        for replicas in sets.values():  # counters for /health before the first request
            for r, stats in zip(replicas.replicas, ray.get([r.actor.handle.stats.remote() for r in replicas.replicas])):
                replicas.note_stats(r, stats)
        return cls(deploy, sets, infos, own_ray)

    def actors(self, label: str) -> list:
        """The Ray actor handles of a stage's replicas (tests kill one)."""
        return [r.actor.handle for r in self.sets[label].replicas]

    def close(self) -> None:
        ray = import_ray()
        self.poller.stop()
        if not ray.is_initialized():
            return
        for replicas in self.sets.values():
            for r in replicas.replicas:
                try:
                    ray.kill(r.actor.handle, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
        if self.own_ray:
            ray.shutdown()


def _check_gpus(ray, stages: list[Stage], device: str | None) -> None:
    """Refuse at start what the cluster cannot place (Ray would wait for it forever)."""
    gpus = ray.cluster_resources().get("GPU", 0)
    need = [s for s in stages if actor_device(s, device) != "cpu"]
    if need and gpus <= 0:
        raise RuntimeError(f"stages {[s.stage_id for s in need]} ask for a GPU but the Ray cluster has none; "
                           f"pass --device cpu or set `devices: cpu`")
    shares = sum(s.gpu_memory_utilization * s.num_replicas for s in need)
    if shares > gpus + 1e-9:
        raise RuntimeError(f"the GPU stages' replicas ask for {shares:g} GPUs (gpu_memory_utilization x num_replicas) "
                           f"but the Ray cluster has {gpus:g}")


class RayActor:
    """A replica's Ray actor as placement/replicas.py calls it."""

    def __init__(self, handle):
        self.handle = handle  # a Ray ActorHandle of placement.host.StageHost

    async def call(self, method: str, *args) -> Any:
        ref = getattr(self.handle, method).remote(*args)
        try:
            return await ref
        except asyncio.CancelledError:
            import_ray().cancel(ref)
            raise
        except Exception as e:  # noqa: BLE001 - the stage's own error, or the actor's death
            raise _unwrap(e) from None

    def call_blocking(self, method: str, *args) -> Any:
        try:
            return import_ray().get(getattr(self.handle, method).remote(*args))
        except Exception as e:  # noqa: BLE001
            raise _unwrap(e) from None

    async def stream(self, method: str, *args) -> AsyncIterator[Any]:
        stream, done = None, False
        try:
            stream = getattr(self.handle, method).options(num_returns="streaming").remote(*args)
            async for ref in stream:
                yield await ref
            done = True
        except Exception as e:  # noqa: BLE001 - the stage's error, or the actor died (the caller leaving is no Exception)
            done = True
            raise _unwrap(e) from None
        finally:
            if stream is not None and not done:  # the caller left: cancel the actor's coroutine (aborts the request)
                import_ray().cancel(stream)

    def tell(self, method: str, *args) -> None:
        getattr(self.handle, method).remote(*args)


def _unwrap(e: Exception) -> Exception:
    """What the caller sees of a Ray error: the stage's own (a bad request, StageError), ReplicaDied or
    ReplicaUnreachable."""
    exceptions = import_ray().exceptions
    if isinstance(e, exceptions.RayTaskError):  # raised by the stage: its type (a request error -> 400), message
        return e.cause if isinstance(e.cause, Exception) else e
    if isinstance(e, exceptions.RayActorError):
        return ReplicaDied(type(e).__name__)
    if isinstance(e, exceptions.RayError):
        return ReplicaUnreachable(type(e).__name__)
    return e


class StatsPoller:
    """Polls every replica's counters on a thread (health and metrics read them without waiting): one stats call in
    flight per replica; an answer marks it alive (a new start token counts a restart), an error or an answer later
    than `timeout_s` marks it down."""

    def __init__(self, sets: list[ReplicaSet], interval_s: float = 0.5, timeout_s: float = 5.0):
        self.sets, self.interval_s, self.timeout_s = sets, interval_s, timeout_s
        self._pending: dict[int, tuple[Any, float]] = {}  # id(replica) -> (stats ref, when sent)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="ray-stage-stats", daemon=True)

    def start(self) -> StatsPoller:
        self._thread.start()
        return self

    def poll(self) -> None:
        ray = import_ray()
        now = time.monotonic()
        for rs in self.sets:
            for r in rs.replicas:
                ref, sent = self._pending.get(id(r), (None, now))
                if ref is None:
                    self._pending[id(r)] = (r.actor.handle.stats.remote(), now)
                    continue
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    if now - sent > self.timeout_s:
                        rs.note_stats(r, None)  # restarting (loading, warming) or stuck
                    continue
                try:
                    rs.note_stats(r, ray.get(ref), sent)
                except Exception:  # noqa: BLE001 - its actor died: down until the restarted one answers
                    rs.note_stats(r, None)
                self._pending[id(r)] = (r.actor.handle.stats.remote(), now)

    def _main(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - Ray shut down under us: stop polling
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
