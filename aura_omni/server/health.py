"""`GET /health` (no auth; load balancers probe it) and `GET /v1/models` (the served model name)."""

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .protocol import ModelCard

router = APIRouter()


@router.get("/health")
async def health(request: Request):
    """Each stage loop's published counters; 503 while a stage loop is down. Reads, never waits: no engine lock."""
    state = request.app.state.server
    stages = state.runtime.stage_stats()
    down = sorted(name for name, c in stages.items() if not c["alive"])
    body = {"status": "down" if down else "ok", "pipeline": state.runtime.deploy.pipeline,
            "roles": sorted(state.runtime.deploy.roles), "stages": stages}
    if down:
        body["down"] = down
    return JSONResponse(body, status_code=503 if down else 200)


@router.get("/v1/models")
async def list_models(request: Request):
    state = request.app.state.server
    root = state.runtime.deploy.stages[0].model
    return {"object": "list", "data": [ModelCard(id=state.served_model_name, root=root).model_dump()]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request):
    state = request.app.state.server
    state.check_model(model_id)
    return ModelCard(id=model_id, root=state.runtime.deploy.stages[0].model).model_dump()
