"""The three wire dialects' encoders alone: one session event in, that dialect's wire events out."""

from __future__ import annotations

import pytest

from aura_omni.session.session_config import SessionConfig
from aura_omni.session.dialects import ResponseView, SessionView, dialect, is_beta_shape
from aura_omni.session.history import Item


def wire(name: str, event: str, **data) -> list[tuple[str, dict]]:
    return [(e.type, e.to_json()) for e in dialect(name).render(event, data)]


def test_a_delta_goes_out_under_one_name_in_openai_dialects_and_both_in_duplex():
    delta = {"response_id": "r", "item_id": "i", "output_index": 0, "content_index": 0, "delta": "QUJD"}
    assert [t for t, _ in wire("ga", "response.output_audio.delta", **delta)] == ["response.output_audio.delta"]
    assert [t for t, _ in wire("beta", "response.output_audio.delta", **delta)] == ["response.audio.delta"]
    assert [t for t, _ in wire("duplex", "response.output_audio.delta", **delta)] == [
        "response.output_audio.delta", "response.audio.delta"]


def test_item_events_by_dialect():
    item = Item("u1", "user", "hi", modality="audio")
    assert [t for t, _ in wire("ga", "conversation.item.added", item=item)] == ["conversation.item.added"]
    assert [t for t, _ in wire("beta", "conversation.item.added", item=item)] == ["conversation.item.created"]
    assert wire("beta", "conversation.item.done", item=item) == []  # beta has no .done
    assert [t for t, _ in wire("duplex", "conversation.item.added", item=item)] == [
        "conversation.item.added", "conversation.item.created"]
    assert wire("ga", "response.listen", response_id="r") == [] and wire("duplex", "response.listen", response_id="r")


@pytest.mark.parametrize("name, spoken, typed, reply, cancelled", [
    ("ga", "input_audio", "input_text", "output_audio", "incomplete"),
    ("beta", "input_audio", "input_text", "audio", "incomplete"),
    ("duplex", "input_text", "input_text", "audio", "completed"),  # vLLM-Omni's shapes, unchanged
])
def test_item_shapes(name, spoken, typed, reply, cancelled):
    d = dialect(name)
    assert d.item(Item("u", "user", "hi", modality="audio"))["content"] == [
        {"type": spoken, "transcript": "hi"} if spoken == "input_audio" else {"type": spoken, "text": "hi"}]
    assert d.item(Item("t", "user", "hi"))["content"][0]["type"] == typed
    answer = Item("a", "assistant", "hello", modality="audio", incomplete=True)
    assert d.item(answer)["content"] == [{"type": reply, "transcript": "hello"}]
    assert d.item(answer)["status"] == cancelled
    text_reply = {"ga": "output_text", "beta": "text", "duplex": "audio"}[name]
    assert d.item(Item("b", "assistant", "ok"))["content"][0]["type"] == text_reply


def test_status_details_say_openais_reasons_and_keep_auras():
    def done(name, status, reason):
        return dialect(name).response(ResponseView("r", status, True, reason=reason))

    assert done("ga", "completed", "completed")["status_details"] is None
    assert done("ga", "completed", "listen")["aura_reason"] == "listen"
    assert done("ga", "cancelled", "barge_in")["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert done("beta", "cancelled", "new_response")["status_details"] == {"type": "cancelled",
                                                                           "reason": "client_cancelled"}
    assert done("duplex", "cancelled", "barge_in")["status_details"] == {"type": "cancelled", "reason": "barge_in"}
    assert done("duplex", "completed", "listen")["status_details"] == {"type": "completed", "reason": "listen"}
    assert "output_modalities" in done("ga", "completed", None) and "modalities" in done("beta", "completed", None)


def test_session_shapes_and_error_codes():
    config = SessionConfig.for_session(duplex=False).with_update({"type": "realtime", "output_modalities": ["audio"]})
    view = SessionView(config, "s", "m", {"epoch": 0})
    ga, beta, duplex = (dialect(n).session(view) for n in ("ga", "beta", "duplex"))
    assert ga["output_modalities"] == ["audio"] and "voice" not in ga and "turn_detection" not in ga
    assert beta["modalities"] == ["audio"] and "audio" not in beta and beta["turn_detection"]["type"] == "server_vad"
    assert duplex["audio"]["input"]["turn_detection"] == duplex["turn_detection"] and duplex["epoch"] == 0
    [(_, ga_error)] = wire("ga", "error", error={"code": "x"})
    assert dialect("ga").error_codes["input_audio_buffer_empty"] == "input_audio_buffer_commit_empty"
    assert "input_audio_buffer_empty" not in dialect("duplex").error_codes and ga_error["error"] == {"code": "x"}


def test_a_beta_session_update_is_known_by_its_shape():
    assert is_beta_shape({"modalities": ["text"], "instructions": "x"})
    assert is_beta_shape({"turn_detection": None})
    assert not is_beta_shape({"type": "realtime", "turn_detection": None})
    assert not is_beta_shape({"voice": "alloy", "instructions": "x"})  # fields both shapes accept decide nothing
