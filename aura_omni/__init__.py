"""aura-omni: Qwen3-ASR -> AURA (Qwen3-VL) -> Qwen3-TTS Talker -> Code2Wav, served OpenAI-compatibly."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`from aura_omni import Omni` without importing torch for `aura_omni.cli --help` and friends."""
    if name == "Omni":
        from .omni import Omni

        return Omni
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
