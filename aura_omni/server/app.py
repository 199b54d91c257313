"""The FastAPI application: OpenAI-style errors, optional API key, limits, one router per endpoint module."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI

from .. import __version__
from ..config import DeployConfig
from ..media.limits import Limits
from .admission import Admission
from .auth import OPEN_PATHS, check_api_key, check_ws_api_key  # noqa: F401 - check_ws_api_key: for socket routes
from .errors import install_error_handlers
from .metrics import RequestMetrics
from .runtime import DEFAULT_REQUEST_TIMEOUT_S, Runtime
from .state import ServerState

log = logging.getLogger("aura_omni.server")

# Endpoint modules under aura_omni.server, each exposing `router`: add a line to serve a new one.
ENDPOINT_MODULES = [
    "chat",
    "health",
    "metrics",
    "realtime",
    "speech",
    "transcriptions",
    "voices",
]
ALLOWED_MEDIA_DOMAINS_ENV = "AURA_OMNI_ALLOWED_MEDIA_DOMAINS"  # comma-separated; remote media is off by default


def create_app(deploy_config: DeployConfig, served_model_name: str | None = None, api_key: str | None = None, *,
               runtime: Runtime | None = None, device: str | None = None, dtype: str | None = None,
               load_format: str | None = None, allowed_local_media_path: str | Path | None = None,
               allowed_media_domains: list[str] | None = None,
               request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S, limits: Limits | None = None) -> FastAPI:
    """Build the server; loads the deploy's stage models unless a ready `runtime` is given (tests).
    `request_timeout_s`: a chat turn running longer is cancelled in every stage and answered 504 (None: no limit).
    `limits`: default the deploy file's `limits:` section over the built-in defaults."""
    if runtime is None:  # loaded and warmed here: /health answers only once every stage has served a request
        runtime = Runtime.load(deploy_config, device=device, dtype=dtype, load_format=load_format)
        asyncio.run(runtime.warm_up())
    runtime.request_timeout_s = request_timeout_s
    name = served_model_name or deploy_config.stages[0].model
    if allowed_media_domains is None:
        allowed_media_domains = [d for d in os.environ.get(ALLOWED_MEDIA_DOMAINS_ENV, "").split(",") if d.strip()]
    state = ServerState(runtime=runtime, served_model_name=name, api_key=api_key or None,
                        allowed_local_media_path=Path(allowed_local_media_path) if allowed_local_media_path else None,
                        limits=limits or Limits.from_values(deploy_config.limits),
                        allowed_media_domains=tuple(d.strip() for d in allowed_media_domains))

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        runtime.close()

    app = FastAPI(title="aura-omni", version=__version__, lifespan=lifespan, dependencies=[Depends(check_api_key)])
    app.state.server = state
    app.add_middleware(Admission, state=state)
    install_error_handlers(app)
    app.add_middleware(RequestMetrics)  # arrival time for the endpoints' timings; requests_total
    for module in ENDPOINT_MODULES:
        app.include_router(importlib.import_module(f"{__package__}.{module}").router)
    return app
