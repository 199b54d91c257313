"""Shared end-to-end fixtures: tiny checkpoints written once per session by `aura-omni make-tiny`, real
`aura-omni serve` processes on free loopback ports, and official `openai` clients pointed at them.

Set AURA_OMNI_TINY_DIR to reuse an existing make-tiny folder (it is written there if empty).
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
from pathlib import Path

import pytest
import soundfile as sf
import yaml
from serving import API_KEY, _cli, _start

from aura_omni.bench.inputs import speech_like


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    root = Path(os.environ.get("AURA_OMNI_TINY_DIR") or tmp_path_factory.mktemp("tiny"))
    if not (root / "deploy_demo.yaml").exists():
        subprocess.run(_cli("make-tiny", str(root)), check=True, timeout=600)
    return root


@pytest.fixture(scope="session")
def chat_customvoice_deploy(tiny_dir) -> Path:
    """The four chat stages with the CustomVoice Talker (make-tiny writes only a TTS-only CustomVoice deploy)."""
    data = yaml.safe_load((tiny_dir / "deploy.yaml").read_text())
    for stage in data["stages"][2:]:
        stage["model"] = "./qwen3_tts_custom_voice"
    path = tiny_dir / "deploy_chat_customvoice.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def start_server(tiny_dir, tmp_path_factory):
    """`start_server(deploy_file_name, *serve_args)`: a ready server on a deploy file in tiny_dir; the caller stops it."""
    return lambda deploy, *extra: _start(tiny_dir, tmp_path_factory, deploy, *extra)


@pytest.fixture(scope="session")
def media_root(tmp_path_factory) -> Path:
    """The folder the Base server allows server-local reference audio from."""
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="session")
def base_server(tiny_dir, tmp_path_factory, media_root):
    """Qwen3-TTS Base (voice clone) behind deploy_tts.yaml."""
    server = _start(tiny_dir, tmp_path_factory, "deploy_tts.yaml", "--allowed-local-media-path", str(media_root))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def customvoice_server(tiny_dir, tmp_path_factory):
    """Qwen3-TTS CustomVoice (preset speakers) behind deploy_tts_customvoice.yaml."""
    server = _start(tiny_dir, tmp_path_factory, "deploy_tts_customvoice.yaml")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def omni_server(tiny_dir, tmp_path_factory):
    """All four stages (ASR -> AURA -> Qwen3-TTS Base -> Code2Wav) behind deploy.yaml: chat and speech."""
    server = _start(tiny_dir, tmp_path_factory, "deploy.yaml")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def client(base_server):
    from openai import OpenAI

    return OpenAI(base_url=base_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def cv_client(customvoice_server):
    from openai import OpenAI

    return OpenAI(base_url=customvoice_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def reference_wav(seconds: float = 1.0, sr: int = 16000) -> bytes:
    """A voiced-sounding reference: a 140 Hz pulse train with harmonics and a slow vibrato (deterministic)."""
    buf = io.BytesIO()
    sf.write(buf, speech_like(seconds, sr), sr, format="WAV")
    return buf.getvalue()


@pytest.fixture(scope="session")
def ref_wav_bytes() -> bytes:
    return reference_wav()


@pytest.fixture(scope="session")
def ref_audio_b64(ref_wav_bytes) -> str:
    return base64.b64encode(ref_wav_bytes).decode()


@pytest.fixture(scope="session")
def auth() -> dict:
    return {"Authorization": f"Bearer {API_KEY}"}
