"""What the tests of stages placed outside the server's process share (Ray actors, processes of its own): waiting for
counters that arrive as last reported, and one push-to-talk turn over the realtime socket."""

from __future__ import annotations

import base64
import time

import numpy as np
import soundfile as sf

from aura_omni.bench.inputs import RECORDED_SPEECH


def wait_until(check, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def receive_until(ws, kind: str) -> list[dict]:
    """Realtime server events up to and including the first of `kind`."""
    events = []
    while not events or events[-1]["type"] != kind:
        events.append(ws.receive_json())
    return events


def push_to_talk_turn(client, model: str, headers: dict, extra_body: dict, frames: list[bytes] = ()) -> list[dict]:
    """The recorded phrase (16 kHz, sent at the session's 24 kHz) with `frames` (JPEG), committed and answered with
    voice `vivian`: every server event from `session.created` to `response.done`."""
    wav, sr = sf.read(RECORDED_SPEECH, dtype="int16")
    append = {"type": "input_audio_buffer.append",
              "audio": base64.b64encode(np.repeat(wav, 24000 // sr).astype("<i2").tobytes()).decode()}
    if frames:
        append["video_frames"] = [base64.b64encode(f).decode() for f in frames]
    with client.websocket_connect(f"/v1/realtime?model={model}", headers=headers) as ws:
        events = receive_until(ws, "session.created")
        ws.send_json({"type": "session.update", "session": {
            "voice": "vivian", "input_audio_format": "pcm16", "turn_detection": None, "extra_body": extra_body}})
        events += receive_until(ws, "session.updated")
        ws.send_json(append)
        ws.send_json({"type": "input_audio_buffer.commit"})
        ws.send_json({"type": "response.create"})
        return events + receive_until(ws, "response.done")
