"""TurnTimeline: a turn's phases, each from the end of the one before, only the phases it went through, and a moment
marked again (every AURA token, every audio chunk) keeps its first time."""

import itertools

from aura_omni.pipeline import turn as turn_module
from aura_omni.pipeline.turn import TurnTimeline


def test_phases_are_consecutive_and_first_marks_win(monkeypatch):
    clock = iter([10.0, 10.2, 10.25, 10.4, 10.9, 11.0, 11.1])
    monkeypatch.setattr(turn_module.time, "perf_counter", lambda: next(clock))
    t = TurnTimeline()  # 10.0
    t.mark("asr")  # 10.2
    t.mark("aura_first_token")  # 10.25
    t.mark("aura_first_token")  # a later token: kept out (not even timed)
    t.mark("speech_start")  # 10.4
    t.mark("first_audio")  # 10.9
    t.mark("first_audio")
    got = t.phases()
    assert list(got) == ["asr", "aura_first_token", "speech_start", "first_audio"]
    assert [round(v, 6) for v in got.values()] == [0.2, 0.05, 0.15, 0.5]


def test_a_silent_text_turn_has_only_its_first_token(monkeypatch):
    clock = itertools.count(0.0, 0.1)
    monkeypatch.setattr(turn_module.time, "perf_counter", lambda: next(clock))
    t = TurnTimeline()
    t.mark("aura_first_token")
    assert {k: round(v, 6) for k, v in t.phases().items()} == {"aura_first_token": 0.1}
