"""Qwen3-TTS speed: aura-omni vs the reference package qwen-tts 0.1.1, same checkpoint, device, text and lengths.

    python benchmarks/tts_bench.py --tiny                # CPU: tiny checkpoints, reference from .venv-qwen-tts
    python benchmarks/tts_bench.py --reference-pythonpath /tmp/ref_site   # H200: full-size 1.7B, bf16, ~4 min
    python benchmarks/tts_bench.py --num-layers 1 --frames 4 --concurrency 1,2 --reference-batches 1,2
                                                         # CPU check of the full-size layout (full widths, 1 layer)

Checkpoints: a full-size random checkpoint in the real layout (config.json of presets/Qwen__Qwen3-TTS-12Hz-1.7B-*,
model.safetensors with the real key names in bf16 from our modules after `init_dummy`, tokenizer files,
speech_tokenizer/ with the full-size fp32 codec) is written once into --workdir; both implementations load it.
Random weights rarely sample EOS, so every request runs to `max_new_tokens` = --frames + 1 (N tokens give
N-1 frames, as in qwen-tts) with the sampling defaults of generation_config.json and fixed seeds.

Modes: CustomVoice (speaker Vivian), Base x-vector, Base ICL with a 3 s reference (noise; the voice prompt is
built once per mode and timed apart: "voice_prompt" rows).
- ours: TTFA (request -> first 24 kHz chunk) with initial_chunk_frames 1 and 2 through `Qwen3TTS.stream`
  (median of --ttfa-repeats); a whole stream at concurrency 1 (RTF = wall / audio seconds); at concurrency
  c > 1 throughput (audio seconds per second) and mean/p95 TTFA, served as c threads each consuming its own
  stream() ("serve": "streams") when the facade batches concurrent streams (a TalkerEngine), else as one
  static batch through `Qwen3TTS.iter_frames` with a streaming Code2Wav decoder per request
  ("serve": "static_batch"; a lock-serialised facade would run c streams one step at a time). --serve forces one.
- qwen-tts (subprocess, own import path: it pins transformers 4.57.3; benchmarks/tts_bench_reference.py):
  generate_custom_voice / generate_voice_clone with lists of c texts; it does not stream, so its time to
  first audio IS the whole call.
- talker frame: Talker + code predictor ms per 80 ms frame at batch 1/8/32 (engine_bench.bench_talker).
Prints one JSON object per measurement, then markdown tables.
"""

import argparse
import contextlib
import gc
import importlib.util
import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from aura_omni.models.loader import init_dummy
from aura_omni.models.qwen3_tts.codec_config import CodecConfig
from aura_omni.models.qwen3_tts.checkpoint_config import Qwen3TTSConfig
from aura_omni.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig
from aura_omni.models.qwen3_tts.talker import Talker
from aura_omni.stages.tts import PRESETS_DIR, SAMPLE_RATE, SAMPLES_PER_FRAME, Qwen3TTS, TTSRequest
from aura_omni.testing.tiny_codec import write_tiny_codec
from aura_omni.testing.tiny_tts import write_tiny_tts, write_tts_files

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_SCRIPT = Path(__file__).resolve().parent / "tts_bench_reference.py"
REF_VENV = Path(os.environ.get("QWEN_TTS_REF_VENV", ROOT / ".venv-qwen-tts"))
CODEC_PRESET = PRESETS_DIR / "Qwen__Qwen3-TTS-Tokenizer-12Hz"
FULL_PRESETS = {"custom_voice": PRESETS_DIR / "Qwen__Qwen3-TTS-12Hz-1.7B-CustomVoice",
                "base": PRESETS_DIR / "Qwen__Qwen3-TTS-12Hz-1.7B-Base"}
CHECKPOINT_FORMAT = 1  # bump when the written files change, so cached checkpoints are rewritten

TEXT = ("The quick brown fox jumps over the lazy dog near the quiet river bank, "
        "while the morning sun slowly rises above the distant hills.")  # about 8 s of speech
REF_TEXT = "This is a short reference recording of my voice."
LANGUAGE = "English"
SPEAKER = "Vivian"
REF_SECONDS = 3.0
# mode -> (checkpoint kind, request fields); tts_bench_reference.py maps the same names to qwen-tts calls
MODES = {
    "custom_voice": ("custom_voice", dict(task_type="CustomVoice", speaker=SPEAKER)),
    "base_xvector": ("base", dict(task_type="Base")),
    "base_icl": ("base", dict(task_type="Base")),
}


def reference_audio(seconds: float = REF_SECONDS) -> np.ndarray:
    """The voice-clone reference: `seconds` of 24 kHz noise, the same array for both implementations."""
    return (0.1 * np.random.default_rng(0).standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def emit(rows: list[dict], row: dict, jsonl=None) -> None:
    rows.append(row)
    line = json.dumps(row)
    print(line, flush=True)
    if jsonl is not None:
        jsonl.write(line + "\n")
        jsonl.flush()


# ---------------------------------------------------------------------- checkpoints
def write_checkpoints(args, device: torch.device) -> tuple[dict[str, Path], dict | None]:
    """({kind: checkpoint dir} for the kinds the modes need, a row if anything was written): once per --workdir."""
    kinds = sorted({MODES[m][0] for m in args.modes})
    if args.tiny:
        root = Path(args.workdir) / "tiny"
    else:
        root = Path(args.workdir) / ("full" if args.num_layers is None else f"full-{args.num_layers}layers")
    stamp = dict(format=CHECKPOINT_FORMAT, tiny=args.tiny, num_layers=args.num_layers, seed=args.seed)
    dirs = {k: root / k for k in kinds}
    marker = root / "written.json"
    done = json.loads(marker.read_text()) if marker.exists() else {}
    todo = [k for k in kinds if done.get(k) != stamp]
    if not todo:
        return dirs, None
    t = time.perf_counter()
    if args.tiny:
        for k in todo:
            write_tiny_tts(dirs[k], k, seed=args.seed)
    else:
        write_full_checkpoints(root, todo, device, args.num_layers, args.seed)
    done.update({k: stamp for k in todo})
    marker.write_text(json.dumps(done, indent=2))
    return dirs, dict(bench="checkpoint_write", kinds=todo, dir=str(root), seconds=round(time.perf_counter() - t, 1))


def full_config(kind: str, num_layers: int | None) -> dict:
    cfg = json.loads((FULL_PRESETS[kind] / "config.json").read_text())
    if num_layers is not None:  # full widths, fewer layers: a quick check of the full-size layout
        cfg["talker_config"]["num_hidden_layers"] = num_layers
        cfg["talker_config"]["code_predictor_config"]["num_hidden_layers"] = num_layers
    return cfg


@torch.no_grad()
def dummy_weights(module_cls, config, prefix: str, device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    """`prefix.*` bf16 tensors of one of our modules built on `device` with `init_dummy` (--load-format dummy)."""
    with torch.device(device):
        module = module_cls(config)
    init_dummy(module, seed=seed)
    out = {f"{prefix}.{k}": v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in module.state_dict().items()}
    del module
    return out


def write_full_checkpoints(root: Path, kinds: list[str], device: torch.device, num_layers: int | None,
                           seed: int) -> None:
    """Full-size Qwen3-TTS-12Hz-1.7B-{CustomVoice,Base} with random weights in the real layout. The two kinds
    share one talker (same shapes) and one codec directory (speech_tokenizer/ is a symlink to ../codec)."""
    configs = {k: full_config(k, num_layers) for k in kinds}
    talker_cfg = Qwen3TTSConfig.from_dict(configs[kinds[0]]).talker
    talker = dummy_weights(Talker, talker_cfg, "talker", device, seed)
    codec_dir = root / "codec"
    codec = CodecConfig.from_dir(CODEC_PRESET)
    if num_layers is not None:
        codec.decoder.num_hidden_layers = codec.encoder.num_hidden_layers = num_layers
    write_tiny_codec(codec_dir, seed, config=codec)  # fp32 like the released codec; all 32 Mimi codebooks
    for kind in kinds:
        tensors = dict(talker)
        if kind == "base":
            speaker_cfg = SpeakerEncoderConfig.from_dict(configs[kind]["speaker_encoder_config"])
            tensors.update(dummy_weights(SpeakerEncoder, speaker_cfg, "speaker_encoder", device, seed))
        write_tts_files(root / kind, configs[kind], tensors)
        link = root / kind / "speech_tokenizer"
        if not link.exists():
            link.symlink_to(Path("..") / "codec", target_is_directory=True)


# ---------------------------------------------------------------------- ours
def make_request(mode: str, args, seed: int, voice=None, max_new_tokens: int | None = None) -> TTSRequest:
    _, fields = MODES[mode]
    return TTSRequest(text=TEXT, language=LANGUAGE, voice=voice, seed=seed,
                      max_new_tokens=max_new_tokens or args.frames + 1, **fields)


def voice_for(tts: Qwen3TTS, mode: str):
    if mode == "base_xvector":
        return tts.create_voice_prompt(reference_audio(), SAMPLE_RATE, x_vector_only=True)
    if mode == "base_icl":
        return tts.create_voice_prompt(reference_audio(), SAMPLE_RATE, ref_text=REF_TEXT)
    return None


def stream_once(tts: Qwen3TTS, req: TTSRequest, initial: int, chunk: int, device, first_only: bool) -> dict:
    """One request through the facade's stream(): TTFA, and (unless first_only) the whole utterance."""
    sync(device)
    t0 = time.perf_counter()
    ttfa, samples = None, 0
    chunks = tts.stream(req, initial_chunk_frames=initial, chunk_frames=chunk)
    for wav in chunks:
        if ttfa is None:
            ttfa = time.perf_counter() - t0
        samples += wav.shape[0]
        if first_only:
            chunks.close()  # frees the request's cache blocks
            break
    wall = time.perf_counter() - t0
    return dict(ttfa=ttfa, wall=wall, samples=samples)


def static_batch(tts: Qwen3TTS, reqs: list[TTSRequest], initial: int, chunk: int, device) -> dict:
    """c requests as one batch through iter_frames, each with its own streaming decoder, decoding its chunk
    as soon as it is due (what stream() does for one request)."""
    code2wav = tts.code2wav
    codec_device = next(code2wav.parameters()).device
    n = len(reqs)
    sync(device)
    t0 = time.perf_counter()
    states = [code2wav.new_stream() for _ in reqs]
    for state, r in zip(states, reqs):
        if r.voice is not None and not r.voice.x_vector_only:  # ICL: the reference codes prime the decoder
            code2wav.decode_stream(state, r.voice.ref_codes.to(codec_device))
    pending: list[list[torch.Tensor]] = [[] for _ in reqs]
    want, first, samples = [initial] * n, [None] * n, [0] * n

    def flush(i: int) -> None:
        wav = code2wav.decode_stream(states[i], torch.stack(pending[i]).to(codec_device)).float().cpu()
        samples[i] += wav.shape[0]
        pending[i], want[i] = [], chunk
        if first[i] is None:
            first[i] = time.perf_counter() - t0

    for i, frame in tts.iter_frames(reqs):
        pending[i].append(frame)
        if len(pending[i]) >= want[i]:
            flush(i)
    for i in range(n):
        if pending[i]:
            flush(i)
    return dict(ttfa=first, wall=time.perf_counter() - t0, samples=samples)


def concurrent_streams(tts: Qwen3TTS, reqs: list[TTSRequest], initial: int, chunk: int, device) -> dict:
    """c threads each consuming its own `Qwen3TTS.stream`, started together (what the HTTP server does);
    batched only if the facade batches concurrent streams (an engine with continuous batching)."""
    n = len(reqs)
    first, samples, errors, clock = [None] * n, [0] * n, [], {}
    start = threading.Barrier(n + 1)

    def consume(i: int) -> None:
        start.wait()
        try:
            with torch.inference_mode():  # thread-local: the main thread's mode does not carry over
                for wav in tts.stream(reqs[i], initial_chunk_frames=initial, chunk_frames=chunk):
                    if first[i] is None:
                        first[i] = time.perf_counter() - clock["t0"]
                    samples[i] += wav.shape[0]
        except BaseException as e:  # re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    sync(device)
    clock["t0"] = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return dict(ttfa=first, wall=time.perf_counter() - clock["t0"], samples=samples)


def batches_concurrent_streams(tts: Qwen3TTS) -> bool:
    """Whether the facade steps concurrent streams together (it holds a Talker engine with continuous
    batching), rather than running one lock-serialised request at a time."""
    return any(type(v).__name__.endswith("Engine") for v in vars(tts).values())


SERVES = {"static_batch": static_batch, "streams": concurrent_streams}


def concurrency_row(impl: str, serve: str, mode: str, c: int, ttfas: list[float], wall: float,
                    samples: list[int], **extra) -> dict:
    audio = [s / SAMPLE_RATE for s in samples]
    ttfa_ms = np.asarray([t for t in ttfas if t is not None]) * 1e3
    return dict(bench="tts_concurrency", impl=impl, serve=serve, mode=mode, concurrency=c,
                frames_mean=round(float(np.mean(samples)) / SAMPLES_PER_FRAME, 1), audio_s=round(sum(audio), 2),
                wall_s=round(wall, 3), rtf=round(wall / max(float(np.mean(audio)), 1e-9), 4),
                audio_s_per_s=round(sum(audio) / wall, 3),
                ttfa_mean_ms=round(float(ttfa_ms.mean()), 1) if ttfa_ms.size else None,
                ttfa_p95_ms=round(float(np.percentile(ttfa_ms, 95)), 1) if ttfa_ms.size else None, **extra)


def bench_ours(args, ckpts: dict[str, Path], device: torch.device, dtype: torch.dtype, out: list[dict], jsonl):
    tag = dict(device=str(device), dtype=str(dtype).removeprefix("torch."))
    loaded: dict[str, Qwen3TTS] = {}
    for mode in args.modes:
        kind = MODES[mode][0]
        if kind not in loaded:
            unload(loaded, device)
            sync(device)
            t = time.perf_counter()
            loaded[kind] = Qwen3TTS.load(ckpts[kind], device=device, dtype=dtype)
            sync(device)
            emit(out, dict(bench="load", impl="aura-omni", kind=kind, seconds=round(time.perf_counter() - t, 2)), jsonl)
        tts = loaded[kind]
        serve = args.serve
        if serve == "auto":
            serve = "streams" if batches_concurrent_streams(tts) else "static_batch"
        voice = None
        if kind == "base":
            voice_for(tts, mode)  # warm-up
            sync(device)
            t = time.perf_counter()
            voice = voice_for(tts, mode)
            sync(device)
            emit(out, dict(bench="voice_prompt", impl="aura-omni", mode=mode,
                           ms=round((time.perf_counter() - t) * 1e3, 1), **tag), jsonl)
        # warm-up: one short stream, and short runs at every concurrency (kernels, graphs, cache growth)
        stream_once(tts, make_request(mode, args, 0, voice, args.warmup_tokens), 1, args.chunk_frames, device, False)
        for c in args.concurrency:
            if c > 1:
                SERVES[serve](tts, [make_request(mode, args, i, voice, args.warmup_tokens) for i in range(c)],
                              1, args.chunk_frames, device)
        for initial in args.initial_chunks:
            runs = [stream_once(tts, make_request(mode, args, args.seed + r, voice), initial, args.chunk_frames,
                                device, True)["ttfa"] for r in range(args.ttfa_repeats)]
            emit(out, dict(bench="tts_ttfa", impl="aura-omni", mode=mode, initial_chunk_frames=initial,
                           ttfa_ms=round(float(np.median(runs)) * 1e3, 1), runs_ms=[round(x * 1e3, 1) for x in runs],
                           streaming=True, **tag), jsonl)
        for c in args.concurrency:
            reqs = [make_request(mode, args, args.seed + i, voice) for i in range(c)]
            if c == 1:  # the facade's own single-request path
                r = stream_once(tts, reqs[0], args.initial_chunks[0], args.chunk_frames, device, False)
                row = concurrency_row("aura-omni", "stream", mode, 1, [r["ttfa"]], r["wall"], [r["samples"]],
                                      initial_chunk_frames=args.initial_chunks[0], **tag)
            else:
                r = SERVES[serve](tts, reqs, args.initial_chunks[0], args.chunk_frames, device)
                row = concurrency_row("aura-omni", serve, mode, c, r["ttfa"], r["wall"], r["samples"],
                                      initial_chunk_frames=args.initial_chunks[0], **tag)
            emit(out, row, jsonl)
    unload(loaded, device)


def unload(loaded: dict, device: torch.device) -> None:
    for tts in loaded.values():
        if callable(getattr(tts, "close", None)):  # engine threads, if the facade has any
            tts.close()
    loaded.clear()
    free(device)


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def bench_talker_frames(args, device: torch.device, dtype: torch.dtype, out: list[dict], jsonl) -> None:
    """Reuses benchmarks/engine_bench.py's Talker + code predictor frame timing (batch 1/8/32)."""
    spec = importlib.util.spec_from_file_location("engine_bench", Path(__file__).resolve().parent / "engine_bench.py")
    engine_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(engine_bench)
    argv = ["--talker-only", "--device", str(device), "--dtype", str(dtype).removeprefix("torch.")]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its own table
            try:
                rows = engine_bench.main(argv + (["--tiny"] if args.tiny else []))
            except SystemExit:  # an engine_bench without --talker-only: call its Talker section directly
                with torch.inference_mode():
                    rows = engine_bench.bench_talker(argparse.Namespace(tiny=args.tiny), device, dtype)
    except Exception as e:  # a side measurement: report it and go on to the reference
        emit(out, dict(bench="talker_frame_error", reason=f"{type(e).__name__}: {e}"), jsonl)
        return
    rows = [r for r in rows if "frame_ms" in r]
    if not rows:
        emit(out, dict(bench="talker_frame_error", reason="engine_bench returned no Talker rows"), jsonl)
    for r in rows:
        emit(out, dict(bench="talker_frame", **r), jsonl)
    free(device)


# ---------------------------------------------------------------------- reference (qwen-tts, subprocess)
def reference_python(args) -> str | None:
    if args.reference_python:
        return args.reference_python
    if args.reference_pythonpath:
        return sys.executable
    venv = REF_VENV / "bin" / "python"
    return str(venv) if venv.exists() else None


def bench_reference(args, ckpts: dict[str, Path], device: torch.device, dtype: torch.dtype, out: list[dict],
                    jsonl) -> bool:
    python = reference_python(args)
    if python is None:
        emit(out, dict(bench="reference_skipped", reason=f"no reference environment: {REF_VENV} is absent "
                       "(scripts/setup_qwen_tts_reference.sh) and no --reference-python/--reference-pythonpath"), jsonl)
        return True
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    audio = work / "reference_audio.npy"
    np.save(audio, reference_audio())
    spec = dict(checkpoints={k: str(v) for k, v in ckpts.items()}, modes=args.modes, text=TEXT, language=LANGUAGE,
                speaker=SPEAKER, ref_text=REF_TEXT, ref_audio=str(audio), sample_rate=SAMPLE_RATE,
                max_new_tokens=args.frames + 1, warmup_tokens=args.warmup_tokens, batches=args.reference_batches,
                seed=args.seed, device=str(device), dtype=str(dtype).removeprefix("torch."),
                attn_implementation=args.reference_attn, threads=torch.get_num_threads())
    spec_path = work / "reference_spec.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    if args.reference_pythonpath:  # e.g. /tmp/ref_site: transformers 4.57.3 & co. shadow the image's versions
        env["PYTHONPATH"] = os.pathsep.join(p for p in (args.reference_pythonpath, env.get("PYTHONPATH")) if p)
    log = work / "reference_stderr.log"
    cmd = [python, str(REFERENCE_SCRIPT), "--spec", str(spec_path)]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=str(ROOT))
        timer = threading.Timer(args.reference_timeout, proc.kill)
        timer.start()
        try:
            for line in proc.stdout:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and "bench" in row:
                    emit(out, row, jsonl)
            rc = proc.wait()
        finally:
            timer.cancel()
    if rc != 0:
        tail = log.read_text()[-3000:]
        why = f"killed after --reference-timeout {args.reference_timeout} s" if rc < 0 else f"exit status {rc}"
        emit(out, dict(bench="reference_error", reason=why, command=" ".join(cmd), log=str(log)), jsonl)
        print(f"reference run failed ({why}); last lines of {log}:\n{tail}", file=sys.stderr, flush=True)
        return False
    return True


# ---------------------------------------------------------------------- report
def print_tables(rows: list[dict], args, device, dtype) -> None:
    what = "tiny random" if args.tiny else ("1.7B random" if args.num_layers is None else
                                            f"1.7B widths, {args.num_layers} layers, random")
    print(f"\n## Qwen3-TTS ({what} weights), {args.frames} frames = {args.frames * 0.08:.1f} s of audio per request, "
          f"{device} {str(dtype).removeprefix('torch.')}\n")
    ref = {(r["mode"], r["concurrency"]): r for r in rows if r.get("bench") == "tts_concurrency"
           and r["impl"].startswith("qwen-tts")}
    ours = {(r["mode"], r["concurrency"]): r for r in rows if r.get("bench") == "tts_concurrency"
            and r["impl"] == "aura-omni"}
    ttfa = {(r["mode"], r["initial_chunk_frames"]): r["ttfa_ms"] for r in rows if r.get("bench") == "tts_ttfa"}
    cols = [f"ours ic={i}" for i in args.initial_chunks]
    print("TTFA at concurrency 1 (ms; qwen-tts does not stream: its first audio is the whole utterance)\n")
    print("| mode | " + " | ".join(cols) + " | qwen-tts |")
    print("|---" * (len(cols) + 2) + "|")
    for m in args.modes:
        vals = [ttfa.get((m, i)) for i in args.initial_chunks]
        r = ref.get((m, 1))
        print(f"| {m} | " + " | ".join(fmt(v) for v in vals) + f" | {fmt(r and r['ttfa_mean_ms'])} |")
    how = {"static_batch": "one static batch through iter_frames with a streaming decoder per request",
           "streams": "c threads each consuming its own stream()"}
    serves = sorted({r["serve"] for r in ours.values() if r["concurrency"] > 1})
    print("\nConcurrency c (ours: c=1 one stream(), c>1 " + "; ".join(how[s] for s in serves)
          + "; qwen-tts: one generate call over c texts)\n")
    print("| mode | c | ours TTFA mean / p95 ms | ours RTF | ours audio-s/s | qwen-tts TTFA ms | qwen-tts RTF "
          "| qwen-tts audio-s/s | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in args.modes:
        for c in sorted({c for mm, c in list(ours) + list(ref) if mm == m}):
            o, r = ours.get((m, c)), ref.get((m, c))
            speed = o and r and o["audio_s_per_s"] / max(r["audio_s_per_s"], 1e-9)
            print(f"| {m} | {c} | {fmt(o and o['ttfa_mean_ms'])} / {fmt(o and o['ttfa_p95_ms'])} | "
                  f"{fmt(o and o['rtf'], 3)} | {fmt(o and o['audio_s_per_s'], 2)} | {fmt(r and r['ttfa_mean_ms'])} | "
                  f"{fmt(r and r['rtf'], 3)} | {fmt(r and r['audio_s_per_s'], 2)} | "
                  f"{fmt(speed, 1)}{'x' if speed else ''} |")
    voice = [r for r in rows if r.get("bench") == "voice_prompt"]
    if voice:
        print("\nVoice prompt (3 s reference -> x-vector, + reference codes for ICL), ms: "
              + ", ".join(f"{r['impl']} {r['mode']} {fmt(r['ms'])}" for r in voice))
    frames = [r for r in rows if r.get("bench") == "talker_frame"]
    if frames:
        print("Talker + code predictor per 80 ms frame (engine_bench): "
              + ", ".join(f"batch {r['batch']} {r['frame_ms']} ms" for r in frames))
    for r in rows:
        if r.get("bench") in ("reference_skipped", "reference_error"):
            print(f"qwen-tts: {r['bench']}: {r['reason']}")


def fmt(v, digits: int = 0) -> str:
    if v is None or v is False:
        return "-"
    return f"{v:.{digits}f}"


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny checkpoints, few frames (CPU smoke run)")
    ap.add_argument("--workdir", default="/tmp/tts_bench", help="checkpoint cache and reference I/O")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of " + ", ".join(MODES))
    ap.add_argument("--frames", type=int, default=None, help="frames per request (default 100 = 8 s; tiny 6)")
    ap.add_argument("--concurrency", default=None, help="comma list (default 1,4,16; tiny 1,2)")
    ap.add_argument("--initial-chunks", default="1,2", help="initial_chunk_frames values for TTFA")
    ap.add_argument("--chunk-frames", type=int, default=25, help="frames per later chunk (deploy default 25)")
    ap.add_argument("--ttfa-repeats", type=int, default=None,
                    help="first-chunk runs per TTFA value (default 3; tiny 1)")
    ap.add_argument("--warmup-tokens", type=int, default=3, help="max_new_tokens of the warm-up runs")
    ap.add_argument("--num-layers", type=int, default=None,
                    help="full widths but N layers in every transformer (quick check of the full-size layout)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="default bfloat16 on CUDA, float32 on CPU (both implementations)")
    ap.add_argument("--serve", default="auto", choices=["auto", "static_batch", "streams"],
                    help="ours at c > 1: one static batch through iter_frames, or c threads each consuming stream() "
                         "(auto: streams when the facade batches concurrent streams, else static_batch)")
    ap.add_argument("--no-ours", action="store_true")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--no-talker-frames", action="store_true")
    ap.add_argument("--reference-python", default=None,
                    help=f"python of the qwen-tts environment (default {REF_VENV}/bin/python, or this python "
                         "with --reference-pythonpath)")
    ap.add_argument("--reference-pythonpath", default=None,
                    help="prepended to PYTHONPATH of the reference process (e.g. /tmp/ref_site)")
    ap.add_argument("--reference-batches", default=None, help="comma list (default 1,4; tiny 1,2)")
    ap.add_argument("--reference-attn", default="sdpa", help="attn_implementation for qwen-tts ('' = its default)")
    ap.add_argument("--reference-timeout", type=float, default=300.0, help="seconds before the reference is killed")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads, both sides (default torch's; tiny 1)")
    ap.add_argument("--jsonl", default=None, help="also write the JSON rows to this file")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        ap.error(f"unknown modes {unknown}; choose from {list(MODES)}")
    args.frames = args.frames or (6 if args.tiny else 100)
    args.concurrency = ints(args.concurrency or ("1,2" if args.tiny else "1,4,16"))
    args.initial_chunks = ints(args.initial_chunks)
    args.reference_batches = ints(args.reference_batches or ("1,2" if args.tiny else "1,4"))
    args.ttfa_repeats = args.ttfa_repeats or (1 if args.tiny else 3)
    if not args.initial_chunks or min(args.initial_chunks + args.concurrency + [args.frames]) < 1:
        ap.error("--frames, --concurrency and --initial-chunks must be positive")

    if args.threads or args.tiny:
        torch.set_num_threads(args.threads or 1)  # small CPU runs beside other work: extra threads only contend
    start = time.perf_counter()
    rows: list[dict] = []
    jsonl = open(args.jsonl, "a") if args.jsonl else None
    ok = True
    try:
        ckpts, written = write_checkpoints(args, device)
        if written:
            emit(rows, written, jsonl)
        if not args.no_ours:
            with torch.inference_mode():
                bench_ours(args, ckpts, device, dtype, rows, jsonl)
        if not args.no_talker_frames:
            bench_talker_frames(args, device, dtype, rows, jsonl)
        if not args.no_reference:
            ok = bench_reference(args, ckpts, device, dtype, rows, jsonl)
        emit(rows, dict(bench="total", seconds=round(time.perf_counter() - start, 1)), jsonl)
        print_tables(rows, args, device, dtype)
    finally:
        if jsonl is not None:
            jsonl.close()
    if not ok and __name__ == "__main__":
        sys.exit(1)
    return rows


if __name__ == "__main__":
    main()
