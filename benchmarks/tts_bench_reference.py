#!/usr/bin/env python
"""Reference side of benchmarks/tts_bench.py: times qwen-tts 0.1.1 (transformers 4.57.3) in its own process.

Runs INSIDE the reference environment, never in the project's: .venv-qwen-tts on CPU
(scripts/setup_qwen_tts_reference.sh), or on the H200 python3 with PYTHONPATH=/tmp/ref_site (wheels from
.whl-ref/) in front of the image's packages. It does not import aura_omni. tts_bench.py writes the job
(checkpoints, modes, text, reference audio, lengths, batches) to a JSON file:

    python benchmarks/tts_bench_reference.py --spec /tmp/tts_bench/reference_spec.json

and reads one JSON object per measurement from stdout. qwen-tts does not stream: generate_* returns whole
waveforms, so its time to first audio is the whole call (tokenise, talker + code predictor, codec decode).
"""

import argparse
import json
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# Importing run_reference stubs torchaudio.compliance.kaldi and sox when they are missing (qwen_tts imports
# them at load; only its 25 Hz tokenizer uses them).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "parity" / "qwen_tts_reference"))
import run_reference  # noqa: E402,F401

import numpy as np  # noqa: E402
import torch  # noqa: E402

SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 Hz


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pkg_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def load(ckpt: str, device: torch.device, dtype: torch.dtype, attn: str | None):
    from qwen_tts import Qwen3TTSModel

    kwargs = dict(device_map=str(device), dtype=dtype)
    if attn:
        kwargs["attn_implementation"] = attn
    return Qwen3TTSModel.from_pretrained(ckpt, **kwargs)


def voice_prompt(model, mode: str, spec: dict, audio: np.ndarray):
    if mode == "base_xvector":
        return model.create_voice_clone_prompt(ref_audio=(audio, spec["sample_rate"]), x_vector_only_mode=True)
    return model.create_voice_clone_prompt(ref_audio=(audio, spec["sample_rate"]), ref_text=spec["ref_text"])


def generate(model, mode: str, batch: int, spec: dict, prompt, max_new_tokens: int) -> list[np.ndarray]:
    """One call over `batch` copies of the text, with the package's defaults (non_streaming_mode, sampling)."""
    texts, languages = [spec["text"]] * batch, [spec["language"]] * batch
    if mode == "custom_voice":
        wavs, _ = model.generate_custom_voice(text=texts, speaker=[spec["speaker"]] * batch, language=languages,
                                              max_new_tokens=max_new_tokens)
    else:
        wavs, _ = model.generate_voice_clone(text=texts, language=languages, voice_clone_prompt=prompt * batch,
                                             max_new_tokens=max_new_tokens)
    return wavs


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, type=Path)
    spec = json.loads(ap.parse_args().spec.read_text())
    device, dtype = torch.device(spec["device"]), getattr(torch, spec["dtype"])
    torch.set_grad_enabled(False)
    if device.type == "cpu" and spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    import transformers

    tag = dict(impl="qwen-tts 0.1.1", device=str(device), dtype=spec["dtype"])
    emit(dict(bench="reference_env", qwen_tts=pkg_version("qwen-tts"), transformers=transformers.__version__,
              torch=torch.__version__, attn_implementation=spec["attn_implementation"] or None,
              gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None))
    audio = np.load(spec["ref_audio"]).astype(np.float32)
    kinds = {"custom_voice": "custom_voice", "base_xvector": "base", "base_icl": "base"}
    model, loaded_kind = None, None
    for mode in spec["modes"]:
        kind = kinds[mode]
        if kind != loaded_kind:
            model = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
            t = time.perf_counter()
            model = load(spec["checkpoints"][kind], device, dtype, spec["attn_implementation"])
            sync(device)
            emit(dict(bench="load", impl=tag["impl"], kind=kind, seconds=round(time.perf_counter() - t, 2)))
            loaded_kind = kind
        prompt = None
        if kind == "base":
            voice_prompt(model, mode, spec, audio)  # warm-up
            sync(device)
            t = time.perf_counter()
            prompt = voice_prompt(model, mode, spec, audio)
            sync(device)
            emit(dict(bench="voice_prompt", mode=mode, ms=round((time.perf_counter() - t) * 1e3, 1), **tag))
        generate(model, mode, max(spec["batches"]), spec, prompt, spec["warmup_tokens"])  # warm-up
        for batch in spec["batches"]:
            torch.manual_seed(spec["seed"])
            sync(device)
            t = time.perf_counter()
            wavs = generate(model, mode, batch, spec, prompt, spec["max_new_tokens"])
            sync(device)
            wall = time.perf_counter() - t
            samples = [int(np.asarray(w).shape[0]) for w in wavs]
            audio_s = [s / spec["sample_rate"] for s in samples]
            emit(dict(bench="tts_concurrency", serve="batch_no_streaming", mode=mode, concurrency=batch,
                      frames_mean=round(float(np.mean(samples)) / SAMPLES_PER_FRAME, 1), audio_s=round(sum(audio_s), 2),
                      wall_s=round(wall, 3), rtf=round(wall / max(float(np.mean(audio_s)), 1e-9), 4),
                      audio_s_per_s=round(sum(audio_s) / wall, 3), ttfa_mean_ms=round(wall * 1e3, 1),
                      ttfa_p95_ms=round(wall * 1e3, 1), first_audio="whole utterance (no streaming)", **tag))


if __name__ == "__main__":
    main()
