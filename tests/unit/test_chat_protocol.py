"""Chat completions without models: request validation, messages -> turn, stage sampling entries, error
mapping, media sources, audio-id transcripts. (tests/e2e/test_chat_completions.py runs the real stages.)"""

import base64
import io

import numpy as np
import pytest
import soundfile as sf
from pydantic import ValidationError

from aura_omni.deploy import parse_deploy_config
from aura_omni.media.audio import AudioDecodeError
from aura_omni.media.limits import LimitError, MediaError
from aura_omni.media.request_media import MediaPolicy, load_audio, source_bytes
from aura_omni.pipeline.orchestrator import TurnTimeout
from aura_omni.pipeline.processors import PipelineRequestError
from aura_omni.request.turn_builder import TurnBuilder
from aura_omni.server import chat
from aura_omni.server.chat import AudioTranscripts, client_errors, turn_spec
from aura_omni.server.chat_protocol import ChatCompletionRequest
from aura_omni.server.errors import APIError


def request(messages, **fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": messages, **fields})


def user(*parts):
    return {"role": "user", "content": list(parts)}


def wav_b64(seconds=0.1, sr=16000) -> str:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(int(seconds * sr), np.float32), sr, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


# ---------------------------------------------------------------------------------------------- request body

@pytest.mark.parametrize("fields", [
    {"n": 2}, {"tools": [{"type": "function"}]}, {"tools": [{"type": "web_search"}]},
    {"response_format": {"type": "xml"}}, {"tool_choice": "sometimes"},
    {"modalities": ["audio"]}, {"temperature": 3}, {"sampling_params_list": [{"temprature": 1}]},
    {"unknown_extension": True}, {"logprobs": True},
])
def test_unsupported_or_misspelt_fields_are_refused(fields):
    with pytest.raises(ValidationError):
        request([user({"type": "text", "text": "hi"})], **fields)


def test_refuses_unknown_roles_and_part_types_but_accepts_new_subfields():
    with pytest.raises(ValidationError):
        request([{"role": "function", "content": "x"}])
    with pytest.raises(ValidationError):
        request([user({"type": "file", "file": {}})])
    body = request([user({"type": "image_url", "image_url": {"url": "data:,", "detail": "high", "new": 1}})])
    assert body.messages[0].content[0].image_url.url == "data:,"


def test_top_level_sampling_applies_to_aura_with_openai_precedence():
    body = request([user({"type": "text", "text": "hi"})], max_tokens=9, max_completion_tokens=5, stop="END",
                   temperature=0.2, logit_bias={"151669": 100}, top_k=4)
    assert body.aura_sampling() == {"temperature": 0.2, "logit_bias": {"151669": 100.0}, "top_k": 4,
                                    "max_tokens": 5, "stop": ["END"]}
    assert request([user({"type": "text", "text": "hi"})]).aura_sampling() == {}


# ---------------------------------------------------------------------------------------------- messages -> turn

def test_last_user_message_becomes_the_turn_and_earlier_text_the_history():
    transcripts = AudioTranscripts()
    transcripts.add("audio_1", "spoken before")
    body = request([
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "No emojis."}]},
        {"role": "user", "content": "first"},
        {"role": "assistant", "audio": {"id": "audio_1"}},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]},
        user({"type": "video_url", "video_url": {"url": "V"}}, {"type": "text", "text": "look"},
             {"type": "input_audio", "input_audio": {"data": "QQ==", "format": "wav"}},
             {"type": "image_url", "image_url": {"url": "I"}}),
    ], audio={"voice": "serena", "format": "wav"}, sampling_params_list=[None, {"temperature": 0.1}],
        additional_information={"tts_speaker": "vivian"})
    spec = turn_spec(body, transcripts, speak=True)
    assert spec.system_prompt == "Be brief.\nNo emojis."
    assert spec.history == [("user", "first"), ("assistant", "spoken before")]  # media-only turns add no text
    assert spec.audio == "QQ==" and spec.vision == [("video", "V"), ("image", "I")] and spec.text_parts == ["look"]
    assert spec.voice == "serena" and spec.info == {"tts_speaker": "vivian"} and spec.speak is True
    assert spec.stage_sampling == [None, {"temperature": 0.1}]


@pytest.mark.parametrize("messages,match", [
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "last message"),
    ([user({"type": "text", "text": "  "})], "empty"),
    ([user({"type": "input_audio", "input_audio": {"data": "QQ=="}},
           {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,QQ=="}})], "one audio part"),
    ([{"role": "assistant", "audio": {"id": "audio_gone"}}, {"role": "user", "content": "hi"}], "unknown or expired"),
])
def test_malformed_turns_are_400(messages, match):
    with pytest.raises(APIError, match=match) as err:
        turn_spec(request(messages), AudioTranscripts(), speak=False)
    assert err.value.status == 400


def test_audio_transcripts_expire_and_are_bounded(monkeypatch):
    store = AudioTranscripts()
    monkeypatch.setattr(chat, "MAX_REMEMBERED_AUDIO", 2)
    for i in range(3):
        store.add(f"a{i}", f"t{i}")
    assert store.get("a0") is None and store.get("a2") == "t2"
    monkeypatch.setattr(chat, "AUDIO_TTL_S", -1)
    store.add("old", "x")
    assert store.get("old") is None


# ---------------------------------------------------------------------------------------------- stages, errors

class FakeRuntime:
    def __init__(self):
        self.deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [
            {"stage_id": i, "model": m} for i, m in enumerate(["asr", "aura", "tts", "tts"])]})
        self.models = {}


def test_sampling_params_list_maps_to_stage_roles_and_rejects_extra_entries():
    builder = TurnBuilder(FakeRuntime())
    assert builder.stage_entries([{"max_tokens": 8}, {"seed": 1}, None]) == {"asr": (0, {"max_tokens": 8}),
                                                                             "aura": (1, {"seed": 1})}
    assert builder.stage_entries(None) == {}
    with pytest.raises(PipelineRequestError, match="5 entries"):
        builder.stage_entries([{}] * 5)


@pytest.mark.parametrize("error,status", [
    (PipelineRequestError("Base TTS requires a reference voice"), 400), (MediaError("cannot decode image"), 400),
    (AudioDecodeError("audio is empty"), 400), (LimitError("max_tokens: at most 8", param="max_tokens"), 400),
    (TurnTimeout("turn r exceeded its 1 s timeout"), 504), (APIError("nope", 404), 404),
])
def test_client_errors_become_openai_errors(error, status):
    with pytest.raises(APIError) as err:
        with client_errors():
            raise error
    assert err.value.status == status and str(error) in err.value.message


@pytest.mark.parametrize("error", [RuntimeError("engine step failed"), ValueError("a bug in our own code"),
                                   KeyError("x")])
def test_internal_errors_are_not_disguised_as_client_errors(error):
    with pytest.raises(type(error)):  # propagates: the app answers 500 server_error (test_app_errors)
        with client_errors():
            raise error


# ---------------------------------------------------------------------------------------------- media sources

def test_local_media_only_below_the_allowed_folder(tmp_path):
    (tmp_path / "a.wav").write_bytes(base64.b64decode(wav_b64()))
    with pytest.raises(MediaError, match="disabled"):
        source_bytes(str(tmp_path / "a.wav"), "audio", MediaPolicy())
    policy = MediaPolicy(allowed_local_media_path=tmp_path / "sub")
    with pytest.raises(MediaError, match="outside"):
        source_bytes(f"file://{tmp_path}/sub/../a.wav", "audio", policy)
    wav, sr = load_audio(str(tmp_path / "a.wav"), MediaPolicy(allowed_local_media_path=tmp_path))
    assert sr == 16000 and wav.shape == (1600,)


def test_remote_media_needs_an_allowed_domain():
    with pytest.raises(MediaError, match="not allowed"):
        source_bytes("https://example.com/a.png", "image", MediaPolicy())
    with pytest.raises(MediaError, match="not allowed"):
        source_bytes("https://evil-example.com/a.png", "image", MediaPolicy(allowed_media_domains=("example.com",)))


def test_audio_input_forms():
    wav, sr = load_audio("data:audio/wav;base64," + wav_b64(), MediaPolicy())
    assert sr == 16000 and wav.dtype == np.float32
    stereo, sr = load_audio((np.ones((10, 2)), 8000), MediaPolicy())
    assert stereo.shape == (10,) and sr == 8000
    with pytest.raises(AudioDecodeError, match="NaN"):
        load_audio((np.array([0.0, np.nan]), 16000), MediaPolicy())
    with pytest.raises(AudioDecodeError, match="at most"):
        load_audio((np.zeros(1300 * 8), 8), MediaPolicy())  # 1300 s at 8 Hz: over the 20 min turn limit
