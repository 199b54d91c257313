"""A duplex session's journal and its resume: what a reconnecting client gets back, and when it must start over."""

import asyncio

import pytest

from aura_omni.session.events import ServerEvent
from aura_omni.session.errors import ResumeRefused
from aura_omni.session.journal import EVENT_OVERHEAD_BYTES, Journal


def journal_of(n: int, max_bytes: int = 10**9, delta: str = "") -> Journal:
    j = Journal(max_bytes)
    for seq in range(1, n + 1):
        j.add(ServerEvent("response.output_audio.delta", {"delta": delta}, seq=seq))
    return j


def seqs(events) -> list[int]:
    return [e.seq for e in events]


def test_a_resume_gets_every_event_after_the_last_one_received():
    j = journal_of(5)
    assert seqs(j.since(2)) == [3, 4, 5] and j.since(5) == [] and seqs(j.since(0)) == [1, 2, 3, 4, 5]


def test_acknowledged_events_are_let_go_and_cannot_be_asked_for_again():
    j = journal_of(5)
    j.ack(3)
    assert len(j) == 2 and seqs(j.since(3)) == [4, 5]
    assert j.since(1) == "journal_gap"  # it had acknowledged 2 and 3
    assert j.since(9) == "journal_gap"  # never sent
    j.ack(99)  # past the end: everything sent, no more
    assert len(j) == 0 and j.since(5) == []


def test_the_byte_budget_pushes_out_the_oldest_and_a_resume_behind_them_must_restart():
    j = journal_of(10, max_bytes=4 * (EVENT_OVERHEAD_BYTES + 100), delta="x" * 100)
    assert seqs(j.since(6)) == [7, 8, 9, 10]  # the newest four fit
    assert j.since(2) == "journal_overflow"


@pytest.mark.asyncio
async def test_a_detached_session_runs_on_and_is_resumed_with_what_its_client_missed():
    from test_realtime_session import FakeBuilder, FakeRuntime, pcm_b64, until

    from aura_omni.session import RealtimeSession

    s = RealtimeSession(FakeRuntime(), FakeBuilder(), model="tiny", duplex=True, resumable=True)
    await s.send("session.update", session={})
    created = (await until(s, "session.created"))[-1]
    token = created["resume_token"]
    await s.send("input_audio_buffer.append", audio=pcm_b64(rate=16000), sample_rate_hz=16000)
    await s.send("input_audio_buffer.commit", create_response=True)
    last = (await until(s, "response.output_audio.delta"))[-1].seq
    await s.send("session.event_ack", server_event_seq=last)  # the client had everything up to here
    s.detach()  # its socket dropped
    await asyncio.wait([r.task for r in s.responses])  # the reply runs to its end meanwhile
    assert s.pending_events() == 0  # nothing queued for a socket that is gone
    with pytest.raises(ResumeRefused) as refused:
        s.check_resume("not the token", last)
    assert refused.value.code == "session_resume_rejected"
    with pytest.raises(ResumeRefused) as refused:
        s.check_resume(token, last - 1)  # acknowledged, so let go
    assert refused.value.code == "session_resync_required" and str(refused.value) == "journal_gap"
    resumed, replay = s.reattach(token, last)
    assert resumed.type == "session.resumed" and resumed["resume_token"] != token
    assert resumed["attachment_generation"] == 2 and s.attached
    assert seqs(replay) == list(range(last + 1, resumed.seq))
    assert "response.done" in [e.type for e in replay]  # the reply finished while detached
    await s.send("session.resume", session_id=s.id)
    assert (await until(s, "error"))[-1]["error"]["code"] == "session_resume_in_session"
    await s.send("session.event_ack", server_event_seq="x")
    assert (await until(s, "error"))[-1]["error"]["code"] == "invalid_value"


@pytest.mark.asyncio
async def test_a_session_no_transport_holds_keeps_no_journal():
    """In process (`Omni.session`) nothing reconnects: no journal, no token, and resume is said to be unsupported."""
    from test_realtime_session import FakeBuilder, FakeRuntime, until

    from aura_omni.session import RealtimeSession

    s = RealtimeSession(FakeRuntime(), FakeBuilder(), model="tiny", duplex=True)
    await s.send("session.update", session={})
    created = (await until(s, "session.created"))[-1]
    assert "resume_token" not in created.data and s.journal is None
    assert created["session"]["capabilities"]["supports_session_resume"] is False
    assert created.seq == 1  # duplex events still carry their seq
    await s.send("session.resume", session_id=s.id)
    assert (await until(s, "error"))[-1]["error"]["code"] == "session_resume_unsupported"
