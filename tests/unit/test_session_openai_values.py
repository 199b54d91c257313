"""OpenAI's defaults and values in OpenAI realtime sessions: server VAD by default, semantic_vad served by the Silero
VAD with an eagerness-set silence wait, OpenAI voice names as aliases of Talker voices; what is truly invalid is
still refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
from openai.types.realtime.realtime_audio_input_turn_detection import SemanticVad, ServerVad as OpenAIServerVad

from aura_omni.bench.inputs import RECORDED_SPEECH
from aura_omni.deploy import DeployConfigError, parse_deploy_config
from aura_omni.session.session_config import (EAGERNESS_SILENCE_MS, OPENAI_VOICE_ALIASES, SessionConfig, SessionConfigError,
                                      TurnDetection, session_voice_aliases)
from aura_omni.session.vad import VAD_SAMPLE_RATE, WINDOW, ServerVad
from aura_omni.testing.tiny_tts import SPEAKER_IDS

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar")


def test_openai_sessions_start_with_server_vad_and_duplex_with_push_to_talk():
    for duplex in (False, True):
        config = SessionConfig.for_session(duplex=duplex)
        if duplex:
            assert config.turn_detection is None
            assert (config.input_sample_rate, config.playback_commit_policy) == (16000, "ack_only")
        else:
            assert config.turn_detection == TurnDetection()
            assert (config.input_sample_rate, config.playback_commit_policy) == (24000, "commit_all_on_done")
            echoed = config.to_json("s", "m")["audio"]["input"]["turn_detection"]
            assert echoed == {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                              "silence_duration_ms": 500, "create_response": True, "interrupt_response": True}
            OpenAIServerVad.model_validate(echoed)


def test_turn_detection_null_turns_the_default_server_vad_off():
    config = SessionConfig.for_session(duplex=False)
    assert config.with_update({"audio": {"input": {"turn_detection": None}}}).turn_detection is None
    assert config.with_update({"turn_detection": None}).turn_detection is None
    assert config.with_update({"instructions": "Be brief."}).turn_detection == TurnDetection()  # untouched


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto", None])
def test_semantic_vad_eagerness_sets_the_end_of_turn_silence(eagerness):
    sent = {"type": "semantic_vad", "create_response": True, "interrupt_response": False}
    if eagerness is not None:
        sent["eagerness"] = eagerness
    config = SessionConfig.for_session(duplex=False).with_update({"audio": {"input": {"turn_detection": sent}}})
    td = config.turn_detection
    assert td.type == "semantic_vad" and td.eagerness == (eagerness or "auto")
    assert td.silence_duration_ms == EAGERNESS_SILENCE_MS[eagerness or "auto"]
    assert (td.create_response, td.interrupt_response, td.threshold) == (True, False, 0.5)
    echoed = config.to_json("s", "m")["audio"]["input"]["turn_detection"]
    assert echoed == {"type": "semantic_vad", "eagerness": eagerness or "auto", "create_response": True,
                      "interrupt_response": False}
    SemanticVad.model_validate(echoed)


def test_semantic_vad_waits_longer_the_less_eager():
    assert (EAGERNESS_SILENCE_MS["high"] < EAGERNESS_SILENCE_MS["medium"] == EAGERNESS_SILENCE_MS["auto"]
            < EAGERNESS_SILENCE_MS["low"])
    assert EAGERNESS_SILENCE_MS["high"] == TurnDetection().silence_duration_ms  # as quick as server_vad's default


def _stop_after_speech_ms(silence_ms: int) -> float:
    """Recorded speech then silence through the Silero VAD: ms of silence fed when the turn ended."""
    wav, sr = sf.read(RECORDED_SPEECH, dtype="float32")
    assert sr == VAD_SAMPLE_RATE
    audio = np.concatenate([wav, np.zeros(3 * VAD_SAMPLE_RATE, np.float32)])
    vad = ServerVad(0.5, silence_ms)
    for start in range(0, len(audio), WINDOW):
        for ev in vad.feed(audio[start:start + WINDOW]):
            if ev.kind == "stop":
                return (start + WINDOW - ev.sample) * 1000 / VAD_SAMPLE_RATE
    raise AssertionError("the VAD never ended the turn")


def test_semantic_vad_eagerness_decides_when_silero_ends_the_turn():
    waits = {}
    for eagerness in ("high", "low"):
        td = SessionConfig().with_update({"turn_detection": {"type": "semantic_vad", "eagerness": eagerness}})
        waits[eagerness] = _stop_after_speech_ms(td.turn_detection.silence_duration_ms)
        assert abs(waits[eagerness] - EAGERNESS_SILENCE_MS[eagerness]) <= 2 * WINDOW * 1000 / VAD_SAMPLE_RATE
    assert waits["low"] - waits["high"] >= 900


def test_truly_invalid_turn_detection_is_refused_by_field():
    config = SessionConfig.for_session(duplex=False)
    for session, param, code in (
            ({"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "fast"}}}},
             "session.audio.input.turn_detection.eagerness", "invalid_value"),
            ({"turn_detection": {"type": "semantic_vad", "eagerness": "fast"}}, "session.turn_detection.eagerness",
             "invalid_value"),
            ({"audio": {"input": {"turn_detection": {"type": "push_to_talk"}}}},
             "session.audio.input.turn_detection.type", "unsupported_turn_detection"),
            ({"turn_detection": {"type": "server_vad", "threshold": 3}}, "session.turn_detection.threshold",
             "invalid_value"),
            ({"turn_detection": {"type": "semantic_vad", "create_response": "yes"}},
             "session.turn_detection.create_response", "invalid_value"),
            ({"turn_detection": "server_vad"}, "session.turn_detection", "invalid_value")):
        with pytest.raises(SessionConfigError) as e:
            config.with_update(session)
        assert (e.value.param, e.value.code) == (param, code)


def test_every_openai_voice_is_an_alias_of_a_customvoice_preset():
    assert set(OPENAI_VOICE_ALIASES) == set(OPENAI_VOICES)
    aliases = session_voice_aliases(None, [s.title() for s in SPEAKER_IDS])  # the Talker's presets, any case
    assert set(aliases) == set(OPENAI_VOICES)
    assert all(preset in SPEAKER_IDS for preset in aliases.values())
    assert not {"dylan", "eric"} & set(aliases.values())  # dialect speakers would turn Chinese text into a dialect


@pytest.mark.parametrize("shape", ["ga", "beta"])
def test_an_openai_voice_name_speaks_with_its_preset_and_is_echoed_as_sent(shape):
    config = SessionConfig.for_session(duplex=False, speakers=list(SPEAKER_IDS))
    session = {"audio": {"output": {"voice": "Marin"}}} if shape == "ga" else {"voice": "Marin"}
    updated = config.with_update(session)
    assert (updated.voice, updated.voice_name) == (OPENAI_VOICE_ALIASES["marin"], "Marin")
    echoed = updated.to_json("s", "m")
    assert echoed["voice"] == echoed["audio"]["output"]["voice"] == "Marin"
    assert updated.with_update({"voice": "ryan"}).voice == "ryan"  # a preset's own name is not an alias


def test_on_a_voice_clone_talker_an_openai_voice_means_the_session_default():
    config = SessionConfig.for_session(duplex=False, speakers=[])  # a Base Talker has no presets
    updated = config.with_update({"audio": {"output": {"voice": "ash"}}})
    assert updated.voice is None and updated.voice_name == "ash"
    assert updated.with_update({"voice": "my_cloned_voice"}).voice == "my_cloned_voice"  # registered voices pass


def test_deploy_voice_aliases_replace_the_default_table():
    config = SessionConfig.for_session(duplex=False, voice_aliases={"Alloy": "sohee", "narrator": "my_clone"},
                                       speakers=list(SPEAKER_IDS))
    assert config.with_update({"voice": "alloy"}).voice == "sohee"
    assert config.with_update({"voice": "narrator"}).voice == "my_clone"
    assert config.with_update({"voice": "marin"}).voice == "marin"  # not in the deploy's table: as named
    assert session_voice_aliases({}, list(SPEAKER_IDS)) == {}  # `voice_aliases: {}` turns aliasing off


def test_deploy_file_voice_aliases_key():
    stages = [{"stage_id": 0, "model": "./asr"}, {"stage_id": 1, "model": "./aura"}]
    assert parse_deploy_config({"stages": stages}).voice_aliases is None
    assert parse_deploy_config({"stages": stages, "voice_aliases": {"alloy": "ryan"}}).voice_aliases == {
        "alloy": "ryan"}
    with pytest.raises(DeployConfigError, match="voice_aliases"):
        parse_deploy_config({"stages": stages, "voice_aliases": ["alloy"]})


def test_a_voice_that_is_not_text_is_refused_by_field():
    with pytest.raises(SessionConfigError) as e:
        SessionConfig.for_session(duplex=False).with_update({"audio": {"output": {"voice": 5}}})
    assert e.value.param == "session.audio.output.voice"
