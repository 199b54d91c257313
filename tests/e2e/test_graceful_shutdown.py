"""Graceful drain (server/drain.py) against a real `aura-omni serve` subprocess: SIGTERM while a streamed chat and
a realtime reply are in flight and a duplex session is open. `/health` says 503 `draining`, new requests get 503 with
`Retry-After` and new realtime sockets are refused; the stream and the reply finish; both sessions are closed with
`server_shutdown`; the process exits 0."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import time

import httpx
import numpy as np
import pytest
import websockets
import yaml
from serving import API_KEY

from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID

MODEL = "tiny-tts"  # serving.Server's --served-model-name
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SPEAK = [None, {"max_tokens": 24, "logit_bias": {str(AURA_SILENT_TOKEN_ID): -100, str(QWEN_IM_END_ID): -100}}]
DRAIN_TIMEOUT_S = 60  # far more than the replies take: what ends them is their own end, not the timeout


@pytest.fixture
def server(chat_customvoice_deploy, start_server):
    deploy = yaml.safe_load(chat_customvoice_deploy.read_text())
    deploy["limits"] = {"max_concurrent_sessions": 4}
    path = chat_customvoice_deploy.with_name("deploy_drain.yaml")
    path.write_text(yaml.safe_dump(deploy, sort_keys=False))
    server = start_server(path.name, "--drain-timeout", str(DRAIN_TIMEOUT_S))
    yield server
    server.stop()


def pcm16(seconds: float, rate: int) -> str:
    t = np.arange(int(seconds * rate)) / rate
    return base64.b64encode((0.2 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes()).decode()


async def events_until(ws, *types: str, log: list | None = None, timeout: float = 120) -> dict:
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if log is not None:
            log.append(event)
        if event["type"] in types:
            return event


async def chat_stream(client: httpx.AsyncClient, started: asyncio.Event, after_signal: list, signalled: asyncio.Event
                      ) -> bool:
    """A streamed chat reply with speech; True when it ended with [DONE]."""
    body = {"model": MODEL, "stream": True, "max_tokens": 24, "ignore_eos": True, "sampling_params_list": SPEAK,
            "messages": [{"role": "user", "content": "Talk for a while."}],
            "additional_information": {"tts_max_new_tokens": 120}, "audio": {"voice": "vivian", "format": "pcm16"}}
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return True
            event = json.loads(line[6:])
            assert "error" not in event, event
            if any((c.get("delta") or {}).get("audio", {}).get("data") for c in event["choices"]):
                started.set()
                if signalled.is_set():
                    after_signal.append(event)
    return False


async def drain_scenario(server) -> dict:
    ws_url = server.url.replace("http://", "ws://")
    out: dict = {}
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=120) as client, \
            websockets.connect(f"{ws_url}/v1/realtime?model={MODEL}", additional_headers=AUTH) as turn, \
            websockets.connect(f"{ws_url}/v1/duplex?model={MODEL}", additional_headers=AUTH) as duplex:
        created = await events_until(turn, "session.created")
        out["turn_header_id"] = turn.response.headers["x-request-id"]
        out["turn_session_id"] = created["session"]["id"]
        await duplex.send(json.dumps({"type": "session.update", "session": {"modalities": ["audio", "text"]}}))
        duplex_id = (await events_until(duplex, "session.created"))["session"]["id"]
        out["duplex_ids"] = (duplex.response.headers["x-request-id"], duplex_id)

        # in flight at the signal: a streamed chat reply and a realtime reply, both past their first audio
        chat_started, signalled, chat_after = asyncio.Event(), asyncio.Event(), []
        chat = asyncio.create_task(chat_stream(client, chat_started, chat_after, signalled))
        await turn.send(json.dumps({"type": "session.update", "session": {"voice": "vivian", "extra_body": {
            "tts_max_new_tokens": 120, "sampling_params_list": SPEAK}}}))
        await turn.send(json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(0.5, 24000)}))
        await turn.send(json.dumps({"type": "input_audio_buffer.commit", "create_response": True}))
        await events_until(turn, "response.output_audio.delta")
        await asyncio.wait_for(chat_started.wait(), 120)

        server.proc.send_signal(signal.SIGTERM)
        signalled.set()
        t0 = time.monotonic()
        while (health := await client.get("/health")).status_code == 200:
            assert time.monotonic() - t0 < 5, "/health still 200 five seconds after SIGTERM"
            await asyncio.sleep(0.02)
        out["health"] = (health.status_code, health.json()["status"])
        refused = await client.get("/v1/models", headers={"X-Request-Id": "late-1"})
        out["refused"] = (refused.status_code, refused.json()["error"]["code"], refused.headers.get("retry-after"),
                          refused.headers.get("x-request-id"))
        out["metrics"] = (await client.get("/metrics")).status_code
        async with websockets.connect(f"{ws_url}/v1/realtime?model={MODEL}", additional_headers=AUTH) as late:
            event = json.loads(await asyncio.wait_for(late.recv(), 10))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(late.recv(), 10)
            out["late_socket"] = (event["type"], event.get("code"), closed.value.rcvd.code)

        duplex_log: list = []
        out["duplex_closed"] = await events_until(duplex, "session.closed", log=duplex_log, timeout=10)
        out["duplex_closed_after_s"] = time.monotonic() - t0
        turn_log: list = []
        out["turn_done"] = await events_until(turn, "response.done", log=turn_log)
        out["turn_audio_after_signal"] = sum(e["type"] == "response.output_audio.delta" for e in turn_log)
        out["turn_closed"] = await events_until(turn, "session.closed", timeout=10)
        out["chat_done"] = await chat
        out["chat_audio_after_signal"] = len(chat_after)
        with contextlib.suppress(websockets.ConnectionClosed, asyncio.TimeoutError):
            await asyncio.wait_for(turn.recv(), 10)  # the server closes the socket after session.closed
        out["turn_socket_closed"] = turn.close_code
    out["drain_s"] = time.monotonic() - t0
    return out


@pytest.mark.slow
def test_sigterm_drains_in_flight_work_refuses_new_work_and_exits_0(server):
    out = asyncio.run(drain_scenario(server))
    log = server.log_path.read_text(errors="replace")
    assert server.proc.wait(timeout=DRAIN_TIMEOUT_S) == 0, log[-3000:]

    assert out["health"] == (503, "draining")
    assert out["refused"][:2] == (503, "draining") and out["refused"][2] == "1" and out["refused"][3] == "late-1"
    assert out["metrics"] == 200  # a scraper's last look
    assert out["late_socket"] == ("error", "draining", 1012)

    # the duplex session had no reply in flight: closed at once
    assert out["duplex_closed"]["reason"] == "server_shutdown" and out["duplex_closed_after_s"] < 5
    # the realtime reply and the chat stream were mid-audio at the signal, went on and finished whole
    assert out["turn_done"]["response"]["status"] == "completed" and out["turn_audio_after_signal"] > 0
    assert out["turn_closed"]["reason"] == "server_shutdown" and out["turn_socket_closed"] is not None
    assert out["chat_done"] and out["chat_audio_after_signal"] > 0
    assert out["drain_s"] < DRAIN_TIMEOUT_S

    # request ids: a realtime socket's is its session id
    assert out["turn_header_id"] == out["turn_session_id"]
    assert out["duplex_ids"][0] == out["duplex_ids"][1]
    assert "request late-1: GET /v1/models -> 503 draining" in log and "GET /health -> 503 draining" in log
