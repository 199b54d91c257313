"""The chat audio transcripts kept for `assistant.audio.id` references: bounded by count and by age."""

from aura_omni.server import chat
from aura_omni.server.chat import AudioTranscripts


def test_transcripts_expire_and_are_dropped_not_only_past_the_count(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(chat.time, "time", lambda: now[0])
    store = AudioTranscripts()
    store.add("audio_a", "first")
    store.add("audio_b", "second")
    assert store.get("audio_a") == "first" and len(store) == 2
    now[0] += chat.AUDIO_TTL_S + 1
    assert store.get("audio_a") is None  # expired
    store.add("audio_c", "third")  # an add drops what expired
    assert len(store) == 1 and store.get("audio_c") == "third"


def test_transcripts_are_bounded_by_count(monkeypatch):
    monkeypatch.setattr(chat, "MAX_REMEMBERED_AUDIO", 3)
    store = AudioTranscripts()
    for i in range(5):
        store.add(f"audio_{i}", str(i))
    assert len(store) == 3 and store.get("audio_0") is None and store.get("audio_4") == "4"
