"""/v1/chat/completions over real HTTP with the official `openai` client, on the tiny four-stage deploys
(ASR -> AURA -> Qwen3-TTS Base or CustomVoice -> Code2Wav).

The servers run uvicorn in a thread of this process (one per deploy, module-scoped) so the tests can
look inside the stages afterwards: the AURA engine's requests and KV blocks, the Talker's cache blocks,
and what each stage was asked to do.
"""

from __future__ import annotations

import asyncio
import base64
import io
import subprocess
import sys
import time
from pathlib import Path

import av
import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from PIL import Image

from aura_omni.media.encode import pcm16_to_float
from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID, TTS_ASSISTANT_PREFIX_IDS, TTS_ASSISTANT_SUFFIX_IDS
from aura_omni.stages.aura.prompt_tokens import AuraPrompt, PromptTurn
from aura_omni.pipeline.stage_api import AuraDelta
from serving import ThreadServer

MODEL = "aura-tiny"
SR = 24000
FEW = 4  # Talker frames per sentence: enough audio to decode, fast on 2 CPU cores
API_KEY = "test-key"  # as conftest.API_KEY
AUTH = {"Authorization": f"Bearer {API_KEY}"}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples/online_serving/aura_omni/openai_chat_completion_client.py"


@pytest.fixture(scope="module")
def base(tiny_dir, media_root):
    server = ThreadServer(tiny_dir / "deploy.yaml", media_root)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def custom_voice(chat_customvoice_deploy):
    server = ThreadServer(chat_customvoice_deploy)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(base):
    return base.client()


def xvector(ref_audio_b64: str, **more) -> dict:
    return {"additional_information": {"tts_ref_audio": ref_audio_b64, "tts_x_vector_only_mode": True,
                                       "tts_max_new_tokens": FEW, **more}}


def audio_part(b64: str) -> dict:
    return {"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}}


def user(*parts) -> list[dict]:
    return [{"role": "user", "content": list(parts)}]


def decode_wav(b64: str) -> tuple[np.ndarray, int]:
    wav, sr = sf.read(io.BytesIO(base64.b64decode(b64)), dtype="float32")
    return wav, sr


def delta_audio(chunk) -> dict:
    """`choices[0].delta.audio` as a dict ({} when absent); newer openai clients type it, older keep extras."""
    if not chunk.choices:
        return {}
    delta = chunk.choices[0].delta
    audio = getattr(delta, "audio", None) or (delta.model_extra or {}).get("audio")
    return audio if isinstance(audio, dict) else (audio.model_dump(exclude_none=True) if audio else {})


class Spy:
    """Records what a stage method was called with, then calls it."""

    def __init__(self, obj, name: str):
        self.obj, self.name, self.calls = obj, name, []
        self.original = getattr(obj, name)
        setattr(obj, name, self)

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.original(*args, **kwargs)

    def restore(self):
        setattr(self.obj, self.name, self.original)


# ---------------------------------------------------------------------------------------------- turns

def test_audio_in_gives_text_and_24khz_wav(client, ref_audio_b64):
    start = time.time()
    resp = client.chat.completions.create(
        model=MODEL, modalities=["text", "audio"], audio={"voice": "ignored-with-ref", "format": "wav"},
        messages=user(audio_part(ref_audio_b64)), max_tokens=6, seed=1, extra_body=xvector(ref_audio_b64))
    msg = resp.choices[0].message
    assert msg.content and msg.model_extra["silent"] is False
    assert isinstance(msg.model_extra["input_transcript"], str)  # what the tiny ASR heard
    assert msg.audio.id.startswith("audio_") and msg.audio.transcript == msg.content
    assert start + 24 * 3600 - 5 <= msg.audio.expires_at <= time.time() + 24 * 3600 + 5
    wav, sr = decode_wav(msg.audio.data)
    assert sr == SR and 0 < len(wav) <= 8 * FEW * 1920  # at most FEW frames per spoken sentence
    assert resp.usage.completion_tokens == 6 and resp.usage.prompt_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_text_only_modality_skips_tts_and_audio_less_request_skips_asr(base, client):
    asr = Spy(base.runtime.pipeline.asr, "transcribe")
    speech = Spy(base.runtime.pipeline.speech, "speak")
    try:
        resp = client.chat.completions.create(model=MODEL, modalities=["text"], messages=user(
            {"type": "text", "text": "hello"}), max_tokens=3)
    finally:
        asr.restore(), speech.restore()
    msg = resp.choices[0].message
    assert msg.audio is None and msg.model_extra["input_transcript"] is None
    assert asr.calls == [] and speech.calls == []


def test_forced_silent_turn_has_no_audio(client, ref_audio_b64):
    for extra in ({"logit_bias": {str(AURA_SILENT_TOKEN_ID): 100}},  # OpenAI field -> AURA stage
                  {"extra_body": {**xvector(ref_audio_b64), "sampling_params_list": [
                      {}, {"logit_bias": {str(AURA_SILENT_TOKEN_ID): 100}}]}}):  # the AURA stage's own entry
        kwargs = {"extra_body": xvector(ref_audio_b64), **extra}
        resp = client.chat.completions.create(model=MODEL, modalities=["text", "audio"], messages=user(
            {"type": "text", "text": "anything?"}), max_tokens=6, **kwargs)
        msg = resp.choices[0].message
        assert msg.content == "" and msg.audio is None and msg.model_extra["silent"] is True
        assert resp.choices[0].finish_reason == "stop" and resp.usage.completion_tokens == 1


def test_system_messages_and_history_reach_the_aura_prompt(base, client):
    aura = Spy(base.runtime.pipeline.aura, "generate")
    try:
        client.chat.completions.create(model=MODEL, modalities=["text"], max_tokens=2, messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": [{"type": "text", "text": "second question"}]}])
        client.chat.completions.create(model=MODEL, modalities=["text"], max_tokens=2, messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            extra_body={"additional_information": {"aura_system_prompt": "Override."}})
    finally:
        aura.restore()
    first, second = (call[0][0] for call in aura.calls)
    assert first == AuraPrompt((PromptTurn("system", "Be brief."), PromptTurn("user", "first question"),
                                PromptTurn("assistant", "first answer"), PromptTurn("user", "second question")))
    assert second.turns[0] == PromptTurn("system", "Override.")


def test_image_and_video_parts_become_aura_vision_inputs(base, client):
    png = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 56, 3), dtype=np.uint8)).save(png, "PNG")
    aura = Spy(base.runtime.pipeline.aura, "generate")
    try:
        resp = client.chat.completions.create(model=MODEL, modalities=["text"], max_tokens=2, messages=user(
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()}},
            {"type": "video_url", "video_url": {"url": "data:video/mp4;base64," + base64.b64encode(tiny_mp4()).decode()}},
            {"type": "text", "text": "what is this?"}))
    finally:
        aura.restore()
    (prompt, vision), _ = aura.calls[0]
    assert [v.kind for v in vision] == ["image", "video"]
    assert prompt.turns[-1] == PromptTurn("user", "what is this?", ("image", "video"))
    assert resp.usage.prompt_tokens > vision[0].num_tokens + vision[1].num_tokens


def tiny_mp4(frames: int = 4, fps: int = 2) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(frames):
            img = np.full((48, 64, 3), 40 * i, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def test_token_id_passthrough_speaks_auras_ids(base, client, ref_audio_b64):
    speech = Spy(base.runtime.pipeline.speech, "speak")
    try:
        resp = client.chat.completions.create(model=MODEL, messages=user({"type": "text", "text": "hi"}),
                                              max_tokens=5, seed=3, extra_body=xvector(ref_audio_b64, tts_pass_token_ids=True))
    finally:
        speech.restore()
    assert len(speech.calls) == 1  # the whole reply at once, as ids
    (text, ids, template), _ = speech.calls[0]
    assert ids[:3] == list(TTS_ASSISTANT_PREFIX_IDS) and ids[-5:] == list(TTS_ASSISTANT_SUFFIX_IDS)
    assert len(ids) == 3 + 5 + 5 and text == resp.choices[0].message.content
    assert decode_wav(resp.choices[0].message.audio.data)[0].size > 0


def test_base_in_context_clone(base, client, ref_audio_b64):
    speech = Spy(base.runtime.pipeline.speech, "speak_stream")  # async_chunk: text streamed in
    try:
        resp = client.chat.completions.create(
            model=MODEL, messages=user({"type": "text", "text": "hi"}), max_tokens=4,
            extra_body={"additional_information": {"tts_ref_audio": "data:audio/wav;base64," + ref_audio_b64,
                                                   "tts_ref_text": "A short reference line.", "tts_max_new_tokens": FEW}})
    finally:
        speech.restore()
    template = speech.calls[0][0][1]
    assert template.task_type == "Base" and not template.voice.x_vector_only and template.voice.ref_codes.shape[0] > 0
    wav, sr = decode_wav(resp.choices[0].message.audio.data)
    assert sr == SR and wav.size > 0


def test_registered_voice_by_openai_audio_voice(base, client, ref_audio_b64):
    r = httpx.post(base.url + "/v1/audio/voices", headers=AUTH,
                   json={"name": "chatvoice", "ref_audio": ref_audio_b64})
    assert r.status_code == 200, r.text
    kwargs = dict(model=MODEL, messages=user({"type": "text", "text": "hi"}), max_tokens=3, seed=2)
    speech = Spy(base.runtime.pipeline.speech, "speak_stream")  # async_chunk: text streamed in
    try:
        resp = client.chat.completions.create(audio={"voice": "chatvoice", "format": "flac"}, extra_body={
            "additional_information": {"tts_max_new_tokens": FEW}}, **kwargs)
        inline = client.chat.completions.create(audio={"voice": "x", "format": "flac"}, extra_body=xvector(
            ref_audio_b64), **kwargs)
    finally:
        speech.restore()
    registered = base.app.state.server.voices.get("chatvoice").prompt
    assert speech.calls[0][0][1].voice is registered  # the registered voice's prompt, not a new clone
    wav, sr = decode_wav(resp.choices[0].message.audio.data)
    assert sr == SR and wav.size > 0
    # registered from the same reference (x-vector only), it speaks exactly as the reference sent inline
    assert np.array_equal(wav, decode_wav(inline.choices[0].message.audio.data)[0])


def test_custom_voice_speaker(custom_voice, ref_audio_b64):
    client = custom_voice.client()
    speech = Spy(custom_voice.runtime.pipeline.speech, "speak_stream")  # async_chunk: text streamed in
    try:
        resp = client.chat.completions.create(
            model=MODEL, messages=user(audio_part(ref_audio_b64)), max_tokens=4, audio={"voice": "serena", "format": "wav"},
            extra_body={"additional_information": {"tts_max_new_tokens": FEW}})
    finally:
        speech.restore()
    assert speech.calls[0][0][1].speaker == "Serena"
    wav, sr = decode_wav(resp.choices[0].message.audio.data)
    assert sr == SR and wav.size > 0
    with pytest.raises(openai.BadRequestError, match="speaker"):
        client.chat.completions.create(model=MODEL, messages=user({"type": "text", "text": "hi"}), max_tokens=2,
                                       extra_body={"additional_information": {"tts_speaker": "nobody"}})
    with pytest.raises(openai.BadRequestError, match="Base"):
        client.chat.completions.create(model=MODEL, messages=user({"type": "text", "text": "hi"}), max_tokens=2,
                                       extra_body={"additional_information": {"tts_task_type": "Base"}})


# ---------------------------------------------------------------------------------------------- streaming

def test_stream_gives_text_and_audio_deltas_before_the_final_chunk(client, ref_audio_b64):
    kwargs = dict(model=MODEL, messages=user(audio_part(ref_audio_b64)), max_tokens=6, seed=5,
                  extra_body=xvector(ref_audio_b64))
    whole = client.chat.completions.create(**kwargs).choices[0].message
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                 audio={"voice": "x", "format": "pcm16"}, **kwargs))
    finals = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason]
    audio = [i for i, c in enumerate(chunks) if c.choices and delta_audio(c).get("data")]
    assert len(finals) == 1 and audio and max(audio) < finals[0]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.content  # same seed, same reply, streamed or not
    pcm = b"".join(base64.b64decode(delta_audio(chunks[i])["data"]) for i in audio)
    assert len(pcm) % 2 == 0 and np.abs(pcm16_to_float(pcm)).max() > 0
    final = delta_audio(chunks[finals[0]])
    assert final["id"].startswith("audio_") and final["expires_at"] > time.time()
    heard = [c.choices[0].delta.model_extra["input_transcript"] for c in chunks
             if c.choices and "input_transcript" in c.choices[0].delta.model_extra]
    assert heard == [whole.model_extra["input_transcript"]]


class SlowTalker:
    """Talker steps at least `pause` s apart (the tiny Talker is otherwise done in milliseconds), with the time each
    codec frame was made, so a test can tell audio sent as it is made from audio sent at the end. It wraps the
    Talker stage's step on its loop thread: the frames go from there to Code2Wav without passing the caller."""

    def __init__(self, tts, pause: float = 0.1):
        self.engine = tts.facades[0].talker_loop.engine
        self.pause, self.times, self.finished = pause, [], 0
        self.original = self.engine.step
        self.engine.step = self.step

    def step(self):
        time.sleep(self.pause)
        outputs = self.original()
        for out in outputs:
            if out.finished:
                self.finished += 1
            elif not isinstance(out.item, BaseException):
                self.times.extend(time.monotonic() for _ in out.item.new_extras)
        return outputs

    def restore(self):
        del self.engine.step


def test_chat_audio_streams_while_the_talker_still_speaks(base, ref_audio_b64):
    slow = SlowTalker(base.runtime.tts)
    body = {"model": MODEL, "stream": True, "messages": user({"type": "text", "text": "hi"}), "max_tokens": 3,
            "seed": 1, "audio": {"voice": "x", "format": "pcm16"}, **xvector(ref_audio_b64, tts_max_new_tokens=12)}
    first_audio = None
    try:
        with httpx.stream("POST", base.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60) as r:
            for line in r.iter_lines():
                if first_audio is None and line.startswith("data: {") and '"data"' in line:
                    first_audio = (time.monotonic(), len(slow.times))
            done = time.monotonic()
    finally:
        slow.restore()
    assert first_audio is not None and len(slow.times) >= 4
    arrived, frames_made = first_audio
    # the first audio left after the first frame (the deploy's initial_codec_chunk_frames: 1), long before the end
    assert frames_made < len(slow.times) and done - arrived >= slow.pause * (len(slow.times) - frames_made - 1)


class SlowAura:
    """AURA replying with scripted words, one every `pause` s (the tiny AURA is done in milliseconds and its random
    text has no reliable words), with the time of each."""

    WORDS = ["Hello", " there", ",", " this", " reply", " comes", " slowly", " word", " by", " word", "."]

    def __init__(self, pipeline, pause: float = 0.15):
        self.pipeline, self.pause, self.times = pipeline, pause, []
        self.original, pipeline.aura = pipeline.aura, self

    async def generate(self, prompt, vision, *, request_id, sampling=None):
        for i, word in enumerate(self.WORDS):
            await asyncio.sleep(self.pause)
            self.times.append(time.monotonic())
            yield AuraDelta(word, [9000 + i], finished=i == len(self.WORDS) - 1, prompt_tokens=5)

    def restore(self):
        self.pipeline.aura = self.original


def test_chat_audio_starts_before_auras_reply_ends(base, ref_audio_b64):
    """async_chunk streams AURA's text into one Talker request: it speaks after the first word, not a sentence."""
    aura = SlowAura(base.runtime.pipeline)
    feeds = Spy(base.runtime.tts, "feed_text")
    body = {"model": MODEL, "stream": True, "messages": user({"type": "text", "text": "hi"}), "max_tokens": 20,
            "audio": {"voice": "x", "format": "pcm16"}, **xvector(ref_audio_b64, tts_max_new_tokens=40)}
    first_audio = None
    try:
        with httpx.stream("POST", base.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60) as r:
            for line in r.iter_lines():
                if first_audio is None and line.startswith("data: {") and '"data"' in line:
                    first_audio = time.monotonic()
    finally:
        aura.restore()
        feeds.restore()
    assert first_audio is not None and len(aura.times) == len(SlowAura.WORDS)
    assert first_audio < aura.times[-1] - 3 * aura.pause  # heard while AURA still had words to say
    request_ids = {args[0] for args, _ in feeds.calls}
    assert len(request_ids) == 1 and len(feeds.calls) >= 4  # one Talker request, its text fed as it came
    assert feeds.calls[-1][1] == {"end": True}  # the text ended with the reply


def test_speech_audio_streams_while_the_talker_still_speaks(base, ref_audio_b64):
    slow = SlowTalker(base.runtime.tts)
    body = {"model": MODEL, "input": "Stream me.", "voice": "x", "response_format": "pcm", "stream_format": "audio",
            "ref_audio": ref_audio_b64, "x_vector_only_mode": True, "max_new_tokens": 12, "seed": 2,
            "initial_codec_chunk_frames": 1}
    arrivals = []
    try:
        with httpx.stream("POST", base.url + "/v1/audio/speech", json=body, headers=AUTH, timeout=60) as r:
            for chunk in r.iter_bytes():
                if chunk:
                    arrivals.append((time.monotonic(), len(slow.times)))
            done = time.monotonic()
    finally:
        slow.restore()
    assert len(slow.times) >= 4 and len(arrivals) >= 2
    arrived, frames_made = arrivals[0]
    assert frames_made < len(slow.times) and done - arrived >= slow.pause * (len(slow.times) - frames_made - 1)


def test_stream_silent_turn_says_so(client, ref_audio_b64):
    chunks = list(client.chat.completions.create(
        model=MODEL, stream=True, messages=user({"type": "text", "text": "hm"}), max_tokens=4,
        logit_bias={str(AURA_SILENT_TOKEN_ID): 100}, extra_body=xvector(ref_audio_b64)))
    assert not any(delta_audio(c).get("data") for c in chunks if c.choices)
    assert chunks[-1].choices[0].delta.model_extra.get("silent") is True
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stream_wav_chunks_when_asked(client, ref_audio_b64):
    chunks = list(client.chat.completions.create(
        model=MODEL, stream=True, audio={"voice": "x", "format": "wav"}, messages=user({"type": "text", "text": "hi"}),
        max_tokens=4, extra_body=xvector(ref_audio_b64)))
    data = b"".join(base64.b64decode(delta_audio(c)["data"]) for c in chunks if delta_audio(c).get("data"))
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE" and int.from_bytes(data[24:28], "little") == SR


def test_client_disconnect_mid_stream_frees_every_stage(base, ref_audio_b64):
    aura = base.runtime.pipeline.aura

    def talker_idle() -> bool:  # no Talker sequence left, every KV block back
        t = base.runtime.tts.stats()
        return t["running"] == 0 and t["free_blocks"] == t["total_blocks"]

    start_free = aura.stats()["free_blocks"]
    aborts = Spy(aura.engine, "abort")
    talker = SlowTalker(base.runtime.tts, pause=0.0)  # counts the Talker frames this turn produced
    body = {"model": MODEL, "stream": True, "messages": user({"type": "text", "text": "talk for a while"}),
            "max_tokens": 400, "ignore_eos": True, "seed": 7,
            "additional_information": {"tts_ref_audio": ref_audio_b64, "tts_x_vector_only_mode": True,
                                       "tts_max_new_tokens": 256}}
    try:
        with httpx.stream("POST", base.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60) as r:
            assert r.status_code == 200
            for line in r.iter_lines():  # leave as soon as audio flows: AURA and the Talker are both busy
                if line.startswith("data: {") and '"data"' in line:
                    break
    finally:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stats = aura.stats()
            if (stats["running"] == stats["waiting"] == 0 and stats["free_blocks"] == start_free
                    and talker_idle() and not stats["in_flight"]):
                break
            time.sleep(0.05)
        aborts.restore()
        talker.restore()
    stats = aura.stats()
    assert stats["running"] == 0 and stats["waiting"] == 0 and not aura.engine.has_unfinished()
    assert stats["free_blocks"] == start_free
    assert talker_idle()  # the Talker holds no sequence
    assert [a[0][0] for a in aborts.calls if a[0][0].endswith("-aura")], "AURA was not cancelled mid-reply"
    assert 0 < len(talker.times) < 100, "the Talker was not cancelled mid-sentence"  # it may speak up to 256 frames


# ---------------------------------------------------------------------------------------------- errors

def test_non_streaming_speech_stops_when_its_client_leaves(base, ref_audio_b64):
    tts = base.runtime.tts
    slow = SlowTalker(tts)  # 10 frames/s: the longest (256-frame) utterance would take 25 s
    body = {"model": MODEL, "input": "say this slowly", "voice": "x", "response_format": "wav", "seed": 3,
            "max_new_tokens": 256, "ref_audio": ref_audio_b64, "x_vector_only_mode": True}
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(base.url + "/v1/audio/speech", headers=AUTH, json=body, timeout=1.0)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (slow.times and tts.stats()["running"] == 0):
            time.sleep(0.05)
    finally:
        slow.restore()
    talker = tts.stats()
    assert slow.times and slow.finished == 0, "the Talker was not stopped mid-utterance"
    assert len(slow.times) < 100 and talker["running"] == 0 and talker["free_blocks"] == talker["total_blocks"]
    health = httpx.get(base.url + "/health").json()
    assert health["stages"]["talker"]["running"] == 0


def test_non_streaming_turn_stops_when_its_client_leaves(base, ref_audio_b64):
    aura = base.runtime.pipeline.aura
    start_free = aura.engine.stats()["free_blocks"]
    body = {"model": MODEL, "messages": user({"type": "text", "text": "talk for a long time"}), "max_tokens": 400,
            "ignore_eos": True, "additional_information": {"tts_ref_audio": ref_audio_b64, "tts_x_vector_only_mode": True,
                                                           "tts_max_new_tokens": 256}}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up long before 400 tokens and 400 frames are done
        httpx.post(base.url + "/v1/chat/completions", headers=AUTH, json=body, timeout=1.0)
    left = time.monotonic()
    while time.monotonic() - left < 5:
        stats, talker = aura.engine.stats(), base.runtime.tts.stats()
        if (stats["running"] == stats["waiting"] == 0 and stats["free_blocks"] == start_free
                and talker["running"] == 0 and talker["free_blocks"] == talker["total_blocks"]):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"stages still busy 5 s after the client left: {aura.engine.stats()} {base.runtime.tts.stats()}")


def test_only_played_audio_may_wait_to_share_a_code2wav_step(base, client, ref_audio_b64):
    """Code2Wav's batch wait (codec_batch_wait_ms) holds a later window while the audio already sent plays; a whole
    file or a reply that is not streamed is not played as it comes, so its windows never wait: each wait would be its
    client's."""
    tts = base.runtime.tts.facades[0]
    sessions, original = [], tts._code2wav_session
    tts._code2wav_session = lambda req: sessions.append(s := original(req)) or s
    speech = {"model": MODEL, "input": "A file.", "voice": "x", "ref_audio": ref_audio_b64, "x_vector_only_mode": True,
              "max_new_tokens": 4}
    chat = {"model": MODEL, "messages": user({"type": "text", "text": "hi"}), "max_tokens": 3, "seed": 1,
            "audio": {"voice": "x", "format": "pcm16"}, **xvector(ref_audio_b64, tts_max_new_tokens=4)}
    try:
        for stream in (False, True):
            r = httpx.post(base.url + "/v1/audio/speech", headers=AUTH, timeout=60,
                           json=speech | ({"stream_format": "audio", "response_format": "pcm"} if stream else {}))
            assert r.status_code == 200
            r = httpx.post(base.url + "/v1/chat/completions", headers=AUTH, timeout=60, json=chat | {"stream": stream})
            assert r.status_code == 200
    finally:
        del tts._code2wav_session
    assert [s.may_wait for s in sessions] == [False, False, True, True]


def test_turn_past_the_timeout_is_504_and_cancelled(base, ref_audio_b64):
    pipeline, aura = base.runtime.pipeline, base.runtime.pipeline.aura
    start_free = aura.engine.stats()["free_blocks"]
    pipeline.default_timeout_s = 0.3  # what `serve --request-timeout 0.3` sets
    slow = SlowTalker(base.runtime.tts, pause=0.02)  # 256 frames take 5 s: the tiny models could end inside 0.3 s
    try:
        r = httpx.post(base.url + "/v1/chat/completions", headers=AUTH, timeout=60, json={
            "model": MODEL, "messages": user({"type": "text", "text": "talk for a long time"}), "max_tokens": 400,
            "ignore_eos": True, "additional_information": {"tts_ref_audio": ref_audio_b64,
                                                           "tts_x_vector_only_mode": True, "tts_max_new_tokens": 256}})
    finally:
        pipeline.default_timeout_s = 300.0
        slow.restore()
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
    deadline = time.monotonic() + 30
    while aura.engine.stats()["free_blocks"] != start_free and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = aura.engine.stats()
    assert stats["running"] == stats["waiting"] == 0 and stats["free_blocks"] == start_free
    assert httpx.get(base.url + "/health", timeout=10).status_code == 200


def test_base_without_reference_is_refused_at_once(base, client):
    aura = Spy(base.runtime.pipeline.aura, "generate")
    try:
        start = time.monotonic()
        with pytest.raises(openai.BadRequestError, match="reference") as err:
            client.chat.completions.create(model=MODEL, messages=user({"type": "text", "text": "hi"}), max_tokens=4)
        assert time.monotonic() - start < 1.0
    finally:
        aura.restore()
    assert err.value.body["type"] == "invalid_request_error" and aura.calls == []


@pytest.mark.parametrize("part,match", [
    (audio_part("not base64!!"), "base64"),
    (audio_part("/etc/passwd"), "base64"),  # input_audio.data is base64 only: never read as a server path
    (audio_part(base64.b64encode(b"RIFF....not audio").decode()), "decode audio"),
    ({"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}}, "not allowed"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"\x89PNG garbage").decode()}},
     "image"),
    ({"type": "video_url", "video_url": {"url": "data:video/mp4;base64," + base64.b64encode(b"no video here").decode()}},
     "video"),
    ({"type": "image_url", "image_url": {"url": "/etc/passwd"}}, "outside the allowed media folder"),
])
def test_bad_media_is_400_before_any_stage_runs(base, client, part, match):
    aura = Spy(base.runtime.pipeline.aura, "generate")
    try:
        with pytest.raises(openai.BadRequestError, match=match) as err:
            client.chat.completions.create(model=MODEL, modalities=["text"], messages=user(part), max_tokens=2)
    finally:
        aura.restore()
    assert aura.calls == []
    body = err.value.body
    assert body["param"] == f"messages[0].content[0].{part['type']}"  # the part at fault, by its place
    assert body["message"].startswith(body["param"] + ": ") and " object at 0x" not in body["message"]


def test_a_text_file_sent_as_audio_is_explained_in_words(client):
    text_file = base64.b64encode(b"Dear diary, today I sent a text file as audio.\n" * 20).decode()
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, modalities=["text"], messages=user(audio_part(text_file)))
    message = err.value.body["message"]
    assert message == ("messages[0].content[0].input_audio: cannot decode audio (Format not recognised); "
                       "send a wav, flac, ogg, mp3, m4a, aac or webm file")  # m4a, aac, webm: PyAV, installed


@pytest.mark.parametrize("extra, param, words", [
    ({"additional_information": {"tts_refaudio": "x"}}, "additional_information.tts_refaudio", "unknown field"),
    ({"additional_information": {"tts_max_new_tokens": 100000000, "tts_ref_audio": "REF",
                                 "tts_x_vector_only_mode": True}},
     "additional_information.tts_max_new_tokens", "at most 256"),  # the deploy's Talker cap, as on /v1/audio/speech
    ({"sampling_params_list": [{}, {}, {"max_tokens": 100000}]}, "sampling_params_list[2].max_tokens", "at most 256"),
    ({"max_tokens": 100000}, "max_tokens", "at most 4096"),  # the server's AURA cap
    ({"sampling_params_list": [{"max_tokens": 100000}]}, "sampling_params_list[0].max_tokens", "at most 1024"),
])
def test_limits_and_misspelt_options_are_400s_naming_the_field(base, client, ref_audio_b64, extra, param, words):
    info = extra.get("additional_information", {})
    extra = {**extra, "additional_information": {k: ref_audio_b64 if v == "REF" else v for k, v in info.items()}
             or xvector(ref_audio_b64)["additional_information"]}
    aura = Spy(base.runtime.pipeline.aura, "generate")
    try:
        start = time.monotonic()
        with pytest.raises(openai.BadRequestError, match=words) as err:
            client.chat.completions.create(model=MODEL, messages=user({"type": "text", "text": "hi"}),
                                           extra_body=extra)
        assert time.monotonic() - start < 2.0
    finally:
        aura.restore()
    assert err.value.body["param"] == param and aura.calls == []


def test_slash_leading_bare_base64_is_media_and_image_counts_are_capped(base, client):
    jpeg, mp3 = io.BytesIO(), io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(jpeg, "JPEG")
    sf.write(mp3, np.zeros(8000, np.float32), 16000, format="MP3")  # no ID3 tag: starts with a 0xFF frame sync
    image = {"type": "image_url", "image_url": {"url": base64.b64encode(jpeg.getvalue()).decode()}}
    audio = audio_part(base64.b64encode(mp3.getvalue()).decode())
    assert image["image_url"]["url"].startswith("/9j/") and audio["input_audio"]["data"].startswith("//")
    aura = Spy(base.runtime.pipeline.aura, "generate")
    try:
        client.chat.completions.create(model=MODEL, modalities=["text"], max_tokens=1, messages=user(image, audio))
        with pytest.raises(openai.BadRequestError, match="17 images; at most 16"):
            client.chat.completions.create(model=MODEL, modalities=["text"], max_tokens=1, messages=user(*[image] * 17))
    finally:
        aura.restore()
    assert len(aura.calls) == 1 and [v.kind for v in aura.calls[0][0][1]] == ["image"]


@pytest.mark.parametrize("extra,match", [
    ({"extra_body": {"sampling_params_list": [{}, {}, {}, {}, {}]}}, "5 entries"),
    ({"extra_body": {"sampling_params_list": [{}, {"temprature": 1}]}}, "sampling_params_list"),
    ({"logit_bias": {"999999999": 5}}, "vocabulary"),
    ({"extra_body": {"top_k": -5}}, "top_k"),
    ({"n": 2}, "n"),
    ({"audio": {"voice": "x", "format": "aac"}, "modalities": ["text", "audio"], "stream": True}, "streamed"),
    ({"extra_body": {"unknown_field": 1}}, "unknown field"),
    # values that would otherwise fail inside a shared engine step (and fail every request in it)
    ({"seed": 2**64}, "seed"),
    ({"extra_body": {"sampling_params_list": [{"seed": 2**64}]}}, "seed"),
    ({"extra_body": {"sampling_params_list": [{}, {}, {"top_k": 2**63}]}}, "top_k"),
    ({"extra_body": {"top_k": 2**63}}, "top_k"),
    ({"extra_body": {"sampling_params_list": [{}, {}, {"temperature": 1e39}]}}, "temperature"),  # NaN in float32
    ({"logit_bias": {"abc": 1}}, "not a token id"),
])
def test_bad_options_are_400(client, extra, match):
    with pytest.raises(openai.BadRequestError, match=match):
        client.chat.completions.create(model=MODEL, messages=user({"type": "text", "text": "hi"}), max_tokens=2,
                                       **({"modalities": ["text"]} | extra))


def test_bad_messages_are_400(client):
    with pytest.raises(openai.BadRequestError, match="last message"):
        client.chat.completions.create(model=MODEL, modalities=["text"], messages=[
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    with pytest.raises(openai.BadRequestError, match="empty"):
        client.chat.completions.create(model=MODEL, modalities=["text"], messages=user({"type": "text", "text": " "}))
    with pytest.raises(openai.BadRequestError, match="audio id"):
        client.chat.completions.create(model=MODEL, modalities=["text"], messages=[
            {"role": "assistant", "audio": {"id": "audio_nope"}}, {"role": "user", "content": "hi"}])


def test_models_lists_the_served_name_and_other_models_are_404(client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o-audio-preview", messages=user({"type": "text", "text": "hi"}))


# ---------------------------------------------------------------------------------------------- example client

def test_example_client_saves_text_and_wav(base, tmp_path, ref_wav_bytes):
    ref = tmp_path / "ref.wav"
    ref.write_bytes(ref_wav_bytes)
    for flags, out in (([], tmp_path / "plain"), (["--stream"], tmp_path / "streamed")):
        run = subprocess.run(
            [sys.executable, str(EXAMPLE), "--base-url", base.url + "/v1", "--api-key", API_KEY, "--model", MODEL,
             "--audio-path", str(ref), "--prompt", "and this text", "--tts-ref-audio", str(ref),
             "--tts-x-vector-only-mode", "--tts-max-new-tokens", str(FEW), "--max-tokens", "4", "--seed", "1",
             "--output-dir", str(out), *flags], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        wav, sr = sf.read(out / "reply.wav", dtype="float32")
        assert sr == SR and wav.size > 0 and (out / "reply.txt").read_text()


def test_text_over_the_limit_is_refused_and_history_counts(client):
    history = [{"role": "user", "content": "x" * 20000}, {"role": "assistant", "content": "y" * 20000}]
    with pytest.raises(openai.BadRequestError, match="40002 characters; at most 32768") as err:
        client.chat.completions.create(model=MODEL, modalities=["text"], max_tokens=1,
                                       messages=history + [{"role": "user", "content": "hi"}])
    assert err.value.body["param"] == "messages" and err.value.body["code"] == "limit_exceeded"


def test_example_client_prints_the_servers_message_on_a_400(base, tmp_path):
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--base-url", base.url + "/v1", "--api-key", API_KEY, "--model", MODEL,
         "--prompt", "hi", "--max-tokens", "100000", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip() == ("the server refused the request with 400 (max_tokens): max_tokens: at most 4096 "
                                  "for this server (got 100000); send a smaller value")


def test_health_after_all_bad_inputs(base):
    r = httpx.get(base.url + "/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert base.runtime.pipeline.aura.engine.stats()["running"] == 0


# ---------------------------------------------------------------------------------------------- offline API

def test_offline_omni_generate_and_stream(tiny_dir, tmp_path, ref_wav_bytes):
    from aura_omni import Omni

    ref = tmp_path / "ref.wav"
    ref.write_bytes(ref_wav_bytes)
    with Omni(deploy_config=tiny_dir / "deploy.yaml", device="cpu") as omni:
        tts = omni.runtime.tts
        assert tts.code2wav_loop.engine.batch_wait_s == 0.25  # the deploy's default reached the stage
        sessions, original = [], tts._code2wav_session
        tts._code2wav_session = lambda req: sessions.append(s := original(req)) or s
        spoken = omni.generate(audio=str(ref), text="and this", tts_ref_audio=str(ref), tts_x_vector_only_mode=True,
                               tts_max_new_tokens=FEW, max_tokens=4, seed=2)
        streamed = list(omni.stream(text="and this", tts_ref_audio=str(ref), tts_x_vector_only_mode=True,
                                    tts_max_new_tokens=FEW, max_tokens=4, seed=2))
        del tts._code2wav_session
        assert [s.may_wait for s in sessions] == [False, True]  # taken whole, or played as it comes
        assert any(type(e).__name__ == "AudioChunk" for e in streamed)
        assert spoken.text and not spoken.silent and isinstance(spoken.transcript, str)
        assert spoken.audio.dtype == np.float32 and spoken.audio.size > 0 and spoken.sample_rate == SR
        silent = omni.generate(text="hm", speak=False, logit_bias={AURA_SILENT_TOKEN_ID: 100}, max_tokens=4)
        assert silent.silent and silent.text == "" and silent.audio is None
        image = np.random.default_rng(1).integers(0, 255, (32, 32, 3), dtype=np.uint8)
        kinds = [type(e).__name__ for e in omni.stream(images=[image], text="what?", speak=False, max_tokens=3)]
        assert kinds[0] == "TextDelta" and kinds[-1] == "TurnDone" and "TranscriptReady" not in kinds
        with pytest.raises(ValueError, match="reference"):  # Base without a reference, as over HTTP
            omni.generate(text="hi", max_tokens=2)
        with pytest.raises(ValueError, match="tts_refaudio: unknown option") as err:  # typed, as over HTTP
            omni.generate(text="hi", max_tokens=2, tts_refaudio=str(ref))
        assert err.value.param == "additional_information.tts_refaudio"
        with pytest.raises(ValueError, match="at most 256"):  # the deploy's Talker cap, as over HTTP
            omni.generate(text="hi", tts_ref_audio=str(ref), tts_x_vector_only_mode=True, tts_max_new_tokens=10**8)
