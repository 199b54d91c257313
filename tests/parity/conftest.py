"""The isolated qwen-tts reference environment (scripts/setup_qwen_tts_reference.sh) shared by the TTS parity tests."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QWEN_TTS_REF_VENV = Path(os.environ.get("QWEN_TTS_REF_VENV", ROOT / ".venv-qwen-tts"))


@pytest.fixture(scope="session")
def qwen_tts_python() -> Path:
    """The reference venv's python; the test is skipped (not failed) where the venv was not built."""
    python = QWEN_TTS_REF_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"reference venv {QWEN_TTS_REF_VENV} absent (scripts/setup_qwen_tts_reference.sh)")
    return python
