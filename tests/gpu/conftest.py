"""What the GPU tests share: the tiny real-layout checkpoints, written once a session."""

import pytest


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    from aura_omni.testing.tiny_asr import write_tiny_asr
    from aura_omni.testing.tiny_tts import write_tiny_tts
    from aura_omni.testing.tiny_vl import write_tiny_aura

    root = tmp_path_factory.mktemp("tiny")
    return {"asr": write_tiny_asr(root / "asr"), "aura": write_tiny_aura(root / "aura"),
            "tts": write_tiny_tts(root / "tts", "custom_voice")}
