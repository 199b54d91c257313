"""The FastAPI application: OpenAI-style errors, optional API key, one router per endpoint module."""

from __future__ import annotations

import asyncio
import hmac
import importlib
import logging
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI, Request

from .. import __version__
from ..config import DeployConfig
from ..pipeline.runtime import DEFAULT_REQUEST_TIMEOUT_S, Runtime
from .errors import APIError, install_error_handlers
from .state import ServerState

log = logging.getLogger("aura_omni.server")

# Endpoint modules under aura_omni.server, each exposing `router`: add a line to serve a new one.
ENDPOINT_MODULES = [
    "chat",
    "health",
    "speech",
    "transcriptions",
    "voices",
]
OPEN_PATHS = {"/health"}  # answered without an API key


async def check_api_key(request: Request) -> None:
    """`Authorization: Bearer <key>` when the server was started with --api-key."""
    key = request.app.state.server.api_key
    if key is None or request.url.path in OPEN_PATHS:
        return
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if not auth:
        raise APIError("missing API key: send `Authorization: Bearer <key>`", 401, code="missing_api_key")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise APIError("incorrect API key", 401, code="invalid_api_key")


def create_app(deploy_config: DeployConfig, served_model_name: str | None = None, api_key: str | None = None, *,
               runtime: Runtime | None = None, device: str | None = None, dtype: str | None = None,
               load_format: str | None = None, allowed_local_media_path: str | Path | None = None,
               allowed_media_domains: list[str] | None = None,
               request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S) -> FastAPI:
    """Build the server; loads the deploy's stage models unless a ready `runtime` is given (tests).
    `request_timeout_s`: a chat turn running longer is cancelled in every stage and answered 504 (None: no limit)."""
    if runtime is None:  # loaded and warmed here: /health answers only once every stage has served a request
        runtime = Runtime.load(deploy_config, device=device, dtype=dtype, load_format=load_format)
        asyncio.run(runtime.warm_up())
    runtime.request_timeout_s = request_timeout_s
    name = served_model_name or deploy_config.stages[0].model
    state = ServerState(runtime=runtime, served_model_name=name, api_key=api_key or None,
                        allowed_local_media_path=Path(allowed_local_media_path) if allowed_local_media_path else None)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        runtime.close()

    app = FastAPI(title="aura-omni", version=__version__, lifespan=lifespan, dependencies=[Depends(check_api_key)])
    app.state.server = state
    app.state.allowed_media_domains = allowed_media_domains  # remote chat media hosts; None: $AURA_OMNI_ALLOWED_MEDIA_DOMAINS
    install_error_handlers(app)
    for module in ENDPOINT_MODULES:
        app.include_router(importlib.import_module(f"{__package__}.{module}").router)
    return app
