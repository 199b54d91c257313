"""What `bench serve` sends: texts to speak, and user speech and camera frames for voice turns.

The user's audio is a voiced-sounding pulse train (deterministic, so every run sends the same bytes), or, where a
server's VAD must hear speech (realtime turns under server VAD), a recorded phrase (`RECORDED_SPEECH`: espeak-ng
saying "hello", 3.1 s, 16 kHz, which Silero VAD hears; the pulse train it does not). A frame is a JPEG of a colour
gradient. A server's models hear and see noise either way; what is measured is the serving.
"""

from __future__ import annotations

import base64
import io
import wave
from pathlib import Path

import numpy as np

from ..media.encode import to_pcm16

INPUT_SAMPLE_RATE = 16000  # Qwen3-ASR input rate; what the realtime reference client sends
RECORDED_SPEECH = Path(__file__).with_name("speech_hello_16k.wav")

DEFAULT_PROMPTS = [
    "The quick brown fox jumps over the lazy dog while the sun sets behind the hills.",
    "Please remind me to call the dentist tomorrow morning at nine.",
    "Streaming speech lets a listener hear the first words before the whole sentence is ready.",
    "It was a bright cold day in April, and the clocks were striking thirteen.",
    "Turn left at the second light, then keep going until you see the old train station.",
    "Good evening! Tonight's forecast calls for light rain and a gentle breeze from the west.",
    "A short answer is often the best one, as long as it is also the right one.",
    "Welcome back. Your meeting with the design team has moved to half past three.",
]


def load_prompts(path: str | None) -> list[str]:
    """One prompt per non-empty line of `path`, or the built-in sentences."""
    if path is None:
        return list(DEFAULT_PROMPTS)
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    prompts = [line for line in lines if line]
    if not prompts:
        raise ValueError(f"{path}: no prompts (one text per line)")
    return prompts


def speech_like(seconds: float, sample_rate: int = INPUT_SAMPLE_RATE) -> np.ndarray:
    """A 140 Hz pulse train with harmonics, a slow vibrato and a syllable-rate envelope, float32 in [-1, 1]."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    f0 = 140 + 10 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    wav = sum(np.sin(k * phase) / k for k in range(1, 8)) * 0.2 * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t) ** 2)
    return np.asarray(wav, np.float32)


def recorded_speech() -> np.ndarray:
    """`RECORDED_SPEECH` as float32 at INPUT_SAMPLE_RATE."""
    import soundfile as sf

    samples, rate = sf.read(RECORDED_SPEECH, dtype="float32")
    assert rate == INPUT_SAMPLE_RATE, f"{RECORDED_SPEECH} is {rate} Hz"
    return samples


def wav_bytes(samples: np.ndarray, sample_rate: int = INPUT_SAMPLE_RATE) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(to_pcm16(samples))
    return buf.getvalue()


def jpeg_frames(count: int, size: int | tuple[int, int]) -> list[str]:
    """`count` distinct JPEG frames of `size` (width, height; an int: square), bare base64."""
    from PIL import Image

    width, height = (size, size) if isinstance(size, int) else size
    frames = []
    across, down = np.linspace(0, 255, width, dtype=np.float32), np.linspace(0, 255, height, dtype=np.float32)
    for i in range(count):
        rgb = np.stack([np.add.outer(down, across) / 2, np.tile(down, (width, 1)).T, np.full((height, width), 40.0 * i)],
                       axis=-1)
        buf = io.BytesIO()
        Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=70)
        frames.append(base64.b64encode(buf.getvalue()).decode())
    return frames


def data_url(path: str) -> str:
    """A local reference audio file as a data URL (how the OpenAI-style servers take `ref_audio`)."""
    data = Path(path).read_bytes()
    kind = {".wav": "wav", ".mp3": "mpeg", ".flac": "flac", ".ogg": "ogg"}.get(Path(path).suffix.lower(), "wav")
    return f"data:audio/{kind};base64,{base64.b64encode(data).decode()}"
