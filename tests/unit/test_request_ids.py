"""X-Request-Id on every answer (taken or made) and the error log: each 4xx/5xx with its id, route, status and code."""

import logging
import re

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDisconnect

from aura_omni.deploy import parse_deploy_config
from aura_omni.media.limits import Limits
from aura_omni.pipeline.runtime import Runtime
from aura_omni.placement import StageUnavailableError
from aura_omni.server.app import create_app

AUTH = {"Authorization": "Bearer k"}
LOGGER = "aura_omni.server.requests"


@pytest.fixture
def client() -> TestClient:
    deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [{"stage_id": 0, "model": "asr"}]}, "asr.yaml")
    app = create_app(deploy, "served", "k", runtime=Runtime(deploy, {}),
                     limits=Limits.from_values(deploy.limits, {"max_body_bytes": 1000}))

    @app.get("/v1/boom")
    async def boom():
        raise ValueError("a bug")

    @app.get("/v1/replica/{name}")
    async def replica(name: str):
        raise StageUnavailableError(f"{name} went away")

    return TestClient(app, raise_server_exceptions=False)


def logged(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_a_clients_request_id_is_echoed_and_one_is_made_otherwise(client):
    r = client.get("/v1/models", headers={**AUTH, "X-Request-Id": "trace-42/a.b"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "trace-42/a.b"
    made = {client.get("/health").headers["x-request-id"] for _ in range(3)}
    assert len(made) == 3 and all(re.fullmatch(r"[0-9a-f]{32}", m) for m in made)


@pytest.mark.parametrize("sent", ["has a space", "x" * 129, "caf\u00e9", ""])
def test_an_unusable_request_id_is_replaced(client, sent):
    r = client.get("/health", headers={"X-Request-Id": sent.encode("utf-8")})
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])


def test_client_errors_are_logged_at_info_with_id_route_status_and_code(client, caplog):
    caplog.set_level(logging.INFO, LOGGER)
    r = client.post("/v1/audio/speech", headers={**AUTH, "X-Request-Id": "r-1"},
                    json={"model": "gpt-4o", "input": "hi", "voice": "x"})
    assert r.status_code == 404 and r.headers["x-request-id"] == "r-1"
    r = client.get("/v1/models", headers={"X-Request-Id": "r-2"})  # no API key
    assert r.status_code == 401 and r.headers["x-request-id"] == "r-2"
    r = client.post("/v1/audio/speech", headers={**AUTH, "X-Request-Id": "r-3"},
                    json={"model": "served", "input": "x" * 2000, "voice": "x"})  # Admission's 413
    assert r.status_code == 413 and r.headers["x-request-id"] == "r-3"
    r = client.get("/v1/nowhere", headers={**AUTH, "X-Request-Id": "r-4"})
    assert r.status_code == 404
    assert client.get("/v1/models", headers={**AUTH, "X-Request-Id": "r-5"}).status_code == 200
    assert logged(caplog) == [
        (logging.INFO, "request r-1: POST /v1/audio/speech -> 404 model_not_found"),
        (logging.INFO, "request r-2: GET /v1/models -> 401 missing_api_key"),
        (logging.INFO, "request r-3: POST /v1/audio/speech -> 413 body_too_large"),
        (logging.INFO, "request r-4: GET /v1/nowhere -> 404 not_found_error"),
    ]  # the 200 is not logged


def test_server_errors_carry_the_id_and_are_logged_as_warnings_or_errors(client, caplog):
    caplog.set_level(logging.INFO, LOGGER)
    r = client.get("/v1/boom", headers={**AUTH, "X-Request-Id": "b-1"})
    assert r.status_code == 500 and r.headers["x-request-id"] == "b-1" and r.json()["error"]["code"] == "server_error"
    r = client.get("/v1/replica/talker", headers={**AUTH, "X-Request-Id": "b-2"})
    assert r.status_code == 503 and r.headers["x-request-id"] == "b-2" and r.headers["retry-after"] == "1"
    assert logged(caplog) == [
        (logging.ERROR, "request b-1: GET /v1/boom -> 500 server_error"),
        (logging.WARNING, "request b-2: GET /v1/replica/{name} -> 503 stage_unavailable"),  # the route, not the path
    ]


def test_a_realtime_socket_has_its_session_id_and_a_refusal_is_logged(client, caplog):
    caplog.set_level(logging.INFO, LOGGER)
    with client.websocket_connect("/v1/realtime", headers={**AUTH, "X-Request-Id": "not-for-sockets"}) as ws:
        sid = dict(ws.extra_headers)[b"x-request-id"].decode()
        assert ws.receive_json()["code"] == "stage_not_deployed"  # this deploy has no AURA: refused after accept
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()
    assert re.fullmatch(r"sess_\w+", sid)
    assert logged(caplog) == [(logging.INFO, f"request {sid}: WS /v1/realtime -> closed 1008 stage_not_deployed")]


def test_a_health_503_is_logged_with_its_status(client, caplog):
    caplog.set_level(logging.INFO, LOGGER)
    client.app.state.server.drain.since = 0.0  # draining
    r = client.get("/health", headers={"X-Request-Id": "h-1"})
    assert r.status_code == 503 and r.json()["status"] == "draining"
    assert logged(caplog) == [(logging.WARNING, "request h-1: GET /health -> 503 draining")]
