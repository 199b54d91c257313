"""The HTTP layer without models: OpenAI-style errors, API keys, and endpoints whose stages are absent."""

import pytest
from fastapi import WebSocket
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse

from aura_omni.deploy import parse_deploy_config
from aura_omni.media.limits import Limits
from aura_omni.server.app import create_app
from aura_omni.server.drain import Drain
from aura_omni.server.websocket_auth import accept_with_key
from aura_omni.pipeline.runtime import Runtime

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


def test_unknown_model_error_names_every_served_name():
    deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [
        {"stage_id": 0, "model": "asr"}, {"stage_id": 1, "model": "aura"}]}, "two.yaml")
    client = TestClient(create_app(deploy, ["aura-omni-tiny", "aurateam/AURA", "qwen3-tts"], "k",
                                   runtime=Runtime(deploy, {})))
    r = client.post("/v1/chat/completions", headers=AUTH, json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404
    assert r.json()["error"]["message"].endswith("serves `aura-omni-tiny`, `aurateam/AURA`, `qwen3-tts`")


def test_a_missing_field_has_the_same_code_on_every_endpoint(asr_aura_only):
    """OpenAI's `missing_required_parameter`, the field in `param` (a multipart form's missing file: in
    e2e/test_transcriptions_api.py)."""
    chat = asr_aura_only.post("/v1/chat/completions", headers=AUTH, json={"model": "served"})
    speech = asr_aura_only.post("/v1/audio/speech", headers=AUTH, json={"model": "served", "voice": "x"})
    errors = [r.json()["error"] for r in (chat, speech)]
    assert [(e["param"], e["code"]) for e in errors] == [
        ("messages", "missing_required_parameter"), ("input", "missing_required_parameter")]


# ---------------------------------------------------------------------------------------------- internal errors

def test_an_internal_error_is_a_generic_500_never_a_400(asr_aura_only, caplog):
    app = asr_aura_only.app

    @app.get("/v1/boom")
    async def boom():
        raise ValueError("secret detail at /srv/models/aura <object at 0x7f>")

    client = TestClient(app, raise_server_exceptions=False)
    r = client.get("/v1/boom", headers=AUTH)
    err = r.json()["error"]
    assert r.status_code == 500 and err["type"] == "server_error" and err["code"] == "server_error"
    assert "secret" not in err["message"] and "/srv" not in err["message"] and "error id" in err["message"]
    assert any("secret detail" in (rec.exc_text or "") for rec in caplog.records)  # the log keeps the traceback


# ---------------------------------------------------------------------------------------------- limits

def _limited(**limits) -> TestClient:
    deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [{"stage_id": 0, "model": "asr"}],
                                  "limits": {"max_concurrent_requests": 8}}, "limits.yaml")
    return TestClient(create_app(deploy, "served", "k", runtime=Runtime(deploy, {}),
                                 limits=Limits.from_values(deploy.limits, limits)))


def test_deploy_limits_and_flags_reach_the_app():
    client = _limited(max_body_bytes=1000)
    limits = client.app.state.server.limits
    assert limits.max_concurrent_requests == 8 and limits.max_body_bytes == 1000
    with pytest.raises(ValueError, match="unknown limit 'max_bodybytes'"):
        Limits.from_values({"max_bodybytes": 1})
    with pytest.raises(ValueError, match="positive"):
        Limits.from_values({"max_body_bytes": 0})


def test_a_body_over_the_limit_is_413_before_any_endpoint_code():
    client = _limited(max_body_bytes=1000)
    body = {"model": "served", "input": "x" * 2000, "voice": "x"}
    r = client.post("/v1/audio/speech", headers=AUTH, json=body)
    assert r.status_code == 413 and "1000 bytes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: counted as it arrives
        yield b'{"model": "served", "input": "'
        for _ in range(10):
            yield b"x" * 200
        yield b'", "voice": "x"}'

    r = client.post("/v1/audio/speech", headers={**AUTH, "Content-Type": "application/json"}, content=chunks())
    assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"
    assert client.get("/health").status_code == 200


def test_requests_over_the_concurrency_limit_get_429():
    client = _limited(max_concurrent_requests=1)
    client.get("/v1/models", headers=AUTH)  # builds the middleware stack
    stack = client.app.middleware_stack
    while not hasattr(stack, "requests"):
        stack = stack.app
    stack.requests = 1  # one request in flight
    r = client.get("/v1/models", headers=AUTH)
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error" and r.headers["retry-after"]
    assert client.get("/health").status_code == 200  # never counted, never refused
    stack.requests = 0
    assert client.get("/v1/models", headers=AUTH).status_code == 200


def test_a_request_counts_out_when_its_last_byte_goes_not_after_its_clean_up():
    """A client at the limit sends its next request as soon as it has a response: the clean-up the endpoint runs after
    the last byte (a stage release, a Ray actor call) must not make that request a 429."""
    import asyncio
    from types import SimpleNamespace

    from aura_omni.server.admission import Admission

    async def main():
        cleanup = asyncio.Event()

        async def app(scope, receive, send):  # streams two chunks, then cleans up
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"a", "more_body": True})
            await send({"type": "http.response.body", "body": b"b"})
            await cleanup.wait()

        admission = Admission(app, SimpleNamespace(limits=Limits.from_values({"max_concurrent_requests": 1}),
                                                   drain=Drain()))
        scope = {"type": "http", "path": "/v1/audio/speech", "headers": []}
        sent, last_byte = [], asyncio.Event()

        async def send(message):
            sent.append((message, admission.requests))
            if message["type"] == "http.response.body" and not message.get("more_body"):
                last_byte.set()

        async def receive():
            return {"type": "http.request", "body": b""}

        first = asyncio.create_task(admission(scope, receive, send))
        await last_byte.wait()
        counts = [n for _, n in sent]
        assert counts == [1, 1, 0]  # in flight while streaming, out as its last byte goes
        assert admission.requests == 0 and not first.done()  # still cleaning up, no longer counted
        cleanup.set()
        await first
        assert admission.requests == 0  # counted out once

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------- websockets

def _socket_app(api_key="k", **limits):
    deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [{"stage_id": 0, "model": "asr"}]}, "ws.yaml")
    app = create_app(deploy, "served", api_key, runtime=Runtime(deploy, {}), limits=Limits.from_values(limits))

    @app.websocket("/v1/echo")
    async def echo(websocket: WebSocket):
        if not await accept_with_key(websocket):
            return
        await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    return TestClient(app)


@pytest.mark.parametrize("how", ["header", "query", "subprotocol"])
def test_websocket_api_key_in_any_of_three_places(how):
    client = _socket_app()
    kwargs = {"header": dict(headers={"Authorization": "Bearer k"}), "query": {},
              "subprotocol": dict(subprotocols=["realtime", "openai-insecure-api-key.k"])}[how]
    url = "/v1/echo?api_key=k" if how == "query" else "/v1/echo"
    with client.websocket_connect(url, **kwargs) as ws:
        ws.send_text("hi")
        assert ws.receive_text() == "hi"


@pytest.mark.parametrize("url,kwargs", [("/v1/echo", {}), ("/v1/echo?api_key=wrong", {}),
                                        ("/v1/echo", {"subprotocols": ["openai-insecure-api-key.wrong"]})])
def test_websocket_without_the_key_is_refused(url, kwargs):
    with pytest.raises(WebSocketDenialResponse) as e:  # the handshake answered 401, OpenAI error JSON
        with _socket_app().websocket_connect(url, **kwargs) as ws:
            ws.receive_text()
    assert e.value.status_code == 401 and e.value.json()["error"]["type"] == "authentication_error"
