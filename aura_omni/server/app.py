"""The FastAPI application: OpenAI-style errors, optional API key, one router per endpoint module."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI
from starlette.requests import HTTPConnection

from .. import __version__, env
from ..deploy import DeployConfig
from ..layers import kernel_compiles
from ..media.limits import Limits
from ..pipeline.runtime import DEFAULT_REQUEST_TIMEOUT_S, Runtime
from ..stages import heap_trim
from .admission import Admission
from . import (chat, gc_pauses, gil, health, metrics, page, realtime, speech, speech_batch,
               speech_stream, transcriptions, voices)
from .errors import install_error_handlers
from .health import main_model
from .metrics import RequestMetrics
from .request_ids import RequestIds
from .state import ServerState
from .voice_library import VoiceLibrary
from .websocket_auth import check_api_key as check_key

log = logging.getLogger("aura_omni.server")

# Each endpoint module's router: add a line to serve a new one.
ENDPOINTS = (chat, health, metrics, page, realtime, speech, speech_batch, speech_stream, transcriptions, voices)
OPEN_PATHS = {"/health", "/"}  # answered without an API key (and the page's assets, OPEN_PREFIX)
OPEN_PREFIX = "/web/"


async def check_api_key(conn: HTTPConnection) -> None:
    """`Authorization: Bearer <key>` when the server was started with --api-key. WebSocket endpoints check the key
    themselves (browsers cannot set headers; websocket_auth.py takes `?api_key=` and a subprotocol too)."""
    path = conn.url.path
    if conn.scope["type"] != "websocket" and path not in OPEN_PATHS and not path.startswith(OPEN_PREFIX):
        check_key(conn, conn.app.state.server.api_key)


def create_app(deploy_config: DeployConfig, served_model_name: str | list[str] | None = None,
               api_key: str | None = None, *,
               runtime: Runtime | None = None, device: str | None = None, dtype: str | None = None,
               load_format: str | None = None, allowed_local_media_path: str | Path | None = None,
               allowed_media_domains: list[str] | None = None,
               request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S, limits: Limits | None = None,
               voice_dir: str | Path | None = None) -> FastAPI:
    """Build the server; loads the deploy's stage models unless a ready `runtime` is given (tests).
    `served_model_name`: the name (or names, the first reported, as vLLM's) requests may send as `model`.
    `request_timeout_s`: a chat turn running longer is cancelled in every stage and answered 504 (None: no limit).
    `limits`: default the deploy file's `limits:` section over the built-in defaults.
    `voice_dir`: where registered voices are kept and shared (`serve` passes its default); None: in memory only."""
    voices = VoiceLibrary(voice_dir)  # before the stages load: an unusable directory fails the start at once
    gil.set_switch_interval(deploy_config.gil_switch_interval_ms)
    loaded_here = runtime is None
    if loaded_here:  # loaded and warmed here: /health answers only once every stage has served a request
        kernel_compiles.watch()  # Triton variants made after the warm start are stalls: logged, and in /metrics
        runtime = Runtime.load(deploy_config, device=device, dtype=dtype, load_format=load_format)
        asyncio.run(runtime.warm_up())
        kernel_compiles.mark_ready()
        log.info("start-up objects frozen out of garbage collection: %d", gc_pauses.freeze(deploy_config.gc_freeze))
        gc_pauses.watch()  # a long collection stalls every stage at once: timed, in /metrics
    runtime.request_timeout_s = request_timeout_s
    names = [served_model_name] if isinstance(served_model_name, str) else list(served_model_name or [])
    names = names or [main_model(deploy_config)]
    if allowed_media_domains is None:
        allowed_media_domains = list(env.current().allowed_media_domains)  # none: remote media is off
    state = ServerState(runtime=runtime, served_model_name=names[0], model_aliases=tuple(names[1:]),
                        api_key=api_key or None, voices=voices,
                        allowed_local_media_path=Path(allowed_local_media_path) if allowed_local_media_path else None,
                        limits=limits or Limits.from_values(deploy_config.limits),
                        allowed_media_domains=tuple(d.strip() for d in allowed_media_domains))

    async def warm_after_ready() -> None:
        await runtime.warm_after_ready()  # graphs and grammar machinery no first request needs
        if loaded_here:  # what that made lives as long as the server: out of the collector's sight too, since a
            # full collection walks every object in sight (28-81 ms of every thread's time on the H200, session 21)
            log.info("background warm start's objects frozen out of garbage collection too: %d in all",
                     gc_pauses.freeze(deploy_config.gc_freeze))

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        runtime.serve_here()  # (the warm-up ran on a loop of its own, gone now)
        after_ready = asyncio.create_task(warm_after_ready())
        heap_trim.TRIMMER.start(deploy_config.heap_trim_interval_s)
        state.metrics.loop_lag.start()
        yield
        await state.metrics.loop_lag.stop()
        heap_trim.TRIMMER.stop()
        after_ready.cancel()
        runtime.close()

    # /docs and /redoc load their assets from a CDN (blank offline): off; the schema stays at /openapi.json
    app = FastAPI(title="aura-omni", version=__version__, lifespan=lifespan, dependencies=[Depends(check_api_key)],
                  docs_url=None, redoc_url=None)
    app.state.server = state
    app.add_middleware(Admission, state=state)  # body size, requests in flight, open sockets: Limits
    install_error_handlers(app)
    app.add_middleware(RequestMetrics)  # arrival time for the endpoints' timings; requests_total
    app.add_middleware(RequestIds)  # outermost: X-Request-Id on every answer, every 4xx/5xx logged with it
    for module in ENDPOINTS:
        app.include_router(module.router)
    return app
