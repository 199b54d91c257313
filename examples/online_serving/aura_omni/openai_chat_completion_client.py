"""Talk to an aura-omni server (ASR -> AURA -> Qwen3-TTS) with the official `openai` package.

    aura-omni serve --omni --deploy-config configs/aura_omni.yaml --served-model-name aurateam/AURA --port 8091
    (or `bash scripts/demo.sh`: the tiny CPU demo answers on the same port and name)
    python openai_chat_completion_client.py --audio-path question.wav --video-path clip.mp4 \\
        --tts-ref-audio me.wav --tts-ref-text "A line I said." --output-dir out/

Saves out/reply.txt (AURA's text; empty when AURA chose silence) and out/reply.wav (24 kHz speech).
Media go inline as base64 data URLs; `--stream` prints text as it arrives and writes the audio
deltas (PCM16 24 kHz) into the same wav.
"""

from __future__ import annotations

import argparse
import base64
import mimetypes
import os
import sys
import wave
from pathlib import Path

from openai import APIConnectionError, APIStatusError, OpenAI

SAMPLE_RATE = 24000  # Code2Wav output


def data_url(path: str, default_type: str) -> str:
    mime = mimetypes.guess_type(path)[0] or default_type
    return f"data:{mime};base64,{base64.b64encode(Path(path).read_bytes()).decode()}"


def reference_audio(value: str) -> str:
    """A local file is sent inline; anything else (data URL, server-allowed path) as given."""
    return data_url(value, "audio/wav") if Path(value).is_file() else value


def build_request(args: argparse.Namespace) -> dict:
    content = []
    if args.audio_path:
        fmt = Path(args.audio_path).suffix.lstrip(".").lower() or "wav"
        content.append({"type": "input_audio", "input_audio": {
            "data": base64.b64encode(Path(args.audio_path).read_bytes()).decode(), "format": fmt}})
    if args.image_path:
        content.append({"type": "image_url", "image_url": {"url": data_url(args.image_path, "image/png")}})
    if args.video_path:
        content.append({"type": "video_url", "video_url": {"url": data_url(args.video_path, "video/mp4")}})
    if args.prompt:
        content.append({"type": "text", "text": args.prompt})
    if not content:
        raise SystemExit("give at least one of --audio-path, --image-path, --video-path, --prompt")

    info = {}
    for key in ("tts_task_type", "tts_speaker", "tts_ref_text", "tts_language"):
        if getattr(args, key) is not None:
            info[key] = getattr(args, key)
    if args.tts_ref_audio:
        info["tts_ref_audio"] = reference_audio(args.tts_ref_audio)
    if args.tts_x_vector_only_mode:
        info["tts_x_vector_only_mode"] = True
    if args.tts_pass_token_ids:
        info["tts_pass_token_ids"] = True
    if args.tts_max_new_tokens:
        info["tts_max_new_tokens"] = args.tts_max_new_tokens

    request = {"model": args.model, "messages": [{"role": "user", "content": content}],
               "modalities": args.modalities, "max_tokens": args.max_tokens,
               "extra_body": {"additional_information": info}}
    if args.system_prompt:
        request["messages"].insert(0, {"role": "system", "content": args.system_prompt})
    if args.seed is not None:
        request["seed"] = args.seed
    if "audio" in args.modalities:
        request["audio"] = {"format": "pcm16" if args.stream else "wav"}  # the voice comes from the tts_* options
        if args.tts_speaker:
            request["audio"]["voice"] = args.tts_speaker
    return request


def write_wav(path: Path, pcm16: bytes) -> None:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SAMPLE_RATE)
        f.writeframes(pcm16)


def run(args: argparse.Namespace) -> int:
    client = OpenAI(base_url=args.base_url, api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    request = build_request(args)
    text, wav_bytes, pcm, silent, transcript = "", None, b"", False, None
    if args.stream:
        stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **request)
        for chunk in stream:
            if not chunk.choices:
                print(f"\n[usage] {chunk.usage}")
                continue
            delta = chunk.choices[0].delta
            extra = delta.model_extra or {}
            transcript = extra.get("input_transcript", transcript)
            silent = silent or bool(extra.get("silent"))
            if delta.content:
                text += delta.content
                print(delta.content, end="", flush=True)
            audio = getattr(delta, "audio", None) or extra.get("audio")  # typed in newer openai clients
            data = audio.get("data") if isinstance(audio, dict) else getattr(audio, "data", None)
            if data:
                pcm += base64.b64decode(data)
        print()
    else:
        completion = client.chat.completions.create(**request)
        message = completion.choices[0].message
        extra = message.model_extra or {}
        text, silent, transcript = message.content or "", bool(extra.get("silent")), extra.get("input_transcript")
        if message.audio is not None:
            wav_bytes = base64.b64decode(message.audio.data)
        print(text)
        print(f"[usage] {completion.usage}")
    if transcript is not None:
        print(f"[heard] {transcript}")
    (out / "reply.txt").write_text(text, encoding="utf-8")
    if silent:
        print("[silent] AURA chose not to answer: no audio")
    elif wav_bytes is not None:
        (out / "reply.wav").write_bytes(wav_bytes)
        print(f"[audio] {out / 'reply.wav'}")
    elif pcm:
        write_wav(out / "reply.wav", pcm)
        print(f"[audio] {out / 'reply.wav'}")
    return 0


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """--help shows each default, except for options that are off or unset by default."""

    def _get_help_string(self, action):
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=DefaultsHelp)
    p.add_argument("--base-url", default="http://127.0.0.1:8091/v1", help="the server (scripts/demo.sh serves here)")
    p.add_argument("--api-key", default=None, help="the server's --api-key (default: $OPENAI_API_KEY, else EMPTY)")
    p.add_argument("--model", default="aurateam/AURA", help="a name the server was started with")
    p.add_argument("--audio-path", help="the user's speech (wav/mp3/flac/ogg)")
    p.add_argument("--image-path")
    p.add_argument("--video-path")
    p.add_argument("--prompt", help="text appended to the user turn")
    p.add_argument("--system-prompt", help="AURA's system prompt (default: the AURA live-video prompt)")
    p.add_argument("--modalities", nargs="+", default=["text", "audio"], choices=["text", "audio"],
                   help="what AURA's reply comes as")
    p.add_argument("--tts-task-type", choices=["Base", "CustomVoice"])
    p.add_argument("--tts-speaker", help="CustomVoice speaker (default Vivian) or a registered voice")
    p.add_argument("--tts-language")
    p.add_argument("--tts-ref-audio", help="Base: reference recording (local file sent inline)")
    p.add_argument("--tts-ref-text", help="Base: transcript of the reference (in-context cloning)")
    p.add_argument("--tts-x-vector-only-mode", action="store_true", help="Base: clone from the speaker embedding only")
    p.add_argument("--tts-pass-token-ids", action="store_true", help="speak AURA's token ids instead of its text")
    p.add_argument("--tts-max-new-tokens", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=256, help="AURA reply length limit")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stream", action="store_true", help="print text and collect audio as they are produced")
    p.add_argument("--output-dir", default="aura_output", help="where reply.txt and reply.wav go")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """`run`, with the server's own words instead of a traceback when it refuses the request."""
    try:
        return run(parse_args(argv))
    except APIStatusError as e:
        error = e.body if isinstance(e.body, dict) else {}
        field = f" ({error['param']})" if error.get("param") else ""
        print(f"the server refused the request with {e.status_code}{field}: {error.get('message') or e.message}",
              file=sys.stderr)
        return 1
    except APIConnectionError as e:
        print(f"cannot reach the server at {e.request.url}: is `aura-omni serve` running?", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
