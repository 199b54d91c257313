from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)  # 2 shared cores: more threads oversubscribe next to server subprocesses


@pytest.fixture(scope="session")
def tiny_tts(tmp_path_factory):
    """`tiny_tts(kind, with_codec=True)`: the tiny Qwen3-TTS checkpoint of that kind (seed 0), written once per test
    run (~50 MB each) for every test that only reads it."""
    from aura_omni.testing.tiny_tts import write_tiny_tts

    made: dict[tuple[str, bool], Path] = {}

    def get(kind: str, with_codec: bool = True) -> Path:
        if (kind, with_codec) not in made:
            made[kind, with_codec] = write_tiny_tts(tmp_path_factory.mktemp("tts") / kind, kind, with_codec=with_codec)
        return made[kind, with_codec]
    return get
