"""`WS /v1/audio/speech/stream` over a real socket (`websockets`) on the tiny CustomVoice deployment: text streamed
in pieces, audio out sentence by sentence, sticky config, bad input answered with `error` on a socket that stays."""

import asyncio
import io
import json
import time

import httpx
import numpy as np
import pytest
import soundfile as sf
import websockets

from aura_omni.media.encode import pcm16_to_float

FEW = 4  # codec frames per sentence: fast on 2 CPU cores
FRAME = 1920  # samples per 12.5 Hz codec frame
CONFIG = {"type": "session.config", "voice": "vivian", "response_format": "pcm", "max_new_tokens": FEW, "seed": 1}
TIMEOUT_S = 60


def _url(server, query: str = "api_key=test-key") -> str:
    return server.url.replace("http://", "ws://") + "/v1/audio/speech/stream" + (f"?{query}" if query else "")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


async def _send(ws, *events):
    for e in events:
        await ws.send(e if isinstance(e, (str, bytes)) else json.dumps(e))


async def _until(ws, event_type: str) -> list:
    """Messages (dicts for JSON, bytes for audio) up to and including the first of `event_type`."""
    got = []
    while True:
        raw = await ws.recv()
        msg = raw if isinstance(raw, bytes) else json.loads(raw)
        got.append(msg)
        if isinstance(msg, dict) and msg["type"] == event_type:
            return got


async def _error(ws) -> dict:
    msg = json.loads(await ws.recv())
    assert msg["type"] == "error", msg
    assert msg["message"]
    return msg


def _sentences(messages) -> list[tuple[dict, bytes, dict]]:
    """(audio.start, the audio bytes, audio.done) per sentence, checking the framing on the way."""
    out, i = [], 0
    while i < len(messages) and not (isinstance(messages[i], dict) and messages[i]["type"] == "session.done"):
        start = messages[i]
        assert start["type"] == "audio.start", start
        i += 1
        audio = b""
        while isinstance(messages[i], bytes):
            audio += messages[i]
            i += 1
        done = messages[i]
        assert done["type"] == "audio.done" and done["sentence_index"] == start["sentence_index"]
        assert done["total_bytes"] == len(audio) and done["error"] is False
        out.append((start, audio, done))
        i += 1
    return out


def test_text_streamed_in_pieces_is_spoken_sentence_by_sentence(customvoice_server):
    text = "Hello there, this is the first sentence. And here comes the second one, a bit longer! Last words"

    async def go():
        async with websockets.connect(_url(customvoice_server)) as ws:
            await _send(ws, CONFIG, *({"type": "input.text", "text": text[i:i + 7]} for i in range(0, len(text), 7)),
                        {"type": "input.done"})
            return await _until(ws, "session.done")

    messages = run(go())
    sentences = _sentences(messages)
    assert [s[0]["sentence_text"] for s in sentences] == [
        "Hello there, this is the first sentence.", "And here comes the second one, a bit longer!", "Last words"]
    assert [s[0]["sentence_index"] for s in sentences] == [0, 1, 2]
    for start, audio, _ in sentences:
        assert start["utterance_index"] == 0 and start["format"] == "pcm" and start["sample_rate"] == 24000
        wav = pcm16_to_float(audio)
        assert len(audio) % 2 == 0 and 0 < len(wav) <= (FEW + 1) * FRAME and np.abs(wav).max() > 0
    assert messages[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}


def test_config_is_sticky_and_utterances_count_up(customvoice_server):
    async def go():
        async with websockets.connect(_url(customvoice_server)) as ws:
            await _send(ws, {**CONFIG, "response_format": "wav"}, {"type": "input.text", "text": "One utterance."},
                        {"type": "input.done"})
            first = await _until(ws, "session.done")
            await _send(ws, {"type": "input.text", "text": "Another one."}, {"type": "input.done"},
                        {"type": "input.done"})  # an empty utterance is done at once
            second = await _until(ws, "session.done")
            third = await _until(ws, "session.done")
            return first, second, third

    first, second, third = run(go())
    for messages, index in ((first, 0), (second, 1)):
        [(start, audio, _)] = _sentences(messages)
        assert start["utterance_index"] == index and start["format"] == "wav"
        wav, sr = sf.read(io.BytesIO(audio), dtype="float32")  # one whole wav file per sentence
        assert sr == 24000 and len(wav) > 0
    assert third == [{"type": "session.done", "utterance_index": 2, "total_sentences": 0}]


@pytest.mark.parametrize("switch", [{"stream_audio": True}, {"stream_format": "audio"}])  # /v1/audio/speech's name
def test_stream_audio_sends_chunks_as_code2wav_makes_them(customvoice_server, switch):
    async def go():
        async with websockets.connect(_url(customvoice_server)) as ws:
            await _send(ws, {**CONFIG, **switch, "response_format": "wav", "max_new_tokens": 8,
                             "initial_codec_chunk_frames": 1}, {"type": "input.text", "text": "Streamed as made."},
                        {"type": "input.done"})
            return await _until(ws, "session.done")

    messages = run(go())
    chunks = [m for m in messages if isinstance(m, bytes)]
    assert len(chunks) >= 2  # the first after one codec frame, then the rest
    assert chunks[0][:4] == b"RIFF" and not any(c[:4] == b"RIFF" for c in chunks[1:])
    [(_, audio, _)] = _sentences(messages)
    assert len(pcm16_to_float(audio[44:])) > 0


def test_bad_input_gets_an_error_event_and_the_socket_stays_usable(customvoice_server):
    async def go():
        errors = []
        async with websockets.connect(_url(customvoice_server)) as ws:
            for bad in ("not json", b"\x00\x01", json.dumps([1, 2]), {"type": "input.bogus"}, {"no": "type"},
                        {"type": "input.text", "text": 5},
                        {"type": "session.config", "voice": "nobody"},
                        {"type": "session.config", "voice": "vivian", "bogus_field": 1},
                        {"type": "session.config", "voice": "vivian", "response_format": "mp3", "stream_audio": True},
                        {"type": "session.config", "voice": "vivian", "speed": 2.0},
                        {"type": "session.config", "voice": "vivian", "input": "text goes elsewhere"},
                        {"type": "session.config", "voice": "vivian", "model": "other-model"},
                        {"type": "session.config", "voice": "vivian", "stream_format": "sse"}):
                await _send(ws, bad)
                errors.append(await _error(ws))
            await _send(ws, CONFIG, {"type": "input.text", "text": "Buffered, not yet done"},
                        {**CONFIG, "voice": "ryan"})  # config while text is buffered
            errors.append(await _error(ws))
            await _send(ws, {"type": "input.text", "text": "x" * 5000})  # no sentence end within the limit
            errors.append(await _error(ws))
            await _send(ws, {"type": "input.done"})
            return errors, await _until(ws, "session.done")

    errors, messages = run(go())
    codes = [e["code"] for e in errors]
    assert codes[:6] == ["invalid_json", "invalid_event", "invalid_event", "unknown_event_type", "invalid_event",
                         "invalid_value"]
    assert codes[6] == "unknown_speaker" and errors[6]["param"] == "voice"
    assert errors[7]["param"] == "bogus_field"
    assert errors[8]["param"] == "response_format"
    assert errors[9]["param"] == "speed"
    assert errors[10]["param"] == "input"
    assert codes[11] == "model_not_found"
    assert errors[12]["param"] == "stream_format"
    assert codes[13] == "config_while_buffered"
    assert codes[14] == "text_too_long"
    [(start, audio, _)] = _sentences(messages)  # the buffered text is still spoken, with the first config
    assert start["sentence_text"] == "Buffered, not yet done" and len(audio) > 0


def test_session_close_finishes_queued_speech_then_closes(customvoice_server):
    async def go():
        async with websockets.connect(_url(customvoice_server)) as ws:
            await _send(ws, CONFIG, {"type": "input.text", "text": "Spoken before the close."},
                        {"type": "input.done"}, {"type": "session.close"})
            messages = []
            with pytest.raises(websockets.ConnectionClosedOK):
                while True:
                    raw = await ws.recv()
                    messages.append(raw if isinstance(raw, bytes) else json.loads(raw))
            return messages, ws.close_code

    messages, code = run(go())
    assert code == 1000
    assert len(_sentences(messages)) == 1 and messages[-1]["type"] == "session.done"


def test_api_key_by_query_subprotocol_or_header(customvoice_server):
    async def go():
        with pytest.raises(websockets.InvalidStatus) as missing:
            async with websockets.connect(_url(customvoice_server, "")):
                pass
        with pytest.raises(websockets.InvalidStatus) as wrong:
            async with websockets.connect(_url(customvoice_server, "api_key=nope")):
                pass
        async with websockets.connect(_url(customvoice_server, ""),
                                      subprotocols=["realtime", "openai-insecure-api-key.test-key"]) as ws:
            chosen = ws.subprotocol
        async with websockets.connect(_url(customvoice_server, ""),
                                      subprotocols=["openai-insecure-api-key.test-key"]) as ws:
            only_key = ws.subprotocol
        async with websockets.connect(_url(customvoice_server, ""),
                                      additional_headers={"Authorization": "Bearer test-key"}) as ws:
            await _send(ws, {"type": "input.done"})
            done = await _until(ws, "session.done")
        return missing.value.response.status_code, wrong.value.response.status_code, chosen, only_key, done

    missing, wrong, chosen, only_key, done = run(go())
    assert (missing, wrong) == (401, 401)
    assert chosen == "realtime"  # not the key while anything else was offered
    assert only_key == "openai-insecure-api-key.test-key"  # a browser fails a handshake answered with none
    assert done[-1]["total_sentences"] == 0


def test_leaving_mid_sentence_stops_the_talker(customvoice_server):
    async def go():
        async with websockets.connect(_url(customvoice_server)) as ws:
            await _send(ws, {**CONFIG, "stream_audio": True, "max_new_tokens": 256, "initial_codec_chunk_frames": 1},
                        {"type": "input.text", "text": "A long sentence that the client will not wait for."},
                        {"type": "input.done"})
            assert json.loads(await ws.recv())["type"] == "audio.start"
            assert isinstance(await ws.recv(), bytes)  # speaking has begun; now the client goes away

    run(go())
    deadline = time.monotonic() + 2  # the whole sentence takes ~6 s on 2 CPU cores: only a cancel ends it this soon
    while time.monotonic() < deadline:
        talker = httpx.get(customvoice_server.url + "/health").json()["stages"]["talker"]
        if talker["in_flight"] == 0 and talker["running"] == 0 and talker["waiting"] == 0:
            break
        time.sleep(0.1)
    assert talker["in_flight"] == 0 and talker["running"] == 0 and talker["waiting"] == 0, talker
