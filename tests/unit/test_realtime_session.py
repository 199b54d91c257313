"""The realtime session state machine without a server: the real orchestrator over scripted stages.

The stages record when they run and when they are stopped, so ordering, overlap, barge-in and history are
checked on the events the session emits, in milliseconds.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import soundfile as sf
from PIL import Image

from aura_omni.models.qwen3_vl_prompt import IM_END, IM_START, IMAGE_PAD, VIDEO_PAD, VISION_END, VISION_START
from aura_omni.deploy import TurnSettings
from aura_omni.stages.asr.transcript import Transcript
from aura_omni.bench.inputs import RECORDED_SPEECH
from aura_omni.pipeline.orchestrator import AuraOmniPipeline
from aura_omni.pipeline.processors import PipelineRequestError
from aura_omni.stages.aura.stage import AuraDelta
from aura_omni.pipeline.turn import TurnRequest, collect_turn
from aura_omni.media.limits import MediaLimits
from aura_omni.media.request_media import MediaPolicy
from aura_omni.session import RealtimeSession, SessionConfig, SessionConfigError
from aura_omni.session.frames import FrameWindow, similarity
from aura_omni.session.history import History, Item
from aura_omni.session.vad import ServerVad, load_silero

SILENT = "<|silent|>"
SPEECH_WAV = RECORDED_SPEECH  # espeak-ng, 16 kHz


@pytest.fixture(scope="module")
def speech_16k() -> np.ndarray:
    wav, sr = sf.read(SPEECH_WAV, dtype="float32")
    assert sr == 16000
    return wav


def chatml(prompt) -> str:
    """An AuraPrompt as upstream's asr2aura writes it (one unexpanded placeholder per vision item), for assertions
    on what the session asked of AURA."""
    pad = {"image": IMAGE_PAD, "video": VIDEO_PAD}
    return "".join(f"{IM_START}{t.role}\n" + "".join(f"{VISION_START}{pad[k]}{VISION_END}" for k in t.vision)
                   + f"{t.text}{IM_END}\n" for t in prompt.turns) + f"{IM_START}assistant\n"


class ScriptedAura:
    """Replies with `reply` (one token per word, `step_s` apart); records prompts."""

    def __init__(self, reply: str = "Hello there. I see a red square.", step_s: float = 0.005):
        self.reply, self.step_s = reply, step_s
        self.prompts: list[str] = []
        self.running = 0

    async def generate(self, prompt, vision, *, request_id, sampling=None):
        prompt = chatml(prompt)
        self.prompts.append(prompt)
        self.running += 1
        try:
            words = self.reply.split(" ")
            for k, w in enumerate(words):
                await asyncio.sleep(self.step_s)
                yield AuraDelta(w + (" " if k < len(words) - 1 else ""), [k], finished=k == len(words) - 1,
                                prompt_tokens=len(prompt))
        finally:
            self.running -= 1


class ScriptedSpeech:
    """`chunks` chunks of 80 ms per sentence, `step_s` apart."""

    def __init__(self, chunks: int = 3, step_s: float = 0.01):
        self.chunks, self.step_s = chunks, step_s
        self.running = 0
        self.stopped_at: list[float] = []

    async def speak(self, text, token_ids, template, *, request_id):
        self.running += 1
        try:
            for _ in range(self.chunks):
                await asyncio.sleep(self.step_s)
                yield np.full(1920, 0.1, np.float32)
        finally:
            self.running -= 1
            self.stopped_at.append(time.monotonic())


class ScriptedAsr:
    async def transcribe(self, samples, sample_rate, *, request_id, language=None, context=None, sampling=None):
        await asyncio.sleep(0.005)
        return Transcript("English", "what is this")


class FakeBuilder:
    policy = MediaPolicy()

    async def build(self, spec, request_id):
        if spec.voice == "nobody":
            raise PipelineRequestError("voice: unknown speaker 'nobody'", param="voice")
        if spec.voice == "bug":
            raise ValueError("an internal bug at /srv/aura_omni/x.py")
        info = spec.info or {}
        return TurnRequest(request_id, audio=spec.audio, text_parts=list(spec.text_parts), history=list(spec.history),
                           system_prompt=spec.system_prompt, is_speech=info.get("is_speech", True),
                           speak=True if spec.speak is None else spec.speak, tts=object(), tool_use=spec.tool_use)


class FakeRuntime:
    def __init__(self, aura=None, speech=None):
        self.aura, self.speech = aura or ScriptedAura(), speech or ScriptedSpeech()
        self.pipeline = AuraOmniPipeline(ScriptedAsr(), self.aura, self.speech, sentence_min_chars=5)
        self.models = {"qwen3_tts": None}  # a Talker is deployed: sessions speak by default


def pcm_b64(seconds: float = 0.2, rate: int = 24000, amp: float = 0.2) -> str:
    t = np.arange(int(seconds * rate)) / rate
    return base64.b64encode((amp * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes()).decode()


def jpeg_b64(color=(255, 0, 0), size=64) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, "JPEG")
    return base64.b64encode(buf.getvalue()).decode()


async def until(session: RealtimeSession, *types: str, timeout: float = 5.0) -> list:
    """Events up to and including the first of `types`."""
    out = []
    while True:
        ev = await asyncio.wait_for(session.next_event(), timeout)
        out.append(ev)
        if ev.type in types:
            return out


def drain(session: RealtimeSession) -> list:
    out = []
    while session.pending_events():
        out.append(session._events.get_nowait())
    return out


def new_session(runtime=None, duplex=False, beta=False, vad=False) -> RealtimeSession:
    """A session in push-to-talk unless `vad` (OpenAI sessions start with server_vad; these tests commit themselves,
    as a client that sent `turn_detection: null` does)."""
    s = RealtimeSession(runtime or FakeRuntime(), FakeBuilder(), model="tiny", duplex=duplex, beta=beta)
    if not vad:
        s.config = dataclasses.replace(s.config, turn_detection=None)
    if not duplex:
        s.start()
    return s


async def mid_reply() -> tuple[FakeRuntime, RealtimeSession]:
    """A session whose reply has started speaking and would go on for 4 s."""
    rt = FakeRuntime(speech=ScriptedSpeech(chunks=200, step_s=0.01))
    s = new_session(rt)
    await s.send("input_audio_buffer.append", audio=pcm_b64())
    await s.send("input_audio_buffer.commit", create_response=True)
    await until(s, "response.output_audio.delta")
    return rt, s


# ------------------------------------------------------------------------------------------------ pure pieces

def test_session_update_ga_and_beta_shapes_mean_the_same():
    ga = SessionConfig().with_update({"type": "realtime", "output_modalities": ["text"], "instructions": "Be brief.",
                                      "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                                          "turn_detection": {"type": "server_vad", "threshold": 0.6}},
                                                "output": {"voice": "vivian"}}})
    beta = SessionConfig().with_update({"modalities": ["text"], "instructions": "Be brief.", "voice": "vivian",
                                        "input_audio_format": "pcm16",
                                        "turn_detection": {"type": "server_vad", "threshold": 0.6}})
    assert (ga.speak, ga.instructions, ga.voice, ga.turn_detection) == (beta.speak, beta.instructions, beta.voice,
                                                                       beta.turn_detection)
    assert ga.input_sample_rate == 16000 and beta.input_sample_rate == 24000  # beta pcm16 is OpenAI's 24 kHz
    assert ga.turn_detection.threshold == 0.6 and ga.turn_detection.silence_duration_ms == 500


def test_session_update_refuses_what_aura_cannot_do():
    for session, code in (({"turn_detection": {"type": "push_to_talk"}}, "unsupported_turn_detection"),
                          ({"input_audio_format": "opus"}, "unsupported_audio_format"),
                          ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}},
                           "unsupported_audio_format"),
                          ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}}},
                           "unsupported_sample_rate"),
                          ({"tools": [{"type": "mcp", "server_label": "x"}]}, "unsupported_tool"),
                          ({"turn_detection": {"threshold": 3}}, "invalid_value")):
        with pytest.raises(SessionConfigError) as e:
            SessionConfig().with_update(session)
        assert e.value.code == code


def test_g711_formats_in_both_shapes():
    ga = SessionConfig().with_update({"audio": {"input": {"format": {"type": "audio/pcmu"}},
                                                "output": {"format": {"type": "audio/pcma"}}}})
    beta = SessionConfig().with_update({"input_audio_format": "g711_ulaw", "output_audio_format": "g711_alaw"})
    assert ga == beta
    assert (ga.input_audio_format, ga.input_sample_rate, ga.output_audio_format, ga.output_sample_rate) == (
        "g711_ulaw", 8000, "g711_alaw", 8000)
    echoed = ga.to_json("s", "m")
    assert echoed["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert echoed["audio"]["output"]["format"] == {"type": "audio/pcma"}
    assert (echoed["input_audio_format"], echoed["output_audio_format"], echoed["output_sample_rate_hz"]) == (
        "g711_ulaw", "g711_alaw", 8000)
    back = ga.with_update({"output_audio_format": "pcm16"})
    assert (back.output_audio_format, back.output_sample_rate) == ("pcm16", 24000)


def test_extra_body_takes_chat_keys_and_sampling_list():
    cfg = SessionConfig().with_update({"extra_body": {"tts_speaker": "Ryan", "aura_system_prompt": "S",
                                                      "sampling_params_list": [None, {"logit_bias": {"1": 5}}],
                                                      "auto_response": True, "max_frames": 4}})
    assert cfg.info == {"tts_speaker": "Ryan", "aura_system_prompt": "S"}
    assert cfg.stage_sampling == [None, {"logit_bias": {"1": 5}}] and cfg.auto_response and cfg.max_frames == 4


def test_extra_body_keys_are_typed_as_on_the_chat_endpoint():
    with pytest.raises(SessionConfigError) as e:
        SessionConfig().with_update({"extra_body": {"tts_speakr": "Ryan"}})
    assert e.value.param == "session.extra_body.tts_speakr" and "unknown option" in str(e.value)
    with pytest.raises(SessionConfigError) as e:
        SessionConfig().with_update({"extra_body": {"additional_information": {"tts_max_new_tokens": "many"}}})
    assert e.value.param == "session.extra_body.tts_max_new_tokens"


def test_heard_text_is_cut_where_playback_stopped():
    item = Item("a", "assistant", "one two three four", audio_ms=1000.0, played_ms=500.0)
    assert item.heard_text("ack_only") == "one two"
    item.played_ms = None
    assert item.heard_text("ack_only") == "" and item.heard_text("commit_all_on_done") == "one two three four"
    assert Item("s", "assistant", silent=True).heard_text("ack_only") == SILENT


def test_history_prunes_to_30_rounds_past_45():
    h = History()
    for k in range(46):
        h.add(Item(f"u{k}", "user", f"q{k}"))
        h.add(Item(f"a{k}", "assistant", f"r{k}", played_ms=1.0, audio_ms=1.0))
    assert h.rounds == 30 and h.items[0].id == "u16"
    turns = h.turns("ack_only")
    assert turns[0] == ("user", "q16") and turns[-1] == ("assistant", "r45")


def test_near_duplicate_frames_are_dropped_and_latest_kept():
    red = np.zeros((48, 64, 3), np.uint8)
    red[..., 0] = 200
    noisy = np.clip(red.astype(int) + 3, 0, 255).astype(np.uint8)
    blue = np.zeros_like(red)
    blue[..., 2] = 200
    assert similarity(red, noisy) >= 0.95 > similarity(red, blue)
    w = FrameWindow(max_frames=2)
    assert w.push(red) and not w.push(noisy) and w.push(blue) and w.push(red)
    assert len(w.frames) == 2 and w.frames[-1] is red and w.dropped == 1
    lone = FrameWindow()
    lone.push(red)
    assert lone.clip().frames.shape[0] == 2  # one frame doubled into a 2-frame clip


class StubVadModel:
    def __init__(self, probs):
        self.probs = list(probs)

    def reset_states(self):
        pass

    def __call__(self, x, sr):
        import torch

        return torch.tensor(self.probs.pop(0) if self.probs else 0.0)


def test_vad_start_and_stop_positions():
    # 32 ms windows: silence x3, speech x10, silence x20 with 200 ms silence_duration
    vad = ServerVad(0.5, 200, model=StubVadModel([0.0] * 3 + [0.9] * 10 + [0.0] * 20))
    events = vad.feed(np.zeros(512 * 33, np.float32))
    assert [(e.kind, e.ms) for e in events] == [("start", 96), ("pause", 416), ("stop", 416)]


def test_vad_pauses_at_the_trailing_pad_and_again_after_speech_resumes():
    """A pause after 200 ms of silence (the commit's trailing pad), a stop after 500 ms; speech that resumes in
    between pauses again at its new end."""
    probs = [0.9] * 10 + [0.0] * 8 + [0.9] * 5 + [0.0] * 20  # speech, 256 ms of silence, speech, silence
    vad = ServerVad(0.5, 500, model=StubVadModel(probs))
    events = vad.feed(np.zeros(512 * len(probs), np.float32))
    assert [(e.kind, e.ms) for e in events] == [("start", 0), ("pause", 320), ("pause", 736), ("stop", 736)]
    assert (vad.position - 736 * 16) * 1000 // 16000 >= 500 and vad.pause_ms == 200


def test_silero_hears_speech_but_not_silence(speech_16k):
    vad = ServerVad(0.5, 300, model=load_silero())
    assert vad.feed(np.zeros(16000, np.float32)) == []
    events = vad.feed(np.concatenate([speech_16k, np.zeros(16000, np.float32)]))
    kinds = [e.kind for e in events]  # a pause inside the phrase too, if the speech holds one of 200 ms
    assert kinds[0] == "start" and kinds[-2:] == ["pause", "stop"] and set(kinds[1:-2]) <= {"pause"}
    assert events[-2].sample == events[-1].sample


# ------------------------------------------------------------------------------------------------ the session

@pytest.mark.asyncio
async def test_push_to_talk_turn_follows_the_openai_sequence():
    s = new_session()
    await s.send("input_audio_buffer.append", audio=pcm_b64())
    await s.send("input_audio_buffer.commit")
    await s.send("response.create")
    events = await until(s, "response.done")
    types = [e.type for e in events]
    assert types[:3] == ["session.created", "conversation.item.added", "input_audio_buffer.committed"]
    order = ["conversation.item.input_audio_transcription.completed", "response.created",
             "response.output_item.added", "response.content_part.added", "response.output_audio_transcript.delta",
             "response.output_audio.delta", "response.output_audio.done", "response.output_audio_transcript.done",
             "response.content_part.done", "response.output_item.done", "response.done"]
    assert [types.index(t) for t in order] == sorted(types.index(t) for t in order)
    assert types.count("response.output_audio.delta") > 0 and "response.audio.delta" not in types  # GA only
    assert events[-1]["response"]["status"] == "completed"
    assert len({e.event_id for e in events}) == len(events)
    transcript = next(e for e in events if e.type == "response.output_audio_transcript.done")["transcript"]
    assert transcript == "Hello there. I see a red square."


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt, ga_type", [("g711_ulaw", "audio/pcmu"), ("g711_alaw", "audio/pcma")])
async def test_a_phone_call_session_hears_and_speaks_g711_at_8_khz(fmt, ga_type):
    """A telephone bridge's session: 8 kHz G.711 in (ASR gets it at 16 kHz), and the reply's 24 kHz audio out as
    G.711 at 8 kHz, one resampler over the reply: a third of the samples, the level kept, nothing lost at the end."""
    from aura_omni.media import wire_audio

    heard = []

    class RecordingAsr(ScriptedAsr):
        async def transcribe(self, samples, sample_rate, **kw):
            heard.append((samples, sample_rate))
            return await super().transcribe(samples, sample_rate, **kw)

    rt = FakeRuntime()
    rt.pipeline.asr = RecordingAsr()
    s = new_session(rt)
    await s.send("session.update", session={"audio": {"input": {"format": {"type": ga_type}},
                                                       "output": {"format": {"type": ga_type}}}})
    t = np.arange(4000) / 8000  # 0.5 s of a 220 Hz tone at 0.3
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    await s.send("input_audio_buffer.append", audio=base64.b64encode(wire_audio.encode(tone, fmt)).decode())
    await s.send("input_audio_buffer.commit", create_response=True)
    events = await until(s, "response.done")
    assert events[-1]["response"]["status"] == "completed"
    samples, rate = heard[0]
    assert rate == 16000 and abs(samples.size - 2 * tone.size) <= 2
    assert abs(np.abs(samples[2000:6000]).max() - 0.3) < 0.02  # the tone, resampled, at its level
    deltas = [e for e in events if e.type == "response.output_audio.delta"]
    assert {(d["format"], d["sample_rate_hz"]) for d in deltas} == {(fmt, 8000)}
    out = wire_audio.decode(b"".join(base64.b64decode(d["delta"]) for d in deltas), fmt)
    assert out.size == deltas[-1]["metadata"]["audio_duration_ms"] * 8 > 0  # the whole reply, flushed at its end
    assert np.allclose(out[200:-200], 0.1, atol=0.01)  # the reply's constant 0.1, through the resampler and G.711


@pytest.mark.asyncio
@pytest.mark.parametrize("duplex", [True, False])
async def test_silent_reply_is_response_listen_without_audio(duplex):
    """AURA's <|silent|>: no audio; duplex announces `response.listen`, an OpenAI session a completed response.done
    with no output and AURA's reason `listen` beside OpenAI's fields."""
    s = new_session(FakeRuntime(aura=ScriptedAura(SILENT)), duplex=duplex)
    if duplex:
        await s.send("session.update", session={})
    await s.send("input_audio_buffer.append", audio=pcm_b64())
    await s.send("input_audio_buffer.commit", create_response=True)
    events = await until(s, "response.done")
    types = [e.type for e in events]
    assert ("response.listen" in types) == duplex and not any("audio" in t and "delta" in t for t in types)
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["output"] == [] and done["aura_reason"] == "listen"
    assert done["status_details"] == ({"type": "completed", "reason": "listen"} if duplex else None)
    # ASR ran inside the turn: its transcript still comes before response.created (vLLM-Omni's order)
    assert types.index("conversation.item.input_audio_transcription.completed") < types.index("response.created")
    assert s.history.turns("ack_only")[-1] == ("assistant", SILENT)


@pytest.mark.asyncio
async def test_cancel_stops_stages_and_no_delta_follows_done():
    rt, s = await mid_reply()
    t0 = time.monotonic()
    await s.send("response.cancel")
    stopped = time.monotonic()
    assert rt.speech.running == 0 and rt.aura.running == 0 and stopped - t0 < 0.1
    events = await until(s, "response.done")
    assert events[-1]["response"]["status"] == "cancelled"
    assert events[-1]["response"]["status_details"]["reason"] == "client_cancelled"
    await asyncio.sleep(0.1)
    assert not [e for e in drain(s) if "delta" in e.type]
    assert s.epoch == 1


@pytest.mark.asyncio
async def test_new_commit_overlaps_the_draining_reply():
    rt = FakeRuntime(speech=ScriptedSpeech(chunks=30, step_s=0.01))
    s = new_session(rt)
    await s.send("input_audio_buffer.append", audio=pcm_b64())
    await s.send("input_audio_buffer.commit", create_response=True)
    await until(s, "response.output_audio.delta")  # AURA's text is final: the first reply drains in TTS
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[jpeg_b64()], is_speech=False)
    await s.send("input_audio_buffer.commit", create_response=True, is_speech=False)
    events = []
    while sum(e.type == "response.done" for e in events) < 2:
        events.append(await asyncio.wait_for(s.next_event(), 5))
    created = [e for e in events if e.type == "response.created"]
    first_done = next(e for e in events if e.type == "response.done")
    assert len(created) == 1 and created[0].response_id != first_done.response_id
    assert events.index(created[0]) < events.index(first_done)  # the second turn ran while the first drained
    assert [e["response"]["status"] for e in events if e.type == "response.done"] == ["completed", "completed"]
    # the vision-follow turn: the frame as a clip, no words (is_speech false, no transcript)
    assert rt.aura.prompts[-1].endswith("<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|><|im_end|>\n"
                                        "<|im_start|>assistant\n")


@pytest.mark.asyncio
async def test_a_reply_is_final_for_the_next_one_when_its_turn_says_the_text_is_done():
    """The session runs the runtime's own orchestrator, its stages unwrapped: a response's text is final at its turn's
    TextDone, once AURA has ended and while the reply is still spoken."""
    rt = FakeRuntime(speech=ScriptedSpeech(chunks=30, step_s=0.01))
    s = new_session(rt)
    assert s.pipeline is rt.pipeline and s.pipeline.aura is rt.aura
    await s.send("input_audio_buffer.append", audio=pcm_b64())
    await s.send("input_audio_buffer.commit", create_response=True)
    resp = s.responses[0]
    await asyncio.wait_for(resp.aura_final.wait(), 5)
    assert rt.aura.running == 0 and rt.speech.running == 1 and resp in s.responses
    await until(s, "response.done")
    await s.close()


@pytest.mark.asyncio
async def test_history_counts_only_what_was_played_in_duplex():
    s = new_session(duplex=True)
    await s.send("session.update", session={"instructions": "Be brief."})
    await until(s, "session.updated")
    await s.send("input_audio_buffer.append", audio=pcm_b64(rate=16000), sample_rate_hz=16000)
    await s.send("input_audio_buffer.commit", create_response=True)
    events = await until(s, "response.done")
    rid = events[-1].response_id
    assert s.history.turns(s.config.playback_commit_policy) == [("user", "what is this")]  # nothing acked yet
    await s.send("playback.ack", response_id=rid, item_id=f"item_{rid}", played_ms=10_000, committed_ms=10_000)
    ack = (await until(s, "playback.acknowledged"))[-1]
    assert ack["event"]["history_committed"] == "Hello there. I see a red square."
    assert all(e.seq is not None for e in events)  # duplex: server_event_seq on every event


@pytest.mark.asyncio
async def test_a_bug_is_a_server_error_without_its_details_and_a_request_error_is_the_clients():
    s = new_session(duplex=True)
    await s.send("session.update", session={"voice": "bug"})
    await s.send("session.update", session={"voice": "nobody"})
    await s.send("session.heartbeat")
    errors = [e["error"] for e in await until(s, "session.heartbeat_ack") if e.type == "error"]
    assert [(e["type"], e["code"]) for e in errors] == [("server_error", "server_error"),
                                                       ("invalid_request_error", "invalid_session_config")]
    assert "/srv" not in errors[0]["message"] and "error id" in errors[0]["message"]
    assert errors[1]["message"] == "voice: unknown speaker 'nobody'"


@pytest.mark.asyncio
async def test_bad_events_get_errors_and_the_session_carries_on():
    s = new_session(duplex=True)
    await s.send("input_audio_buffer.append", audio=pcm_b64())  # before session.update
    bad = [{"type": "no.such.event"}, {"type": "input_audio_buffer.append", "audio": "***not base64***"},
           {"type": "input_audio_buffer.append", "audio": pcm_b64(rate=16000), "sample_rate_hz": 24000},
           {"type": "input_audio_buffer.commit"}, {"type": "response.cancel"}, {"not": "an event"},
           {"type": "conversation.item.delete", "item_id": "nope"}, {"type": "session.update",
                                                                    "session": {"voice": "nobody"}}]
    await s.send("session.update", session={})
    await s.send("input_audio_buffer.append", audio=pcm_b64(rate=16000), sample_rate_hz=16000)
    await s.send("input_audio_buffer.clear")
    for event in bad:
        await s.send(event)
    await s.send("session.heartbeat")
    events = await until(s, "session.heartbeat_ack")
    codes = [e["error"]["code"] for e in events if e.type == "error"]
    assert codes == ["session_not_started", "unknown_event_type", "invalid_base64", "sample_rate_mismatch",
                     "input_audio_buffer_empty", "response_cancel_not_active", "invalid_event", "item_not_found",
                     "invalid_session_config"]
    assert all(set(e["error"]) >= {"type", "code", "message", "event_id"} for e in events if e.type == "error")
    assert not s.closed and s.config.voice is None  # the refused update changed nothing


@pytest.mark.asyncio
async def test_server_vad_barge_in_cancels_the_reply():
    rt, s = await mid_reply()
    s.vad = ServerVad(0.5, 100, model=StubVadModel([0.9] * 5 + [0.0] * 10))  # the user starts talking
    s.config = s.config.with_update({"turn_detection": {"type": "server_vad", "silence_duration_ms": 100}})
    await s.send("input_audio_buffer.append", audio=pcm_b64(seconds=0.48, rate=24000))
    events = await until(s, "input_audio_buffer.committed")
    types = [e.type for e in events]
    assert types.index("input_audio_buffer.speech_started") < types.index("response.done")
    done = next(e for e in events if e.type == "response.done")["response"]
    assert done["status_details"] == {"type": "cancelled", "reason": "turn_detected"}  # OpenAI's word for it
    assert done["aura_reason"] == "barge_in" and done["output"][0]["status"] == "incomplete"
    assert "input_audio_buffer.speech_stopped" in types


@pytest.mark.asyncio
async def test_a_commit_the_session_transcribes_gets_the_asr_options_a_turn_gets_seed_included():
    """A commit with no response is transcribed by the session, through the pipeline's ASR, with the options the
    turn's own ASR gets from the same settings (the real TurnBuilder): sampling_params_list's ASR entry with its
    seed, extra_body's asr_language and asr_context."""
    from aura_omni.deploy import parse_deploy_config
    from aura_omni.request.turn_builder import TurnBuilder, TurnSpec

    asked = []

    class RecordingAsr(ScriptedAsr):
        async def transcribe(self, samples, sample_rate, *, request_id, **kw):
            asked.append(kw)
            return await super().transcribe(samples, sample_rate, request_id=request_id, **kw)

    rt = FakeRuntime()
    rt.pipeline.asr = RecordingAsr()
    rt.deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [
        {"stage_id": i, "model": m} for i, m in enumerate(["asr", "aura", "tts", "tts"])]})
    builder = TurnBuilder(rt)
    s = RealtimeSession(rt, builder, model="tiny")
    extra = {"sampling_params_list": [{"temperature": 0.7, "max_tokens": 9, "seed": 1234}],
             "asr_language": "English", "asr_context": "names: Ada"}
    s.config = dataclasses.replace(s.config.with_update({"extra_body": extra}), turn_detection=None)
    s.start()
    await s.send("input_audio_buffer.append", audio=pcm_b64())
    await s.send("input_audio_buffer.commit", create_response=False)
    await until(s, "conversation.item.input_audio_transcription.completed")
    turn = await builder.build(TurnSpec(audio=(np.zeros(1600, np.float32), 16000), info=s.config.info,
                                        stage_sampling=s.config.stage_sampling, speak=False), "r1")
    await collect_turn(rt.pipeline.turn(turn))  # a turn's own ASR, from the same settings
    assert asked[0] == asked[1] == {"language": "English", "context": "names: Ada",
                                    "sampling": {"temperature": 0.7, "max_tokens": 9, "seed": 1234}}
    await s.close()


class AheadRuntime(FakeRuntime):
    """Records every transcription the pipeline's ASR runs (its audio's length): ahead of a commit or a turn's own."""

    def __init__(self):
        super().__init__()
        self.heard: list[int] = []
        heard = self.heard

        class RecordingAsr(ScriptedAsr):
            async def transcribe(self, samples, sample_rate, **kw):
                heard.append(len(samples))
                await asyncio.sleep(0.02)
                return Transcript("English", f"heard {len(samples)} samples")

        self.pipeline.asr = RecordingAsr()


def vad_session(rt, probs) -> RealtimeSession:
    s = new_session(rt)
    s.vad = ServerVad(0.5, 500, model=StubVadModel(probs))
    s.config = s.config.with_update({"turn_detection": {"type": "server_vad", "silence_duration_ms": 500}})
    return s


def pcm16k_b64(windows: int) -> str:  # 32 ms VAD windows of 16 kHz audio, as a session at 16 kHz receives them
    return base64.b64encode((0.2 * np.ones(512 * windows) * 32767).astype("<i2").tobytes()).decode()


@pytest.mark.asyncio
async def test_server_vad_transcribes_the_speech_in_its_silence_window_and_the_turn_takes_it():
    """320 ms of speech, then silence: at 200 ms of silence the speech plus that pad is transcribed; the commit at
    500 ms takes exactly that audio and its transcript, and the turn runs no ASR of its own."""
    rt = AheadRuntime()
    s = vad_session(rt, [0.9] * 10 + [0.0] * 20)
    s.config = s.config.with_update({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}})
    await s.send("input_audio_buffer.append", audio=pcm16k_b64(17))  # speech and 224 ms of silence: paused
    for _ in range(100):  # the transcription's task starts
        if rt.heard:
            break
        await asyncio.sleep(0.005)
    assert rt.heard == [(320 + 200) * 16] and "input_audio_buffer.committed" not in [e.type for e in drain(s)]
    await s.send("input_audio_buffer.append", audio=pcm16k_b64(13))  # on to 512 ms of silence: the commit
    events = await until(s, "response.done")
    types = [e.type for e in events]
    assert types.index("input_audio_buffer.committed") < types.index(
        "conversation.item.input_audio_transcription.completed") < types.index("response.created")
    done = next(e for e in events if e.type == "conversation.item.input_audio_transcription.completed")
    assert done["transcript"] == f"heard {520 * 16} samples" and rt.heard == [520 * 16]  # none by the turn
    assert f"heard {520 * 16} samples" in rt.aura.prompts[-1]


@pytest.mark.asyncio
async def test_speech_that_resumes_after_the_pause_is_transcribed_again_whole(monkeypatch):
    rt = AheadRuntime()
    s = vad_session(rt, [0.9] * 10 + [0.0] * 8 + [0.9] * 5 + [0.0] * 20)
    s.config = s.config.with_update({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}})
    await s.send("input_audio_buffer.append", audio=pcm16k_b64(18))  # speech and 256 ms of silence: paused
    for _ in range(100):
        if rt.heard:
            break
        await asyncio.sleep(0.005)
    await s.send("input_audio_buffer.append", audio=pcm16k_b64(25))  # the user goes on, then stops
    events = await until(s, "response.done")
    done = next(e for e in events if e.type == "conversation.item.input_audio_transcription.completed")
    whole = (736 + 200) * 16  # up to the second speech's end and its pad
    assert rt.heard == [(320 + 200) * 16, whole] and done["transcript"] == f"heard {whole} samples"

    rt = AheadRuntime()
    rt.pipeline.turn_settings = TurnSettings(transcribe_ahead=False)  # off: the turn transcribes after the commit
    s = vad_session(rt, [0.9] * 10 + [0.0] * 20)
    s.config = s.config.with_update({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}})
    await s.send("input_audio_buffer.append", audio=pcm16k_b64(30))
    events = await until(s, "response.done")
    types = [e.type for e in events]
    assert rt.heard == [520 * 16]  # the turn's own, after the commit
    assert types.index("input_audio_buffer.committed") < types.index(
        "conversation.item.input_audio_transcription.completed")


@pytest.mark.asyncio
async def test_close_stops_everything_and_is_last():
    rt, s = await mid_reply()
    await s.send("session.close")
    events = await until(s, "session.closed")
    assert events[-1]["reason"] == "client_close" and rt.speech.running == 0
    await s.send("session.heartbeat")
    assert drain(s)[0]["error"]["code"] == "session_closed"


@pytest.mark.asyncio
async def test_truncate_cuts_history_and_clamps_past_the_audio():
    s = new_session()
    await s.send("conversation.item.create", item={"type": "message", "role": "user",
                                                   "content": [{"type": "input_text", "text": "hi"}]})
    await s.send("response.create")
    rid = (await until(s, "response.done"))[-1].response_id
    item = s.history.get(f"item_{rid}")
    assert item.audio_ms > 0 and s.history.turns("commit_all_on_done")[-1] == ("assistant", item.text)
    await s.send("conversation.item.truncate", item_id=item.id, content_index=0, audio_end_ms=10 ** 9)
    assert (await until(s, "conversation.item.truncated"))[-1]["audio_end_ms"] == int(item.audio_ms)
    await s.send("conversation.item.truncate", item_id=item.id, content_index=0, audio_end_ms=item.audio_ms / 2)
    await until(s, "conversation.item.truncated")
    heard = s.history.turns("commit_all_on_done")[-1][1]
    assert 0 < len(heard) < len(item.text) and item.text.startswith(heard)


_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=True), st.text(max_size=8),
                    st.lists(st.text(max_size=4), max_size=2), st.dictionaries(st.text(max_size=6), st.integers(),
                                                                               max_size=2))
_fields = ["audio", "sample_rate_hz", "is_speech", "video_frames", "format", "create_response", "item", "item_id",
           "audio_end_ms", "response", "response_id", "session", "played_ms", "committed_ms", "event"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(sorted(set(RealtimeSession.HANDLERS) - {"session.close"}) + ["x.y", ""]),
                          st.dictionaries(st.sampled_from(_fields), _values, max_size=3)), min_size=1, max_size=6))
def test_any_sequence_of_malformed_events_leaves_the_session_serving(events):
    async def run():
        s = new_session()
        for kind, fields in events:
            await s.send({"type": kind, **fields})
        for resp in list(s.responses):
            await s._cancel(resp, "client_cancelled")
        await s.send("session.heartbeat")
        got = await until(s, "session.heartbeat_ack")
        assert not s.closed and got[-1]["session_id"] == s.id

    asyncio.run(run())


@pytest.mark.asyncio
async def test_response_create_overrides_apply_to_that_reply_only():
    rt = FakeRuntime()
    s = new_session(rt)
    for options in ({"instructions": "Answer in French.", "output_modalities": ["text"],
                     "metadata": {"client_event_id": "c1"}}, None):
        await s.send("conversation.item.create", item={"type": "message", "role": "user",
                                                       "content": [{"type": "input_text", "text": "hi"}]})
        await s.send("response.create", **({"response": options} if options else {}))
        events = await until(s, "response.done")
        types = [e.type for e in events]
        if options:
            assert rt.aura.prompts[-1].startswith("<|im_start|>system\nAnswer in French.<|im_end|>")
            assert "response.output_text.delta" in types and "response.output_audio.delta" not in types
            assert next(e for e in events if e.type == "response.created")["response"]["metadata"] == {
                "client_event_id": "c1"}  # LiveKit matches its response.create by this echo
        else:
            assert "Answer in French." not in rt.aura.prompts[-1] and "response.output_audio.delta" in types
    await s.send("conversation.item.create", item={"type": "message", "role": "user",
                                                   "content": [{"type": "input_text", "text": "and now?"}]})
    await s.send("response.create", response={"output_modalities": ["video"]})
    assert (await until(s, "error"))[-1]["error"]["param"] == "session.output_modalities"
    assert not s.responses and len(s.pending) == 1  # refused before anything started; the item still waits


@pytest.mark.asyncio
async def test_a_frame_resent_with_every_chunk_is_decoded_once(monkeypatch):
    """Clients may attach their latest camera frame to every audio chunk: the same bytes are not decoded again, and
    the frame still counts as fresh for the next commit."""
    import aura_omni.session.camera as camera

    decoded = []
    real = camera.open_rgb_image
    monkeypatch.setattr(camera, "open_rgb_image", lambda data, limits: decoded.append(1) or real(data, limits))
    s = new_session()
    red, blue = jpeg_b64((255, 0, 0)), jpeg_b64((0, 0, 255))
    for _ in range(5):
        await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[red])
    assert len(decoded) == 1 and len(s.frames.frames) == 1
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[red, blue])
    assert len(decoded) == 2 and len(s.frames.frames) == 2  # only the new frame of the list is decoded
    for _ in range(3):  # the last two resent with every chunk (the benchmark's two-frame turns)
        await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[red, blue])
    assert len(decoded) == 2 and len(s.frames.frames) == 2
    s._new_frames = False
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[blue])
    assert len(decoded) == 2 and s._new_frames
    green = jpeg_b64((0, 255, 0))
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[blue, green])
    assert len(decoded) == 3  # only the new one
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[red])
    assert len(decoded) == 4  # not among the last append's: decoded again
    await s.close()


@pytest.mark.asyncio
async def test_the_camera_window_is_made_into_auras_input_as_frames_arrive():
    """The clip's vision input is made (and handed to AURA's vision cache) when its frames arrive, so the turn
    takes it as is; a window that changed after it is made again for the turn. The turn waits for the input only:
    an encoding still under way does not hold it up."""
    made = []
    encoding = asyncio.Event()

    class PrefetchingAura(ScriptedAura):
        async def prefetch_vision(self, vision):
            made.append(vision[0])
            await encoding.wait()  # AURA's loop is busy with other sessions' steps

    rt = FakeRuntime(aura=PrefetchingAura())
    rt.models["aura"] = rt.aura
    s = new_session(rt)
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[jpeg_b64((255, 0, 0))])
    turn = await asyncio.wait_for(s._clip_input(), 5)  # while its encoding has not ended
    for _ in range(500):
        if made:
            break
        await asyncio.sleep(0.01)
    assert made == [turn] and not s._clip[1].done()  # the turn takes the prepared input, encoded meanwhile
    encoding.set()
    await asyncio.wait_for(s._clip[1], 5)
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[jpeg_b64((0, 0, 255))])
    await asyncio.wait_for(s._clip[1], 5)
    assert len(made) == 2 and await s._clip_input() is made[1]
    await s.close()


class _PrefillingAura(ScriptedAura):
    """Records prefix prefills (held open until `go` is set) and replies."""

    def __init__(self, log: list, go: asyncio.Event):
        super().__init__(step_s=0.001)
        self.log, self.go = log, go

    async def prefill_prefix(self, prompt, vision, *, request_id):
        self.log.append(("prefill", prompt.turns[-1].text, prompt.turns[-1].vision, len(vision)))
        try:
            await self.go.wait()
        finally:
            self.log.append("prefill ended")
        return 1

    async def generate(self, prompt, vision, *, request_id, sampling=None):
        self.log.append("generate")
        async for d in super().generate(prompt, vision, request_id=request_id, sampling=sampling):
            yield d


@pytest.mark.asyncio
async def test_a_window_seen_while_the_user_speaks_is_prefilled_before_the_commit():
    """Speech appended with a camera frame: AURA prefills the prompt through that window before any commit (the
    window, no words), so the commit leaves it only the words. Frames beside audio marked as not speech are only
    encoded."""
    log, go = [], asyncio.Event()
    go.set()
    rt = FakeRuntime(aura=_PrefillingAura(log, go))
    rt.models["aura"] = rt.aura
    s = new_session(rt)
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[jpeg_b64()], is_speech=False)
    await asyncio.wait_for(s._clip[1], 5)
    assert log == []  # encoded only: nobody is speaking
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[jpeg_b64((0, 0, 255))])
    await _until_logged(log, "prefill ended")
    assert log[0][1:] == ("", ("video",), 1) and "generate" not in log  # before the commit: the window, no words
    await s.send("input_audio_buffer.commit", create_response=True)
    await until(s, "response.done")
    assert "generate" in log
    await s.close()


async def _until_logged(log: list, entry) -> None:
    for _ in range(500):
        if any(e == entry or (isinstance(e, tuple) and e[0] == entry) for e in log):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{entry!r} never came: {log}")


async def _prefilling_while_transcribing(log: list, go: asyncio.Event, heard: asyncio.Event) -> RealtimeSession:
    """A session whose commit (then response.create, with a frame) is still being transcribed (until `heard`), its
    prefix prefill started and held open (until `go`)."""
    class SlowAsr(ScriptedAsr):
        async def transcribe(self, samples, sample_rate, **kw):
            await heard.wait()
            log.append("transcribed")
            return Transcript("English", "what is this")

    rt = FakeRuntime(aura=_PrefillingAura(log, go))
    rt.pipeline.asr = SlowAsr()
    rt.models["aura"] = rt.aura
    s = new_session(rt)
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[jpeg_b64()])
    await s.send("input_audio_buffer.commit")
    await s.send("response.create")
    await _until_logged(log, "prefill")
    return s


@pytest.mark.asyncio
async def test_a_commit_then_response_create_prefills_the_prompt_through_the_frames_while_transcribing():
    """The session's own transcription (a commit without create_response) hides AURA's prefill of the prompt through
    the camera window, as the pipeline's ASR does: the prefill has the window and no words, and the turn's request
    comes after both the prefill and the transcript."""
    log, go, heard = [], asyncio.Event(), asyncio.Event()
    s = await _prefilling_while_transcribing(log, go, heard)
    go.set()
    heard.set()
    await until(s, "response.done")
    assert log[0][1:] == ("", ("video",), 1)  # the camera window, no words yet
    assert log.index("prefill ended") < log.index("generate") and log.index("transcribed") < log.index("generate")
    await s.close()


@pytest.mark.asyncio
async def test_a_response_cancelled_while_transcribing_stops_its_prefix_prefill():
    log, go, heard = [], asyncio.Event(), asyncio.Event()
    s = await _prefilling_while_transcribing(log, go, heard)
    rid = next(r.id for r in s.responses)
    await s.send("response.cancel", response_id=rid)
    await _until_logged(log, "prefill ended")  # cancelled, never released by `go`
    heard.set()
    await asyncio.sleep(0.05)
    assert "generate" not in log
    await s.close()


@pytest.mark.asyncio
async def test_every_prefill_ahead_of_a_turn_enters_through_the_pipelines_prepare_aura():
    """The camera's prefill while the user speaks, the turn's own beside its ASR, and a response's while the session
    transcribes its commit: each is one call of the pipeline's `prepare_aura`, the only way to AURA's prefills."""
    log, go, heard = [], asyncio.Event(), asyncio.Event()
    go.set()
    heard.set()

    class GatedAsr(ScriptedAsr):
        async def transcribe(self, samples, sample_rate, **kw):
            await heard.wait()
            return await super().transcribe(samples, sample_rate, **kw)

    rt = FakeRuntime(aura=_PrefillingAura(log, go))
    rt.models["aura"] = rt.aura
    rt.pipeline.asr = GatedAsr()
    entries = []
    prepare = rt.pipeline.prepare_aura

    async def entry(req):
        entries.append(req.request_id)
        await prepare(req)

    rt.pipeline.prepare_aura = entry
    s = new_session(rt)
    prefills = lambda: [e for e in log if isinstance(e, tuple)]  # noqa: E731 - the AURA stage's prefills
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[jpeg_b64()])  # the camera's, ahead
    await _until_logged(log, "prefill ended")
    await s.send("input_audio_buffer.commit", create_response=True)  # the turn's own, beside its ASR
    await until(s, "response.done")
    assert len(entries) == len(prefills()) == 2
    heard.clear()
    await s.send("input_audio_buffer.append", audio=pcm_b64(), video_frames=[jpeg_b64((0, 0, 255))],
                 is_speech=False)  # a new window, only encoded: nobody speaks
    await s.send("input_audio_buffer.commit", is_speech=True)  # transcribed by the session, held until `heard`
    await s.send("response.create")
    for _ in range(500):
        if len(entries) == 3:
            break
        await asyncio.sleep(0.01)
    heard.set()
    await until(s, "response.done")
    assert len(entries) == len(prefills()) == 3 and "generate" in log
    await s.close()


# ------------------------------------------------------------------------------------------------ greeting, out of band

@pytest.mark.asyncio
async def test_response_create_with_nothing_new_greets_from_the_instructions():
    """The bot speaks first (LiveKit's generate_reply(instructions=...), Pipecat's system-only context): a
    response.create before any input answers from the history and the response's instructions."""
    rt = FakeRuntime()
    s = new_session(rt)
    await s.send("response.create", response={"instructions": "Greet the user."})
    events = await until(s, "response.done")
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["type"] == "output_audio"
    assert "Greet the user." in rt.aura.prompts[-1] and not any(e.type == "error" for e in events)
    assert [i.role for i in s.history.items] == ["assistant"]  # the greeting is the conversation's first item


@pytest.mark.asyncio
async def test_a_duplex_session_keeps_refusing_a_response_with_nothing_to_answer():
    s = new_session(duplex=True)
    await s.send("session.update", session={})
    await s.send("response.create")
    assert (await until(s, "error"))[-1]["error"]["code"] == "response_create_without_input"  # vLLM-Omni's contract
    assert not s.responses


def user_text(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@pytest.mark.asyncio
async def test_out_of_band_response_answers_its_own_input_and_leaves_the_conversation_alone():
    rt = FakeRuntime()
    s = new_session(rt)
    await s.send("conversation.item.create", item=user_text("remember the apples"))
    await until(s, "conversation.item.done")
    await s.send("response.create", response={"conversation": "none", "metadata": {"topic": "classify"},
                                               "input": [user_text("Classify: hello")]})
    events = await until(s, "response.done")
    types = [e.type for e in events]
    assert "Classify: hello" in rt.aura.prompts[-1] and "remember the apples" not in rt.aura.prompts[-1]
    assert not [t for t in types if t.startswith("conversation.")]  # its output is not a conversation item
    assert "response.output_item.added" in types and events[-1]["response"]["metadata"] == {"topic": "classify"}
    assert [p.item.text for p in s.pending] == ["remember the apples"]  # still waiting for the conversation's reply
    assert [i.role for i in s.history.items] == ["user"]
    await s.send("response.create")
    await until(s, "response.done")
    assert "remember the apples" in rt.aura.prompts[-1] and not s.pending
    assert [i.role for i in s.history.items] == ["user", "assistant"]


@pytest.mark.asyncio
async def test_out_of_band_input_refers_to_conversation_items_and_keeps_earlier_items_as_history():
    rt = FakeRuntime()
    s = new_session(rt)
    await s.send("conversation.item.create", item={**user_text("my name is Ada"), "id": "u1"})
    await until(s, "conversation.item.done")
    await s.send("response.create", response={"conversation": "none", "input": [
        {"type": "item_reference", "id": "u1"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello Ada."}]},
        user_text("What is my name?")]})
    await until(s, "response.done")
    prompt = rt.aura.prompts[-1]
    assert prompt.index("my name is Ada") < prompt.index("Hello Ada.") < prompt.index("What is my name?")
    await s.send("response.create", response={"conversation": "none", "input": [
        {"type": "item_reference", "id": "nope"}]})
    error = (await until(s, "error"))[-1]["error"]
    assert (error["code"], error["param"]) == ("item_not_found", "response.input[0].id")
    await s.send("response.create", response={"conversation": "elsewhere"})
    assert (await until(s, "error"))[-1]["error"]["param"] == "response.conversation"


@pytest.mark.asyncio
async def test_every_error_event_is_logged_with_its_code_and_session(caplog):
    s = new_session()
    with caplog.at_level("INFO", logger="aura_omni.session"):
        await s.send({"type": "input_audio_buffer.commit", "event_id": "c7"})
        error = (await until(s, "error"))[-1]["error"]
    assert error["code"] == "input_audio_buffer_commit_empty"  # OpenAI's code in an OpenAI session
    record = next(r for r in caplog.records if "input_audio_buffer_commit_empty" in r.getMessage())
    assert record.levelname == "INFO" and s.id in record.getMessage() and "c7" in record.getMessage()


@pytest.mark.asyncio
@pytest.mark.parametrize("session, beta", [
    ({"modalities": ["audio", "text"], "turn_detection": None}, True),  # the beta flat shape, without its header
    ({"type": "realtime", "audio": {"input": {"turn_detection": None}}}, False),
    ({"instructions": "Be brief.", "voice": "vivian"}, False),  # fields of either shape: GA stays
])
async def test_without_the_beta_header_the_first_session_update_picks_the_dialect(session, beta):
    s = RealtimeSession(FakeRuntime(), FakeBuilder(), model="tiny", beta=None)  # the transport's, without a header
    s.start()
    await s.send("session.update", session=session)
    s.config = dataclasses.replace(s.config, turn_detection=None)
    await s.send("conversation.item.create", item=user_text("hi"))
    await s.send("response.create")
    types = {e.type for e in await until(s, "response.done")}
    assert ("response.audio.delta" in types) == beta and ("response.output_audio.delta" in types) != beta
    await s.send("session.update", session={"modalities": ["text"]})  # settled: a later update changes nothing
    assert s.dialect.name == ("beta" if beta else "ga")


@pytest.mark.asyncio
async def test_the_input_buffer_refuses_audio_past_its_limit_until_a_commit_empties_it():
    class Small(FakeBuilder):
        policy = MediaPolicy(limits=MediaLimits(max_audio_seconds=1.0))

    s = RealtimeSession(FakeRuntime(), Small(), model="tiny")
    s.config = dataclasses.replace(s.config, turn_detection=None)
    s.start()
    for _ in range(4):  # 0.8 s of the 1 s
        await s.send("input_audio_buffer.append", audio=pcm_b64(0.2))
    await s.send("input_audio_buffer.append", audio=pcm_b64(0.4))  # would hold 1.2 s
    events = await until(s, "error")
    assert events[-1]["error"]["code"] == "input_audio_buffer_full"
    await s.send("input_audio_buffer.append", audio=pcm_b64(0.2))  # 1.0 s: still fits
    await s.send("input_audio_buffer.commit", create_response=False)
    await until(s, "input_audio_buffer.committed")
    await s.send("input_audio_buffer.append", audio=pcm_b64(0.8))  # the committed audio no longer counts
    await s.send("session.heartbeat")
    assert not [e for e in await until(s, "session.heartbeat_ack") if e.type == "error"]
