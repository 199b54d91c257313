"""The voice-agent frameworks, unmodified, against a real `aura-omni serve` (tiny four-stage deploy on CPU): the OpenAI
Agents SDK, Pipecat, LiveKit Agents and the plain `openai` SDK in both dialects, each pointed at the server's URL as
its docs say; and function calling, a tool forced by `tool_choice` and run by the framework itself (the Agents SDK's
`@function_tool`, LiveKit's `function_tool`).

Their pins collide with the project's (openai-agents: websockets<17, pipecat-ai: protobuf<7), so they live in their
own venv (scripts/install_framework_venvs.sh, constraints-frameworks.txt) and each scenario is a script of
tests/frameworks/ run there as a subprocess. Frameworks send no extra_body, so the deploy itself makes AURA speak:
its stop tokens (<|silent|>, <|im_end|>) are held back for its first tokens (`min_tokens`: at most 2, the warmup's
`max_tokens`), so no reply is silent, and the Talker's
`max_tokens` keeps each sentence short on 2 CPU cores. The user's speech is a recorded phrase the server's Silero VAD
hears, then silence long enough for any eagerness to end the turn.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from aura_omni.bench.inputs import INPUT_SAMPLE_RATE, recorded_speech
from aura_omni.media.audio import resample

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "frameworks"
VENV = Path(os.environ.get("AURA_OMNI_FRAMEWORKS_VENV", ROOT / ".venv-agents"))
API_KEY = "test-key"  # serving.API_KEY
MODEL = "tiny-tts"  # serving's --served-model-name
SILENCE_S = 2.5  # after the phrase: more than the longest end-of-turn wait (semantic_vad low, 1.5 s)
CLIENT_TIMEOUT_S = 420


def frameworks_deploy(tiny_dir: Path) -> str:
    """deploy.yaml with the CustomVoice Talker (OpenAI voice names are aliases of its presets), AURA made to speak,
    and two sessions at once (a closing session keeps its slot until its cleanup)."""
    data = yaml.safe_load((tiny_dir / "deploy.yaml").read_text())
    for stage in data["stages"][2:]:
        stage["model"] = "./qwen3_tts_custom_voice"
    data["stages"][1]["default_sampling_params"].update(min_tokens=2, max_tokens=8)
    data["stages"][2]["default_sampling_params"]["max_tokens"] = 24
    data["limits"] = {"max_concurrent_sessions": 2}
    data["duplex_session"] = {"max_sessions": 2, "disconnect_grace_s": 0}
    name = "deploy_frameworks.yaml"
    (tiny_dir / name).write_text(yaml.safe_dump(data, sort_keys=False))
    return name


@pytest.fixture(scope="module")
def server(tiny_dir, start_server):
    server = start_server(frameworks_deploy(tiny_dir))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def speech_file(tmp_path_factory) -> Path:
    """The user's turn as OpenAI Realtime audio: pcm16 mono 24 kHz, a spoken phrase and then silence."""
    phrase = resample(recorded_speech(), INPUT_SAMPLE_RATE, 24000)
    audio = np.concatenate([phrase, np.zeros(int(SILENCE_S * 24000), np.float32)])
    path = tmp_path_factory.mktemp("speech") / "turn_24k.pcm"
    path.write_bytes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def run_client(script: str, server, speech_file: Path, *extra: str) -> str:
    python = VENV / "bin" / "python"
    if not python.exists():
        if os.environ.get("AURA_OMNI_REQUIRE_FRAMEWORKS"):
            pytest.fail(f"{VENV} is missing: run scripts/install_framework_venvs.sh")
        pytest.skip(f"{VENV} is missing (scripts/install_framework_venvs.sh)")
    proc = subprocess.run([str(python), str(SCRIPTS / script), "--url", server.url, "--model", MODEL,
                           "--api-key", API_KEY, "--speech", str(speech_file), *extra],
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, cwd=SCRIPTS,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("OK"), (
        f"{script} {' '.join(extra)} failed ({proc.returncode}):\n{output[-8000:]}\n--- server log ---\n"
        f"{server.log_path.read_text(errors='replace')[-3000:]}")
    sys.stdout.write(output)
    return output


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["ga", "beta"])
def test_openai_sdk_realtime_connect(server, speech_file, dialect):
    run_client("openai_sdk.py", server, speech_file, "--dialect", dialect)


@pytest.mark.slow
def test_openai_agents_sdk_realtime_runner(server, speech_file):
    run_client("agents_sdk.py", server, speech_file)


@pytest.mark.slow
def test_openai_agents_sdk_function_tool_forced_over_realtime(server, speech_file):
    run_client("agents_sdk_tools.py", server, speech_file)


@pytest.mark.slow
def test_pipecat_openai_realtime_llm_service(server, speech_file):
    run_client("pipecat_realtime.py", server, speech_file)


@pytest.mark.slow
def test_livekit_agents_realtime_model_session(server, speech_file):
    run_client("livekit_realtime.py", server, speech_file)


@pytest.mark.slow
def test_livekit_agents_function_tool_forced_over_realtime(server, speech_file):
    run_client("livekit_tools.py", server, speech_file)
