"""Native Qwen3-TTS 12 Hz: Talker + code predictor (talker.py, code_predictor.py), prompt assembly
(prompt.py), sampling rules (sampling.py), batched generation (generate.py), the Code2Wav codec and
encoders (code2wav*.py, codec_encoder.py, speaker_encoder.py) and the facade used by the server (tts.py)."""
