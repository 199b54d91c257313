"""schemathesis against the server's own OpenAPI schema, every HTTP operation, on the tiny four-stage deploy in
process (ASGI): whatever a client sends, no 5xx, every answer within a bounded time, and the server healthy and
idle afterwards. Bounded for CI: a few dozen examples per operation, no shrinking, no example database."""

from __future__ import annotations

import os
import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from starlette.testclient import TestClient

from aura_omni.deploy import load_deploy_config
from aura_omni.media.limits import Limits
from aura_omni.server.app import create_app

API_KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
EXAMPLES = int(os.environ.get("AURA_OMNI_FUZZ_EXAMPLES", 25))  # per operation; raise it for a longer hunt
MAX_SECONDS = 20.0  # one answer, on 2 shared CPU cores
# fuzzed values stay small enough to run: a valid fuzzed turn may generate up to these many tokens
LIMITS = Limits(max_aura_tokens=16, max_tts_new_tokens=8, max_asr_tokens=16, max_text_chars=2000)


@pytest.fixture(scope="module")
def app(chat_customvoice_deploy):
    """ASR -> AURA -> the CustomVoice Talker: with a default speaker, fuzzed turns and speech can run to the end."""
    app = create_app(load_deploy_config(chat_customvoice_deploy), "tiny", API_KEY, limits=LIMITS)
    yield app
    app.state.server.runtime.close()


def check(case, response, elapsed: float) -> None:
    where = f"{case.method} {case.path}"
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:500]}"
    assert elapsed < MAX_SECONDS, f"{where} took {elapsed:.1f} s"
    content_type = (response.headers.get("content-type") or [""])[0]  # schemathesis keeps header values as lists
    if response.status_code >= 400 and content_type.startswith("application/json"):
        error = response.json()["error"]  # OpenAI error JSON, in words
        assert set(error) == {"message", "type", "param", "code"} and error["message"], where
        assert " object at 0x" not in error["message"] and "Traceback" not in error["message"], where


def fuzz_operations(app, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9  # every HTTP endpoint, /health included
    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        def fuzz(case):
            if mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
                case.body.pop("model", None)  # a random model name is a 404 before anything else runs
                if isinstance(case.body.get("messages"), list):  # random history and fields, a user turn last
                    case.body["messages"] = case.body["messages"][:-1] + [{"role": "user", "content": "hi"}]
            start = time.monotonic()
            response = case.call(headers=AUTH)
            check(case, response, time.monotonic() - start)

        try:
            fuzz()
        except Unsatisfiable:  # nothing to make invalid (GET /health, GET /v1/models): covered by POSITIVE
            assert mode is GenerationMode.NEGATIVE, operation.label


def test_every_operation_without_server_errors_in_bounded_time_and_healthy_after(app):
    # one test: schemathesis ends the app's lifespan (which closes the runtime) when a test ends
    client = TestClient(app)
    steps_before = {role: stats["steps"] for role, stats in client.get("/health").json()["stages"].items()}
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        fuzz_operations(app, mode)
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok", health.text
    for role, stats in health.json()["stages"].items():
        assert stats.get("running", 0) == 0 and stats.get("waiting", 0) == 0, (role, stats)
    steps = {role: stats["steps"] - steps_before[role] for role, stats in health.json()["stages"].items()}
    assert steps["talker"] > 0 and steps["aura"] > 0, steps  # fuzzed requests reached the stages, not only validation
