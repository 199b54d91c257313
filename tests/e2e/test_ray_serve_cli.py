"""`aura-omni serve --distributed-executor-backend ray`: the server starts its own local Ray, serves the tiny deploy
through actors, lists each replica on /health, and stops Ray when it exits. Skipped without Ray."""

from __future__ import annotations

import subprocess

import httpx
import pytest

pytest.importorskip("ray")

API_KEY = "test-key"  # as serving.API_KEY


def raylets() -> set[str]:
    return set(subprocess.run(["pgrep", "-f", "raylet"], capture_output=True, text=True).stdout.split())


def test_serve_flag_runs_the_stages_as_ray_actors(chat_customvoice_deploy, start_server):
    before = raylets()
    server = start_server(chat_customvoice_deploy.name, "--distributed-executor-backend", "ray")
    try:
        health = httpx.get(server.url + "/health", timeout=10).json()
        assert sorted(health["stages"]) == ["asr/0", "aura/0", "code2wav/0", "talker/0"]
        r = httpx.post(server.url + "/v1/audio/speech", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60,
                       json={"input": "Hello there.", "voice": "vivian", "max_new_tokens": 4})
        assert r.status_code == 200 and r.content[:4] == b"RIFF"
    finally:
        server.stop()
    assert "Started a local Ray instance" in server.log_path.read_text()
    assert raylets() <= before  # the server's own Ray went with it
