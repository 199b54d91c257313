"""Where stages run. In this process by default (pipeline/runtime.py); with `distributed_executor_backend: ray`
each stage is one or more Ray actors (`ray_stages.py`) behind proxies with the stage objects' own surface
(`proxies.py`), so the orchestrator, the server and realtime sessions do not know the difference (docs/ray.md).

This module is what the rest of the server sees of placement, and imports no Ray: the session key a realtime
session's requests stick to their AURA replica by, and the error of a replica that went away.
"""

import os
from contextvars import ContextVar
from pathlib import Path

from aura_omni.stages.stage_engine import StageError

# The realtime session a request belongs to (RealtimeSession sets it in its response tasks): its AURA requests go to
# one replica, whose prefix cache holds the session's history. None: any replica.
session_key: ContextVar[str | None] = ContextVar("aura_omni_session_key", default=None)


def stage_pythonpath() -> str:
    """The PYTHONPATH of a stage's own process (a Ray actor's, or one the server starts): the aura_omni this process
    runs, before whatever the environment names."""
    code_root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(p for p in (code_root, os.environ.get("PYTHONPATH")) if p)


class StageUnavailableError(StageError):
    """The replica serving this request went away (its actor died); Ray restarts it. Answered 503: retry."""

    status = 503
    code = "stage_unavailable"
