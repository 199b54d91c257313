"""`GET /health` (no auth; load balancers probe it) and `GET /v1/models` (the served model name)."""

from fastapi import APIRouter, Request

from ..config import AURA, TALKER, DeployConfig
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
    state = request.app.state.server
    return {"status": "ok", "pipeline": state.runtime.deploy.pipeline, "stages": sorted(state.runtime.deploy.roles),
            "loaded": sorted(state.runtime.models), "engines": state.runtime.stage_stats()}


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
