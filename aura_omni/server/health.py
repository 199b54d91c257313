"""`GET /health` (no auth; load balancers probe it) and `GET /v1/models` (the served model name)."""

from fastapi import APIRouter, Request

from .protocol import ModelCard

router = APIRouter()


@router.get("/health")
async def health(request: Request):
    state = request.app.state.server
    return {"status": "ok", "pipeline": state.runtime.deploy.pipeline, "stages": sorted(state.runtime.deploy.roles),
            "loaded": sorted(state.runtime.models), "engines": state.runtime.stage_stats()}


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
