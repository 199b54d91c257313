"""Qwen3-ASR output parsing, language names, joining pieces, and long-audio splitting."""

import numpy as np
import pytest

from aura_omni.stages.asr.split import split_long_audio
from aura_omni.stages.asr.transcript import (Transcript, UnsupportedLanguageError, join_texts, merge_languages,
                                      normalize_language, parse_asr_output)


@pytest.mark.parametrize("raw, expected", [
    ("language English<asr_text>Hello world.", Transcript("English", "Hello world.")),
    ("language Chinese<asr_text>你好", Transcript("Chinese", "你好")),
    ("language None<asr_text>", Transcript("", "")),
    ("language None<asr_text>noise words", Transcript("", "")),
    ("\nlanguage German\n<asr_text> Guten Tag ", Transcript("German", "Guten Tag")),
    ("plain text without a tag", Transcript("", "plain text without a tag")),
    ("", Transcript("", "")),
    ("language English<asr_text>a<asr_text>b", Transcript("English", "a<asr_text>b")),
])
def test_parse_asr_output(raw, expected):
    assert parse_asr_output(raw) == expected


def test_forced_language_output_is_the_transcript():
    assert parse_asr_output(" just text ", "French") == Transcript("French", "just text")


@pytest.mark.parametrize("value, name", [("en", "English"), ("EN", "English"), ("english", "English"),
                                         ("Chinese", "Chinese"), ("yue", "Cantonese"), (None, None), ("", None)])
def test_normalize_language(value, name):
    assert normalize_language(value) == name


def test_unknown_language_is_a_value_error():
    with pytest.raises(UnsupportedLanguageError, match="not supported"):
        normalize_language("Klingon")
    assert issubclass(UnsupportedLanguageError, ValueError)


def test_merge_languages_drops_repeats_and_blanks():
    assert merge_languages(["Chinese", "Chinese", "", "English", "Chinese"]) == "Chinese,English,Chinese"
    assert merge_languages(["", ""]) == ""


def test_join_texts_spaces_latin_not_cjk():
    assert join_texts(["Hello there.", "", " General Kenobi."]) == "Hello there. General Kenobi."
    assert join_texts(["你好", "世界"]) == "你好世界"


def test_split_cuts_at_the_quiet_point_within_the_limit():
    sr = 1000
    rng = np.random.default_rng(0)
    wav = rng.uniform(-1, 1, 25 * sr).astype(np.float32)
    wav[8200:8400] = 0  # a pause 1.8 s before the 10 s limit
    wav[17000:17300] = 0
    pieces = split_long_audio(wav, sr, max_seconds=10, search_seconds=4)
    assert all(len(p) <= 10 * sr for p in pieces)
    assert np.array_equal(np.concatenate(pieces), wav)
    assert 8200 <= len(pieces[0]) <= 8400
    assert 17000 <= len(pieces[0]) + len(pieces[1]) <= 17300


def test_split_leaves_short_audio_whole():
    wav = np.ones(100, dtype=np.float32)
    assert split_long_audio(wav, 16000, max_seconds=1)[0] is wav
