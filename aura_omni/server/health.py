"""`GET /health` (no auth; load balancers probe it) and `GET /v1/models` (the served model name)."""

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..deploy import AURA, TALKER, DeployConfig
from .protocol import ModelCard

router = APIRouter()


def main_model(deploy: DeployConfig) -> str:
    """The checkpoint the served name stands for: AURA's, else the Talker's (a TTS-only deploy), else stage 0's."""
    for role in (AURA, TALKER):
        if (stage := deploy.stage(role)) is not None:
            return stage.model
    return deploy.stages[0].model


@router.get("/health")
async def health(request: Request):
    """Each stage loop's published counters; 503 while a stage loop is down (`device_lost` names those whose GPU
    failed: they stay down until the process is restarted), or stalled (one step, or one request's admission,
    running past its `stall_s`: stages/supervision.py), or while the server drains before it stops (drain.py). Reads,
    never waits: no engine lock."""
    state = request.app.state.server
    stages = state.runtime.stage_stats()
    down = sorted(name for name, c in stages.items() if not c["alive"])
    stalled = sorted(name for name, c in stages.items() if "stalled_s" in c)
    draining = state.drain.draining  # shutting down: a load balancer takes this instance out
    status = "draining" if draining else "down" if down else "stalled" if stalled else "ok"
    body = {"status": status, "pipeline": state.runtime.deploy.pipeline,
            "roles": sorted(state.runtime.deploy.roles), "stages": stages}
    if down:
        body["down"] = down
    if lost := sorted(name for name, c in stages.items() if c.get("device_lost")):
        body["device_lost"] = lost
    if stalled:
        body["stalled"] = stalled
    if warming := {name: c["graphs_pending"] for name, c in stages.items() if c.get("graphs_pending")}:
        body["warming"] = warming  # serving already; these graphs are still being captured (pipeline/warmup.py)
    return JSONResponse(body, status_code=503 if draining or down or stalled else 200)


@router.get("/v1/models")
async def list_models(request: Request):
    state = request.app.state.server
    root = main_model(state.runtime.deploy)
    names = [state.served_model_name, *state.model_aliases]
    return {"object": "list", "data": [ModelCard(id=name, root=root).model_dump() for name in names]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request):
    state = request.app.state.server
    state.check_model(model_id)
    return ModelCard(id=model_id, root=main_model(state.runtime.deploy)).model_dump()
