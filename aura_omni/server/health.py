"""`GET /health` (no auth; load balancers probe it) and `GET /v1/models` (the served model name)."""

from fastapi import APIRouter, Request

from .protocol import ModelCard

router = APIRouter()


def _engine_stats(model) -> dict | None:
    """running / waiting requests, free / total KV blocks, prefix-cache hit rate of a stage's engine."""
    for owner in (model, getattr(model, "engine", None)):
        stats = getattr(owner, "stats", None)
        if callable(stats):
            return stats()
    return None


@router.get("/health")
async def health(request: Request):
    state = request.app.state.server
    models = state.runtime.models
    engines = {role: s for role, m in sorted(models.items()) if (s := _engine_stats(m)) is not None}
    return {"status": "ok", "pipeline": state.runtime.deploy.pipeline,
            "stages": sorted(state.runtime.deploy.roles), "loaded": sorted(models), "engines": engines}


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
