"""aura-omni: Qwen3-ASR -> AURA (Qwen3-VL) -> Qwen3-TTS Talker -> Code2Wav, served OpenAI-compatibly."""

__version__ = "0.1.0"
