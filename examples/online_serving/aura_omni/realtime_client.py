"""Push-to-talk with an aura-omni server over WS /v1/realtime: a wav file (and images or a video) in, a reply wav out.

    bash scripts/demo.sh                      # or: aura-omni serve --omni --deploy-config configs/aura_omni.yaml
    python realtime_client.py --audio question.wav --image desk.jpg --output reply.wav
    python realtime_client.py --audio question.wav --video clip.mp4 --duplex

The wav is streamed as 200 ms appends of 16 kHz PCM16, with camera frames riding on the appends (`video_frames`,
one per second of audio, as the aura-ptt web client sends them), then committed with `create_response: true`.
Every server event is printed on a timeline (deltas counted, not printed). AURA may choose to stay silent:
the server then answers `response.listen` and no wav is written. Needs `websockets` and `numpy` (`av` for --video).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import sys
import time
import wave
from collections import Counter
from pathlib import Path

import numpy as np
import websockets

INPUT_RATE = 16000  # what we send (the server also takes 24 kHz)
OUTPUT_RATE = 24000  # Code2Wav output
APPEND_MS = 200  # aura-ptt: one append every 200 ms


def read_wav(path: str) -> np.ndarray:
    """A PCM16 wav -> float32 mono at 16 kHz (linear resampling is enough for a demo)."""
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            raise SystemExit(f"{path}: only 16-bit PCM wav files are supported")
        rate, channels = w.getframerate(), w.getnchannels()
        audio = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0
    audio = audio.reshape(-1, channels).mean(axis=1)
    if rate != INPUT_RATE:
        n = int(len(audio) * INPUT_RATE / rate)
        audio = np.interp(np.arange(n) * rate / INPUT_RATE, np.arange(len(audio)), audio).astype(np.float32)
    return audio


def image_b64(path: str) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode()


def video_frames_b64(path: str, fps: float) -> list[str]:
    """JPEG frames of a video file at `fps` (PyAV + Pillow)."""
    import av

    frames, next_t = [], 0.0
    with av.open(path) as container:
        for frame in container.decode(video=0):
            t = float(frame.time or 0.0)
            if t + 1e-6 >= next_t:
                buf = io.BytesIO()
                frame.to_image().save(buf, "JPEG", quality=70)
                frames.append(base64.b64encode(buf.getvalue()).decode())
                next_t = t + 1.0 / fps
    return frames


def describe(event: dict) -> str:
    kind = event["type"]
    if kind == "error":
        error = event["error"]  # handshake errors are flat: {"error": "<text>", "code": ...}
        return f"{event.get('code')}: {error}" if isinstance(error, str) else f"{error.get('code')}: {error.get('message')}"
    if kind == "conversation.item.input_audio_transcription.completed":
        return repr(event.get("transcript"))
    if kind in ("response.output_audio_transcript.done", "response.output_text.done"):
        return repr(event.get("transcript", event.get("text")))
    if kind == "response.done":
        r = event["response"]
        return f"status={r['status']} usage={r.get('usage')}"
    if kind in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"):
        return f"{event.get('audio_start_ms', event.get('audio_end_ms'))} ms"
    return ""


async def run(args: argparse.Namespace) -> int:
    query = "?duplex=1" if args.duplex else ""
    if args.model:
        query += ("&" if query else "?") + f"model={args.model}"
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    audio = read_wav(args.audio)
    frames = [image_b64(p) for p in args.image]
    if args.video:
        frames += video_frames_b64(args.video, args.fps)
    session = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": INPUT_RATE}, "turn_detection": None},
                         "output": {"voice": args.voice}}}
    if args.instructions:
        session["instructions"] = args.instructions
    if args.extra_body:
        session["extra_body"] = json.loads(args.extra_body)
    t0 = time.monotonic()
    deltas: Counter = Counter()
    pcm = bytearray()

    def show(event: dict) -> None:
        kind = event["type"]
        if kind.endswith(".delta"):
            deltas[kind] += 1
            if deltas[kind] > 1:
                return
        print(f"{(time.monotonic() - t0) * 1000:8.0f} ms  {kind:58s} {describe(event)}")

    async with websockets.connect(args.url.rstrip("/") + "/v1/realtime" + query, additional_headers=headers,
                                  max_size=None) as ws:
        async def send(kind: str, **fields) -> None:
            await ws.send(json.dumps({"type": kind, **fields}))

        async def until(*kinds: str) -> dict:
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), args.timeout))
                show(event)
                if event["type"] == "response.output_audio.delta":
                    pcm.extend(base64.b64decode(event["delta"]))
                if event["type"] in kinds:
                    return event

        await send("session.update", session=session)
        if (await until("session.updated", "error"))["type"] == "error":
            return 1
        step = INPUT_RATE * APPEND_MS // 1000
        chunks = range(0, len(audio), step)
        every = max(1, len(chunks) // max(1, len(frames))) if frames else 0
        for k, start in enumerate(chunks):
            append = {"audio": base64.b64encode((audio[start:start + step] * 32767).astype("<i2").tobytes()).decode(),
                      "format": "pcm16", "sample_rate_hz": INPUT_RATE, "is_speech": True}
            if frames and k % every == 0 and k // every < len(frames):
                append["video_frames"] = [frames[k // every]]
            await send("input_audio_buffer.append", **append)
        await send("input_audio_buffer.commit", create_response=True)
        done = await until("response.done")
        response = done["response"]
        if args.duplex and pcm:  # the whole reply counts as heard in AURA's history
            played = len(pcm) // 2 * 1000 // OUTPUT_RATE
            await send("playback.ack", response_id=response["id"], item_id=f"item_{response['id']}",
                       played_ms=played, committed_ms=played)
            await until("playback.acknowledged")
        await send("session.close")
        await until("session.closed")
    print("deltas: " + ", ".join(f"{k} x{n}" for k, n in sorted(deltas.items())))
    if pcm:
        with wave.open(args.output, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(OUTPUT_RATE)
            w.writeframes(bytes(pcm))
        print(f"saved {len(pcm) / 2 / OUTPUT_RATE:.2f} s of reply audio to {args.output}")
    elif response["status"] == "completed":
        print("AURA stayed silent (response.listen): no audio")
    return 0 if response["status"] == "completed" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--url", default="ws://127.0.0.1:8091",
                        help="server base URL (ws:// or wss://; default: where scripts/demo.sh serves)")
    parser.add_argument("--model", default=None, help="model name to send (default: the server's served name)")
    parser.add_argument("--api-key", default=os.environ.get("AURA_OMNI_API_KEY"),
                        help="API key (default: $AURA_OMNI_API_KEY)")
    parser.add_argument("--audio", required=True, help="16-bit PCM wav with the user's question")
    parser.add_argument("--image", action="append", default=[], help="camera frame (JPEG/PNG); repeatable")
    parser.add_argument("--video", default=None, help="video file whose frames ride on the appends")
    parser.add_argument("--fps", type=float, default=1.0, help="frames per second taken from --video")
    parser.add_argument("--voice", default="vivian", help="CustomVoice speaker or registered voice")
    parser.add_argument("--instructions", default=None, help="AURA's system prompt (default: the server's)")
    parser.add_argument("--extra-body", default=None,
                        help='JSON: additional_information keys and sampling_params_list, e.g. \'{"tts_speaker": "Ryan"}\'')
    parser.add_argument("--duplex", action="store_true", help="speak vLLM-Omni's duplex dialect (?duplex=1)")
    parser.add_argument("--output", default="reply.wav", help="where the reply audio is saved")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for any one event")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
