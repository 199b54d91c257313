"""Request media references (media/request_media.py, server/voices.py, request/turn_builder.py) without models: base64 vs
server-local paths, byte and length caps before decoding, per-request image/video counts, and a registered
voice deleted while a turn's media decodes."""

import asyncio
import base64
import io
import types
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from aura_omni.deploy import TALKER, parse_deploy_config
from aura_omni.media.audio import AudioDecodeError
from aura_omni.media.limits import LimitError, Limits, MediaError, MediaLimits
from aura_omni.request import turn_builder
from aura_omni.media.request_media import MediaPolicy, load_audio, load_image_input, read_local, source_bytes
from aura_omni.pipeline.processors import PipelineRequestError
from aura_omni.request.turn_builder import TurnBuilder, TurnSpec
from aura_omni.server.errors import APIError
from aura_omni.server.voices import RegisteredVoice, VoiceLibrary, decode_ref_audio


def audio_bytes(seconds: float, sr: int = 16000, fmt: str = "WAV") -> bytes:
    """A quiet 220 Hz tone (a reference must not be digital silence)."""
    buf = io.BytesIO()
    sf.write(buf, 0.1 * np.sin(2 * np.pi * 220 * np.arange(int(seconds * sr)) / sr).astype(np.float32), sr, format=fmt)
    return buf.getvalue()


def jpeg_b64() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(buf, format="JPEG")
    return base64.b64encode(buf.getvalue()).decode()


def mp3_b64() -> str:
    """An ID3-less MP3: the first byte is a frame sync 0xFF, so the base64 starts with "//"."""
    return base64.b64encode(audio_bytes(0.5, fmt="MP3")).decode()


# ---------------------------------------------------------------------------------------------- base64 vs paths

def test_bare_base64_starting_with_a_slash_is_base64_not_a_path():
    jpeg, mp3 = jpeg_b64(), mp3_b64()
    assert jpeg.startswith("/9j/") and mp3.startswith("//")
    assert source_bytes(jpeg, "image", MediaPolicy()) == base64.b64decode(jpeg)
    assert load_image_input(jpeg, MediaPolicy(), None).pixel_values.shape[0] > 0
    wav, sr = load_audio(mp3, MediaPolicy())
    assert sr == 16000 and len(wav) > 0
    wav, sr = load_audio(mp3, MediaPolicy(), base64_only=True)
    assert sr == 16000 and len(wav) > 0
    wav, sr = decode_ref_audio(mp3, MediaPolicy())
    assert sr == 16000 and len(wav) > 0


def test_server_local_paths_stay_refused_without_an_allowed_folder():
    for ref in ("/etc/passwd", "file:///etc/passwd", "/etc/hostname"):
        with pytest.raises(MediaError, match="server-local paths are disabled"):
            source_bytes(ref, "image", MediaPolicy())
        with pytest.raises(APIError, match="server-local paths are disabled"):
            decode_ref_audio(ref, MediaPolicy())
    with pytest.raises(MediaError, match="base64"):  # input_audio.data is never read as a path
        load_audio("/etc/passwd", MediaPolicy(allowed_local_media_path=Path("/")),
                   base64_only=True)


def test_local_reads_are_byte_capped(tmp_path):
    (tmp_path / "big.wav").write_bytes(b"\0" * 1000)
    policy = MediaPolicy(allowed_local_media_path=tmp_path, limits=MediaLimits(max_video_bytes=100))
    with pytest.raises(MediaError, match="over the limit of 100 bytes"):
        read_local(str(tmp_path / "big.wav"), "audio", policy)


def test_local_reference_audio_gets_the_duration_check(tmp_path):
    (tmp_path / "long.flac").write_bytes(audio_bytes(61, 8000, "FLAC"))
    (tmp_path / "ok.wav").write_bytes(audio_bytes(1))
    with pytest.raises(APIError, match="at most 60 s") as err:
        decode_ref_audio(str(tmp_path / "long.flac"), MediaPolicy(allowed_local_media_path=tmp_path))
    assert err.value.param == "ref_audio" and err.value.status == 400
    wav, sr = decode_ref_audio(f"file://{tmp_path}/ok.wav", MediaPolicy(allowed_local_media_path=tmp_path))
    assert sr == 16000 and len(wav) == 16000


def test_chat_audio_length_is_checked_before_decoding():
    b64 = base64.b64encode(audio_bytes(30, 8000, "FLAC")).decode()
    with pytest.raises(AudioDecodeError, match="at most 20 s"):
        load_audio(b64, MediaPolicy(limits=MediaLimits(max_audio_seconds=20)))
    with pytest.raises(AudioDecodeError, match="at most 10 s"):
        load_audio(b64, MediaPolicy(), max_seconds=10)


# ---------------------------------------------------------------------------------------------- turn builder

class FakeTTS:
    model_type = "base"
    task_types = ("Base",)
    languages = ["Auto", "English"]

    def for_task(self, task_type):
        return self

    def validate(self, request):
        assert request.voice == "the-prompt"


class FakeRuntime:
    def __init__(self, tts=None):
        self.deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [
            {"stage_id": i, "model": m} for i, m in enumerate(["asr", "aura", "tts", "tts"])]})
        self.models = {TALKER: tts} if tts is not None else {}
        self.pipeline = types.SimpleNamespace(check=lambda turn: None)
        self.voice_prompt = None  # no reference audio is cloned here


def test_image_and_video_counts_are_refused_before_decoding():
    limits = Limits(max_images_per_request=2, max_videos_per_request=1)
    builder = TurnBuilder(FakeRuntime(), policy=MediaPolicy(limits=limits))
    for vision, match in (([("image", "@@not media@@")] * 3, "3 images; at most 2"),
                          ([("video", "@@not media@@")] * 2, "2 videos; at most 1")):
        with pytest.raises(PipelineRequestError, match=match):  # not the decoder's "invalid base64"
            asyncio.run(builder.build(TurnSpec(vision=vision, speak=False), "r"))
    spec = TurnSpec(vision=[("image", "@@not media@@")] * 2, speak=False,
                    vision_params=["messages[0].content[0].image_url", "messages[0].content[1].image_url"])
    with pytest.raises(PipelineRequestError, match="base64") as err:  # within the limits: decoded (and refused)
        asyncio.run(builder.build(spec, "r"))
    assert err.value.param == "messages[0].content[0].image_url"  # the part at fault, by its place in the request


def test_pixels_per_request_are_summed_after_resizing():
    jpeg = jpeg_b64()
    one = asyncio.run(TurnBuilder(FakeRuntime()).build(TurnSpec(vision=[("image", jpeg)], speak=False), "r"))
    pixels = one.vision[0].frames.shape[-2] * one.vision[0].frames.shape[-1]
    builder = TurnBuilder(FakeRuntime(), policy=MediaPolicy(limits=Limits(max_pixels_per_request=2 * pixels)))
    asyncio.run(builder.build(TurnSpec(vision=[("image", jpeg)] * 2, speak=False), "r"))  # at the limit: fine
    spec = TurnSpec(vision=[("image", jpeg)] * 3, speak=False, content_param="messages[0].content")
    with pytest.raises(LimitError, match=f"{3 * pixels} pixels after resizing; at most {2 * pixels}") as err:
        asyncio.run(builder.build(spec, "r"))
    assert err.value.param == "messages[0].content"


def test_registered_voice_deleted_while_media_decodes(monkeypatch):
    voices = VoiceLibrary()
    voices.add(RegisteredVoice(card=types.SimpleNamespace(name="Mine"), prompt="the-prompt"))
    runtime = FakeRuntime(FakeTTS())
    decoded = []

    def load_audio_then_delete(source, policy, *args):
        voices.remove("mine")  # a DELETE /v1/audio/voices/mine lands while the user's audio decodes
        decoded.append(source)
        return np.zeros(16000, np.float32), 16000

    monkeypatch.setattr(turn_builder, "load_audio", load_audio_then_delete)
    spec = TurnSpec(audio="audio", speak=True, voice="mine", info={"tts_max_new_tokens": 4})
    turn = asyncio.run(TurnBuilder(runtime, voices).build(spec, "r"))
    assert decoded == ["audio"] and voices.get("mine") is None
    assert turn.tts.voice == "the-prompt"  # the voice checked up front is the one used


def test_silent_reference_audio_is_refused():
    buf = io.BytesIO()
    sf.write(buf, np.zeros(16000, np.float32), 16000, format="WAV")
    with pytest.raises(APIError, match="reference audio is silent") as err:
        decode_ref_audio(base64.b64encode(buf.getvalue()).decode(), MediaPolicy())
    assert err.value.param == "ref_audio"
    assert load_audio(base64.b64encode(buf.getvalue()).decode(), MediaPolicy())[0].max() == 0  # speech to transcribe
