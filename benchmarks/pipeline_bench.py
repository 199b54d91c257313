"""Voice-turn latency of the whole chain (ASR -> AURA -> Talker -> Code2Wav) and its throughput under load.

    python benchmarks/pipeline_bench.py --layout one      # every stage on GPU 0 (configs/aura_omni.yaml)
    python benchmarks/pipeline_bench.py --layout two      # ASR + AURA on GPU 0, Talker + Code2Wav on GPU 1
    python benchmarks/pipeline_bench.py --deploy DIR/deploy.yaml --layout as-is --device cpu --tiny   # CPU smoke

Full-size architectures with random weights (`--load-format dummy`) from the seed deploy file. A turn is 3 s of
user audio plus two 640x480 camera frames (the realtime shape: the last 2 frames as images). Random weights never
stop on their own, so lengths are fixed: ASR `--asr-tokens`, AURA `--aura-tokens` (ignore_eos), Talker
`--tts-frames`. Base TTS speaks with an x-vector voice. Per concurrency c, c turns start together; reported per
turn: time to transcript, to AURA's first text, to the first audio byte (the voice-turn latency), to the end; and
audio-seconds produced per wall second.
"""

import argparse
import asyncio
import io
import json
import statistics
import time

import numpy as np
import soundfile as sf

from aura_omni.deploy import ASR, AURA, CODE2WAV, TALKER, load_deploy_config
from aura_omni.omni import Omni
from aura_omni.pipeline.turn import AudioChunk, TextDelta, TranscriptReady, TurnDone

LAYOUTS = {"one": {ASR: "0", AURA: "0", TALKER: "0", CODE2WAV: "0"},
           "two": {ASR: "0", AURA: "0", TALKER: "1", CODE2WAV: "1"}}


def wav_bytes(seconds: float, sr: int = 16000, seed: int = 0) -> bytes:
    t = np.arange(int(seconds * sr)) / sr
    x = 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2
    x += 0.02 * np.random.RandomState(seed).randn(t.size)
    buf = io.BytesIO()
    sf.write(buf, x.astype(np.float32), sr, format="WAV")
    return buf.getvalue()


def deploy_for(args):
    deploy = load_deploy_config(args.deploy)
    stages = []
    for s in deploy.stages:
        role = deploy.role_of(s)
        update = {}
        if args.layout in LAYOUTS:
            update["devices"] = LAYOUTS[args.layout][role]
        sp = s.default_sampling_params.model_copy(update={
            ASR: dict(max_tokens=args.asr_tokens, ignore_eos=True),
            AURA: dict(max_tokens=args.aura_tokens, ignore_eos=True, temperature=0.0),
        }.get(role, {}))
        stages.append(s.model_copy(update={**update, "default_sampling_params": sp}))
    return deploy.model_copy(update={"stages": stages})


async def one_turn(omni: Omni, audio: bytes, frames, args, seed: int) -> dict:
    t0 = time.perf_counter()
    marks, samples = {}, 0
    options = dict(tts_x_vector_only_mode=True, tts_ref_audio=wav_bytes(3.0, 24000, seed=99),
                   tts_max_new_tokens=args.tts_frames + 1, seed=seed)
    async for ev in omni.astream(audio=audio, images=frames, **options):
        now = time.perf_counter() - t0
        if isinstance(ev, TranscriptReady):
            marks.setdefault("transcript_ms", now * 1000)
        elif isinstance(ev, TextDelta):
            marks.setdefault("first_text_ms", now * 1000)
        elif isinstance(ev, AudioChunk):
            marks.setdefault("first_audio_ms", now * 1000)
            samples += len(ev.samples)
        elif isinstance(ev, TurnDone):
            marks["done_ms"] = now * 1000
    marks["audio_s"] = samples / 24000
    return marks


def summarise(rows: list[dict], key: str) -> dict:
    vals = sorted(r[key] for r in rows if key in r)
    if not vals:
        return {}
    return {f"{key}_mean": statistics.fmean(vals), f"{key}_p95": vals[min(len(vals) - 1, int(0.95 * len(vals)))]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deploy", default="configs/aura_omni.yaml")
    ap.add_argument("--layout", default="one", choices=["one", "two", "as-is"])
    ap.add_argument("--device", default=None, help="override every stage's device (e.g. cpu)")
    ap.add_argument("--load-format", default="dummy")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--repeats", type=int, default=3, help="turns at concurrency 1")
    ap.add_argument("--asr-tokens", type=int, default=24)
    ap.add_argument("--aura-tokens", type=int, default=32)
    ap.add_argument("--tts-frames", type=int, default=50)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=640)
    args = ap.parse_args()

    deploy = deploy_for(args)
    t = time.perf_counter()
    omni = Omni(deploy, device=args.device, load_format=args.load_format)
    print(json.dumps({"bench": "pipeline_load", "layout": args.layout, "seconds": time.perf_counter() - t}), flush=True)
    rng = np.random.RandomState(0)
    frames = [rng.randint(0, 256, (args.height, args.width, 3), dtype=np.uint8) for _ in range(2)]
    audio = wav_bytes(3.0)

    def run(c: int, seed0: int) -> tuple[list[dict], float]:
        async def many():
            return await asyncio.gather(*(one_turn(omni, audio, frames, args, seed0 + i) for i in range(c)))
        t0 = time.perf_counter()
        rows = asyncio.run_coroutine_threadsafe(many(), omni._loop).result()
        return rows, time.perf_counter() - t0

    run(1, 10_000)  # warm-up: kernels, graphs, allocator
    for c in args.concurrency:
        rows, wall = [], 0.0
        for r in range(args.repeats if c == 1 else 1):
            got, w = run(c, 1000 * c + r * c)
            rows += got
            wall += w
        out = {"bench": "voice_turn", "layout": args.layout, "concurrency": c, "turns": len(rows),
               "audio_s_per_s": sum(r["audio_s"] for r in rows) / wall}
        for key in ("transcript_ms", "first_text_ms", "first_audio_ms", "done_ms"):
            out.update(summarise(rows, key))
        print(json.dumps(out), flush=True)
    omni.close()


if __name__ == "__main__":
    main()
