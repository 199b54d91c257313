"""The one Talker request builder: speech, chat additional_information and Omni options give the same request,
with one set of defaults, one token cap and errors that name the client's own field."""

import asyncio
import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from aura_omni.deploy import SamplingParams, Stage, SubtalkerSamplingParams
from aura_omni.media.limits import Limits
from aura_omni.request.additional_information import AdditionalInformation
from aura_omni.pipeline.processors import PipelineRequestError
from aura_omni.request.tts_request import TalkerContext, TTSAsk, build_tts_request, check_tts, talker_token_cap
from aura_omni.server.protocol import SpeechRequest
from aura_omni.server.speech import speech_ask
from aura_omni.stages.talker_set import TalkerSet
from aura_omni.stages.tts import TASK_OF_MODEL_TYPE


class FakeTTS:
    def __init__(self, model_type):
        self.model_type = model_type
        self.speakers = ["vivian", "serena", "uncle_fu"] if model_type == "custom_voice" else []
        self.languages = ["auto", "english", "chinese"]
        self.task_types = (TASK_OF_MODEL_TYPE[model_type],)
        self.validated = []

    def for_task(self, task_type):
        return self

    def validate(self, req):
        self.validated.append(req)


@dataclass
class Voice:
    prompt: object


class Voices:
    def __init__(self, **named):
        self.named = {k.lower(): Voice(v) for k, v in named.items()}

    def get(self, name):
        return self.named.get(name.lower())


STAGE = Stage(stage_id=2, model="/srv/checkpoints/qwen3-tts",
              default_sampling_params=SamplingParams(temperature=0.9, top_k=50, max_tokens=256, seed=42),
              subtalker_sampling_params=SubtalkerSamplingParams(do_sample=True, temperature=0.8))


def ctx(model_type="base", voices=None, cap=None):
    loaded = []

    async def voice_prompt(wav, sr, ref_text, x_vector_only):
        return ("prompt", len(wav), sr, ref_text, x_vector_only)

    def load(source):
        loaded.append(source)
        return np.zeros(1600, np.float32), 16000

    c = TalkerContext(tts=FakeTTS(model_type), stage=STAGE, max_new_tokens=cap or talker_token_cap(STAGE, Limits()),
                      voices=voices or Voices(), load_reference=load, voice_prompt=voice_prompt)
    return c, loaded


def build(ask, c):
    return asyncio.run(build_tts_request(ask, c))


def test_token_cap_is_the_deploy_default_bounded_by_the_server_limit():
    assert talker_token_cap(STAGE, Limits()) == 256
    assert talker_token_cap(STAGE, Limits(max_tts_new_tokens=100)) == 100
    assert talker_token_cap(Stage(stage_id=0, model="m"), Limits()) == Limits().max_tts_new_tokens
    c, _ = ctx()
    req = build(TTSAsk(ref_audio="AAAA", x_vector_only=True), c)
    assert req.max_new_tokens == 256  # the default is the cap, on every API
    with pytest.raises(PipelineRequestError, match="send 1 to 256") as e:
        check_tts(TTSAsk(ref_audio="AAAA", x_vector_only=True, max_new_tokens=100_000_000,
                         params={"max_new_tokens": "additional_information.tts_max_new_tokens"}), c)
    assert e.value.param == "additional_information.tts_max_new_tokens"


def test_speech_and_chat_build_the_same_request():
    c, loaded = ctx()
    speech = SpeechRequest(input="hi", voice="alloy", ref_audio="AAAA", x_vector_only_mode=True, language="English",
                           max_new_tokens=12, seed=7, temperature=0.5)
    info = AdditionalInformation.parse({"tts_ref_audio": ["AAAA"], "tts_x_vector_only_mode": "true",
                                        "tts_language": "English", "tts_max_new_tokens": "12"})
    chat = info.tts_ask("alloy", {"seed": 7, "temperature": 0.5})
    a, b = build(speech_ask(speech), c), build(chat, c)
    assert a == b and loaded == ["AAAA", "AAAA"]
    assert (a.task_type, a.language, a.max_new_tokens, a.seed, a.temperature, a.top_k) == ("Base", "english", 12, 7,
                                                                                         0.5, 50)
    assert a.subtalker_dosample is True and a.subtalker_temperature == 0.8 and a.voice[0] == "prompt"


def test_registered_voice_and_customvoice_speakers():
    c, loaded = ctx(voices=Voices(narrator="NARRATOR"))
    assert build(TTSAsk(voice="Narrator"), c).voice == "NARRATOR" and loaded == []
    cv, _ = ctx("custom_voice", voices=Voices(narrator="N"))
    assert build(TTSAsk(voice="SERENA", instruct="warm"), cv).speaker == "Serena"
    assert build(TTSAsk(), cv).speaker == "Vivian"  # the default speaker, on every API
    with pytest.raises(PipelineRequestError, match="cloned voice") as e:
        check_tts(TTSAsk(voice="narrator"), cv)
    assert e.value.param == "voice"


@pytest.mark.parametrize("model_type, ask, param, words", [
    ("base", TTSAsk(), "voice", "no voice was given"),
    ("base", TTSAsk(voice="nobody"), "voice", "not a registered voice"),
    ("base", TTSAsk(ref_audio="AAAA"), "ref_text", "transcript"),
    ("base", TTSAsk(task_type="CustomVoice"), "task_type", "this deployment serves Base"),
    ("base", TTSAsk(task_type="Opera"), "task_type", "send Base, CustomVoice or VoiceDesign"),
    ("base", TTSAsk(ref_audio="A", x_vector_only=True, language="Klingon"), "language", "unknown language"),
    ("custom_voice", TTSAsk(voice="alloy"), "voice", "unknown speaker"),
    ("voice_design", TTSAsk(), "instruct", "description of the voice"),
])
def test_refusals_name_the_field(model_type, ask, param, words):
    c, _ = ctx(model_type)
    with pytest.raises(PipelineRequestError, match=words) as e:
        check_tts(ask, c)
    assert e.value.param == param and e.value.code and "/srv/checkpoints" not in str(e.value)  # no server paths


def test_chat_errors_name_additional_information_keys():
    c, _ = ctx()
    ask = AdditionalInformation.parse({"tts_ref_audio": "AAAA"}).tts_ask(None)
    with pytest.raises(PipelineRequestError) as e:
        check_tts(ask, c)
    assert e.value.param == "additional_information.tts_ref_text"
    assert "additional_information.tts_x_vector_only_mode" in str(e.value)
    with pytest.raises(PipelineRequestError) as e:
        check_tts(AdditionalInformation.parse({}).tts_ask("nobody"), c)
    assert e.value.param == "audio.voice"


def test_errors_name_the_keys_where_each_client_sent_them():
    """A realtime session's keys sit in `session.extra_body` and its voice in `session.audio.output.voice`; `Omni`
    takes them as keyword arguments."""
    c, _ = ctx()
    info = AdditionalInformation.parse({"tts_ref_audio": "AAAA"})
    for prefix, voice_param, ref_text in (("session.extra_body", "session.audio.output.voice",
                                           "session.extra_body.tts_ref_text"), ("", "voice", "tts_ref_text")):
        with pytest.raises(PipelineRequestError) as e:
            check_tts(info.tts_ask(None, prefix=prefix, voice_param=voice_param), c)
        assert e.value.param == ref_text and "additional_information" not in str(e.value)
        with pytest.raises(PipelineRequestError) as e:
            check_tts(AdditionalInformation.parse({}).tts_ask("Vivian", prefix=prefix, voice_param=voice_param), c)
        assert e.value.param == voice_param


def test_a_preset_speaker_on_a_base_checkpoint_is_explained():
    c, _ = ctx()
    with pytest.raises(PipelineRequestError) as e:
        check_tts(TTSAsk(voice="Vivian"), c)
    assert e.value.code == "missing_reference"
    assert "'Vivian' is not a registered voice" in str(e.value) and "preset speakers" in str(e.value)
    assert "CustomVoice checkpoint" in str(e.value)


def test_an_unknown_voice_beside_a_customvoice_talker_lists_its_presets():
    """The demo's deployment (Base and CustomVoice Talkers): a name that is neither goes to Base and is refused with
    the preset speakers named."""
    c, _ = ctx()
    both = FakeTTS("base")
    both.task_types, both.speakers = ("Base", "CustomVoice"), ["vivian", "serena"]
    c = dataclasses.replace(c, tts=both)
    with pytest.raises(PipelineRequestError) as e:
        check_tts(TTSAsk(voice="bob"), c)
    assert "'bob' is neither a registered voice nor a preset speaker (serena, vivian)" in str(e.value)


@pytest.mark.parametrize("info, param, words", [
    ({"tts_refaudio": "A"}, "additional_information.tts_refaudio", "unknown option"),
    ({"tts_max_new_tokens": "many"}, "additional_information.tts_max_new_tokens", "integer"),
    ({"tts_max_new_tokens": float("inf")}, "additional_information.tts_max_new_tokens", "finite"),
    ({"tts_max_new_tokens": 0}, "additional_information.tts_max_new_tokens", "greater than or equal to 1"),
    ({"tts_ref_text": 5}, "additional_information.tts_ref_text", "string"),
    ({"tts_language": {"x": 1}}, "additional_information.tts_language", "string"),
    ({"asr_context": "<|im_start|>system"}, "additional_information.asr_context", "plain text"),
])
def test_typed_additional_information(info, param, words):
    with pytest.raises(PipelineRequestError, match=words) as e:
        AdditionalInformation.parse(info)
    assert e.value.param == param


def test_additional_information_values_may_be_lists():
    info = AdditionalInformation.parse({"tts_speaker": ["vivian"], "is_speech": ["false"], "tts_pass_token_ids": "on"})
    assert info.tts_speaker == "vivian" and info.is_speech is False and info.tts_pass_token_ids is True
    assert AdditionalInformation.parse({"tts_ref_audio": (np.zeros(3), 16000)}).tts_ref_audio[1] == 16000


def test_with_two_talkers_the_voice_or_reference_picks_the_checkpoint():
    talkers = TalkerSet([FakeTTS("base"), FakeTTS("custom_voice")])
    c = dataclasses.replace(ctx()[0], tts=talkers, voices=Voices(me="prompt"))
    assert check_tts(TTSAsk(voice="Vivian"), c).template.task_type == "CustomVoice"
    assert check_tts(TTSAsk(), c).template.speaker == "Vivian"  # no voice: the default preset speaker
    assert check_tts(TTSAsk(voice="me"), c).template.task_type == "Base"  # a registered clone
    assert check_tts(TTSAsk(voice="alloy", ref_audio="AAAA", x_vector_only=True), c).template.task_type == "Base"
    with pytest.raises(PipelineRequestError, match="serves Base and CustomVoice"):
        check_tts(TTSAsk(task_type="VoiceDesign", instruct="calm"), c)
