"""The voice library on disk: written whole, read back by a fresh library (a restart or another process), shared,
deleted with its files, and robust to damaged files."""

import json
import os

import pytest
import torch

from aura_omni.server.protocol import VoiceCard
from aura_omni.server.voice_library import RegisteredVoice, VoiceExists, VoiceLibrary
from aura_omni.stages.tts import VoiceClonePrompt


def _voice(name: str, icl: bool = True, seed: int = 0) -> RegisteredVoice:
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 2048, (7, 16), generator=g) if icl else None
    prompt = VoiceClonePrompt(ref_codes=codes, x_vector=torch.randn(32, generator=g),
                              ref_text="A reference line." if icl else None, x_vector_only=not icl)
    card = VoiceCard(id=name, name=name, type="audio_sample", ref_text=prompt.ref_text, x_vector_only_mode=not icl,
                     speaker_description="calm" if icl else None)
    return RegisteredVoice(card=card, prompt=prompt)


def _same(a: RegisteredVoice, b: RegisteredVoice) -> bool:
    codes_equal = (a.prompt.ref_codes is None and b.prompt.ref_codes is None) or torch.equal(a.prompt.ref_codes,
                                                                                             b.prompt.ref_codes)
    return (a.card == b.card and codes_equal and torch.equal(a.prompt.x_vector, b.prompt.x_vector)
            and (a.prompt.ref_text, a.prompt.x_vector_only) == (b.prompt.ref_text, b.prompt.x_vector_only))


def test_a_fresh_library_on_the_directory_has_every_voice(tmp_path):
    lib = VoiceLibrary(tmp_path)
    narrator, plain = _voice("Narrator"), _voice("plain", icl=False, seed=1)
    lib.add(narrator)
    lib.add(plain)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["narrator.json", "plain.json"]
    assert len(list(tmp_path.glob("*.safetensors"))) == 2 and len(list(tmp_path.iterdir())) == 4
    restarted = VoiceLibrary(tmp_path)
    assert _same(restarted.get("NARRATOR"), narrator) and _same(restarted.get("plain"), plain)
    assert restarted.get("narrator").prompt.ref_codes.dtype == torch.int64
    assert {c.name for c in restarted.cards()} == {"Narrator", "plain"}


def test_two_libraries_on_one_directory_see_each_others_changes(tmp_path):
    a, b = VoiceLibrary(tmp_path), VoiceLibrary(tmp_path)
    a.add(_voice("shared"))
    assert b.get("shared") is not None  # a miss re-reads the directory
    assert [c.name for c in b.cards()] == ["shared"]
    assert b.remove("shared")
    assert a.get("shared") is None and a.cards() == []  # a hit re-reads it once the directory changed
    assert not a.remove("shared")


def test_delete_removes_the_files(tmp_path):
    lib = VoiceLibrary(tmp_path)
    lib.add(_voice("gone"))
    lib.add(_voice("kept", seed=2))
    assert lib.remove("GONE") and lib.get("gone") is None
    assert sorted(p.name.split(".")[0] for p in tmp_path.iterdir()) == ["kept", "kept"]


def test_memory_only_library_writes_nothing(tmp_path):
    lib = VoiceLibrary()
    lib.add(_voice("mine"))
    assert lib.get("MINE") is not None and lib.remove("mine") and not lib.remove("mine")


def test_damaged_and_temporary_files_are_skipped(tmp_path, caplog):
    lib = VoiceLibrary(tmp_path)
    lib.add(_voice("good"))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "stale.json").write_text(json.dumps({"format": 99, "tensors": "x", "card": {}}))
    (tmp_path / "lost.json").write_text(json.dumps({"format": 1, "tensors": "lost.0.safetensors",
                                                    "card": _voice("lost").card.model_dump()}))
    (tmp_path / ".good.json.1.ab.tmp").write_text("half")  # a writer's temporary file
    fresh = VoiceLibrary(tmp_path)
    assert [c.name for c in fresh.cards()] == ["good"] and fresh.get("broken") is None
    assert "skipping broken.json" in caplog.text and "skipping stale.json" in caplog.text


def test_orphaned_tensors_are_cleaned_at_start(tmp_path):
    VoiceLibrary(tmp_path).add(_voice("v"))
    orphan = tmp_path / "v.deadbeef.safetensors"
    orphan.write_bytes(b"x")
    os.utime(orphan, (0, 0))
    VoiceLibrary(tmp_path)
    assert not orphan.exists() and len(list(tmp_path.glob("*.safetensors"))) == 1


def test_unwritable_directory_fails_at_start(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        VoiceLibrary(tmp_path / "file" / "voices")


def test_of_two_processes_registering_one_name_only_the_first_wins(tmp_path):
    a, b = VoiceLibrary(tmp_path), VoiceLibrary(tmp_path)
    first = _voice("same", seed=1)
    a.add(first)
    with pytest.raises(VoiceExists):
        b.add(_voice("Same", seed=2))  # b had not looked: the card's exclusive creation refuses it
    assert _same(b.get("same"), first)  # the card itself (made once: its created_at is the clock's second)
    assert len(list(tmp_path.glob("*.safetensors"))) == 1  # the loser's tensors are gone


def test_voice_files_with_bad_tensors_are_skipped(tmp_path, caplog):
    from safetensors.torch import save_file

    lib = VoiceLibrary(tmp_path)
    for name, tensors in {"outside": {"x_vector": torch.zeros(4), "ref_codes": torch.full((3, 16), 5000)},
                          "nan": {"x_vector": torch.full((4,), float("nan"))},
                          "flat": {"x_vector": torch.zeros(4), "ref_codes": torch.zeros(48, dtype=torch.long)}}.items():
        lib.add(_voice(name, icl=True))
        save_file(tensors, str(tmp_path / json.loads((tmp_path / f"{name}.json").read_text())["tensors"]))
    assert VoiceLibrary(tmp_path).cards() == []
    assert "ref_codes must be integer codes" in caplog.text and "x_vector must be finite" in caplog.text


def test_a_library_does_not_read_back_its_own_voices(tmp_path, monkeypatch):
    lib = VoiceLibrary(tmp_path)
    voice = _voice("own")
    lib.add(voice)
    monkeypatch.setattr(lib, "_read", lambda path: pytest.fail(f"read back {path.name}"))
    assert lib.get("own") is voice and [c.name for c in lib.cards()] == ["own"]
