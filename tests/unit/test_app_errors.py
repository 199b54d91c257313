"""The HTTP layer without models: OpenAI-style errors, API keys, and endpoints whose stages are absent."""

import pytest
from fastapi.testclient import TestClient

from aura_omni.config import parse_deploy_config
from aura_omni.pipeline.runtime import Runtime
from aura_omni.server.app import create_app

AUTH = {"Authorization": "Bearer k"}


def _client(deploy, api_key="k") -> TestClient:
    return TestClient(create_app(deploy, "served", api_key, runtime=Runtime(deploy, {})))


@pytest.fixture
def asr_aura_only():
    return _client(parse_deploy_config({"pipeline": "aura_omni", "stages": [
        {"stage_id": 0, "model": "asr"}, {"stage_id": 1, "model": "aura"}]}, "two.yaml"))


def test_speech_on_a_deploy_without_tts_stages_names_what_is_missing(asr_aura_only):
    r = asr_aura_only.post("/v1/audio/speech", headers=AUTH, json={"model": "served", "input": "hi", "voice": "x"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "stage_not_deployed"
    assert "two.yaml" in err["message"] and "Talker + Code2Wav" in err["message"]
    assert asr_aura_only.get("/v1/audio/voices", headers=AUTH).status_code == 400


def test_validation_errors_become_400_with_the_field(asr_aura_only):
    r = asr_aura_only.post("/v1/audio/speech", headers=AUTH, json={"model": "served", "input": 3, "voice": "x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    r = asr_aura_only.post("/v1/audio/speech", headers={**AUTH, "Content-Type": "application/json"}, content=b"{")
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_auth_and_unknown_routes(asr_aura_only):
    assert asr_aura_only.get("/v1/models").status_code == 401
    assert asr_aura_only.get("/v1/models", headers={"Authorization": "Basic k"}).status_code == 401
    assert asr_aura_only.get("/v1/models", headers=AUTH).json()["data"][0]["id"] == "served"
    r = asr_aura_only.get("/v1/nope", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    assert asr_aura_only.get("/health").json()["status"] == "ok"


def test_unknown_model_is_404(asr_aura_only):
    r = asr_aura_only.post("/v1/audio/speech", headers=AUTH, json={"model": "gpt-4o", "input": "hi", "voice": "x"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
