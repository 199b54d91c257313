#!/usr/bin/env python
"""Runs INSIDE the isolated reference venv (.venv-qwen-tts: qwen-tts 0.1.1, transformers 4.57.3), never
in the project's environment. Loads tiny checkpoints written by aura_omni.testing.tiny_tts with
qwen_tts.Qwen3TTSModel and dumps, per mode, the greedy codes, the prompt token ids, the waveform and
(Base) the reference's x-vector and reference codes, for tests/parity/test_qwen3_tts_parity.py.

Usage: python run_reference.py --root ROOT --out OUT [--max-new-tokens N] [--modes a,b]
ROOT holds base/, custom_voice/, voice_design/ (missing kinds are skipped). Without speech_tokenizer/
a checkpoint is loaded without its codec and only codes are produced.
Writes OUT/<mode>.json (+ OUT/<mode>.npy waveform) and OUT/summary.json.
"""

import argparse
import importlib.machinery
import json
import sys
import types
from pathlib import Path


def _stub_modules() -> None:
    """qwen_tts imports torchaudio.compliance.kaldi and sox at import time; only the unreleased 25 Hz
    tokenizer uses them. Stubs need a __spec__ or transformers' find_spec checks crash."""
    def stub(name):
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None)
        return m

    try:
        import torchaudio.compliance.kaldi  # noqa: F401
    except Exception:
        for k in [k for k in sys.modules if k == "torchaudio" or k.startswith("torchaudio.")]:
            del sys.modules[k]
        ta, comp, kal = stub("torchaudio"), stub("torchaudio.compliance"), stub("torchaudio.compliance.kaldi")
        comp.kaldi, ta.compliance = kal, comp
        sys.modules.update({"torchaudio": ta, "torchaudio.compliance": comp, "torchaudio.compliance.kaldi": kal})
    try:
        import sox  # noqa: F401
    except Exception:
        sys.modules["sox"] = stub("sox")


_stub_modules()

import numpy as np  # noqa: E402
import torch  # noqa: E402

TEXT = "Hello world, this is a tiny test of the engine."
REF_TEXT = "Some reference words."
# mode -> (checkpoint kind, wrapper method, kwargs); spec qwen3_tts.md §5.3
MODES = {
    "cv_non_streaming": ("custom_voice", "custom_voice", dict(speaker="Vivian", language="English")),
    "cv_dialect_instruct": ("custom_voice", "custom_voice",
                            dict(speaker="Eric", language="Chinese", instruct="Speak happily.")),
    "cv_streaming": ("custom_voice", "custom_voice", dict(speaker="Ryan", language="Auto", non_streaming_mode=False)),
    "voice_design": ("voice_design", "voice_design", dict(language="English", instruct="A calm deep voice.")),
    "base_xvector": ("base", "voice_clone", dict(language="English", x_vector_only_mode=True)),
    "base_icl_streaming": ("base", "voice_clone", dict(language="English", ref_text=REF_TEXT)),
    "base_icl_non_streaming": ("base", "voice_clone", dict(language="Auto", ref_text=REF_TEXT, non_streaming_mode=True)),
}


def reference_audio() -> np.ndarray:
    """1.5 s of noise at 24 kHz (19 frames), the same array the test feeds our implementation."""
    return (0.1 * np.random.default_rng(0).standard_normal(36000)).astype(np.float32)


class _NoCodec:
    """Stands in for speech_tokenizer when a checkpoint has none: codes-only runs."""

    def decode(self, items):
        return [np.zeros(0, dtype=np.float32) for _ in items], 24000


def load_wrapper(ckpt: Path):
    from qwen_tts import Qwen3TTSModel
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor
    from transformers import AutoConfig, AutoModel, AutoProcessor

    if (ckpt / "speech_tokenizer" / "config.json").exists():
        return Qwen3TTSModel.from_pretrained(str(ckpt), device_map="cpu", dtype=torch.float32,
                                             attn_implementation="eager"), True
    from safetensors.torch import load_file

    AutoConfig.register("qwen3_tts", Qwen3TTSConfig)
    AutoModel.register(Qwen3TTSConfig, Qwen3TTSForConditionalGeneration)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor)
    config = AutoConfig.from_pretrained(str(ckpt))
    config._attn_implementation = "eager"
    config.talker_config._attn_implementation = "eager"
    config.talker_config.code_predictor_config._attn_implementation = "eager"
    model = Qwen3TTSForConditionalGeneration(config).eval()
    model.load_state_dict(load_file(str(ckpt / "model.safetensors")), strict=True)
    model.load_generate_config(json.loads((ckpt / "generation_config.json").read_text()))
    model.load_speech_tokenizer(_NoCodec())
    processor = AutoProcessor.from_pretrained(str(ckpt), fix_mistral_regex=True)
    return Qwen3TTSModel(model=model, processor=processor, generate_defaults=model.generate_config), False


def run_mode(wrapper, method: str, kwargs: dict, max_new_tokens: int, has_codec: bool) -> tuple[dict, np.ndarray]:
    captured = {}
    inner = wrapper.model.generate

    def spy(**kw):  # record what the talker saw and produced
        captured["input_ids"] = [t[0].tolist() for t in kw["input_ids"]]
        if kw.get("instruct_ids"):
            captured["instruct_ids"] = [None if t is None else t[0].tolist() for t in kw["instruct_ids"]]
        if kw.get("ref_ids"):
            captured["ref_ids"] = [None if t is None else t[0].tolist() for t in kw["ref_ids"]]
        codes, hidden = inner(**kw)
        captured["codes"] = [c.tolist() for c in codes]
        return codes, hidden

    wrapper.model.generate = spy
    greedy = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=max_new_tokens)
    result = {}
    try:
        if method == "custom_voice":
            wavs, sr = wrapper.generate_custom_voice(text=TEXT, **kwargs, **greedy)
        elif method == "voice_design":
            wavs, sr = wrapper.generate_voice_design(text=TEXT, **kwargs, **greedy)
        else:
            kw = dict(kwargs)
            items = wrapper.create_voice_clone_prompt(ref_audio=(reference_audio(), 24000), ref_text=kw.pop("ref_text", None),
                                                      x_vector_only_mode=kw.pop("x_vector_only_mode", False))
            result["x_vector"] = items[0].ref_spk_embedding.float().tolist()
            if items[0].ref_code is not None:
                result["ref_codes"] = items[0].ref_code.tolist()
            wavs, sr = wrapper.generate_voice_clone(text=TEXT, voice_clone_prompt=items, **kw, **greedy)
    finally:
        wrapper.model.generate = inner
    result.update(codes=captured["codes"][0], input_ids=captured["input_ids"][0], sample_rate=sr,
                  instruct_ids=(captured.get("instruct_ids") or [None])[0],
                  ref_ids=(captured.get("ref_ids") or [None])[0], has_codec=has_codec)
    return result, np.asarray(wavs[0], dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    summary, wrappers = {}, {}
    for mode in args.modes.split(","):
        kind, method, kwargs = MODES[mode]
        ckpt = args.root / kind
        if not (ckpt / "config.json").exists():
            summary[mode] = "skipped: no checkpoint"
            continue
        if kind not in wrappers:
            wrappers[kind] = load_wrapper(ckpt)
        wrapper, has_codec = wrappers[kind]
        if method == "voice_clone" and not has_codec:
            summary[mode] = "skipped: Base needs speech_tokenizer/"
            continue
        torch.manual_seed(0)
        result, wav = run_mode(wrapper, method, kwargs, args.max_new_tokens, has_codec)
        (args.out / f"{mode}.json").write_text(json.dumps(result))
        np.save(args.out / f"{mode}.npy", wav)
        summary[mode] = f"ok: {len(result['codes'])} frames, {wav.shape[0]} samples"
        print(mode, summary[mode], flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
