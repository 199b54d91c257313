"""`aura-omni make-tiny DIR`: the four tiny stage checkpoints plus deploy files that serve them on CPU.

Layout written:
  DIR/qwen3_asr/                 Qwen3-ASR (original `thinker.*` layout)
  DIR/aura/                      Qwen3-VL / AURA (`<|silent|>` = 151669)
  DIR/qwen3_tts_base/            Qwen3-TTS-12Hz Base (with speech_tokenizer/)
  DIR/qwen3_tts_custom_voice/    Qwen3-TTS-12Hz CustomVoice (with speech_tokenizer/)
  DIR/deploy.yaml                all four stages, Base TTS, device cpu
  DIR/deploy_tts.yaml            TTS stages only (Base)
  DIR/deploy_tts_customvoice.yaml TTS stages only (CustomVoice presets)
  DIR/deploy_demo.yaml           the full chain with both Talkers (CustomVoice presets and Base clones): the demo
Checkpoint writers live beside this file, one per model family; this module only orchestrates.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import yaml

log = logging.getLogger("aura_omni.make_tiny")

# name -> (writer "module:function", keyword arguments, subfolder)
CHECKPOINTS = {
    "asr": ("aura_omni.testing.tiny_asr:write_tiny_asr", {}, "qwen3_asr"),
    "aura": ("aura_omni.testing.tiny_vl:write_tiny_aura", {}, "aura"),
    "tts_base": ("aura_omni.testing.tiny_tts:write_tiny_tts", {"kind": "base"}, "qwen3_tts_base"),
    "tts_custom_voice": ("aura_omni.testing.tiny_tts:write_tiny_tts", {"kind": "custom_voice"}, "qwen3_tts_custom_voice"),
}

# Streaming windows as configs/aura_omni.yaml, so tiny runs exercise the same chunking.
CODEC_CONNECTOR = {
    "name": "SharedMemoryConnector",
    "extra": {"codec_streaming": True, "codec_chunk_frames": 25, "codec_left_context_frames": 72,
              "initial_codec_chunk_frames": 1},
}
TINY_TTS_MAX_TOKENS = 256  # random weights rarely stop on their own: bound each request (20 s of audio)


def _stage(stage_id: int, model: str, **extra) -> dict:
    return {"stage_id": stage_id, "model": model, "devices": "cpu", "dtype": "float32", "max_num_seqs": 4, **extra}


def _tts_stages(first_id: int, model: str) -> list[dict]:
    talker_sampling = {"temperature": 0.9, "top_k": 50, "max_tokens": TINY_TTS_MAX_TOKENS, "seed": 42,
                       "repetition_penalty": 1.05}
    return [
        _stage(first_id, model, default_sampling_params=talker_sampling,
               subtalker_sampling_params={"do_sample": True, "temperature": 0.9, "top_k": 50, "top_p": 1.0},
               output_connectors={f"to_stage_{first_id + 1}": "codec"}),
        _stage(first_id + 1, model, input_connectors={f"from_stage_{first_id}": "codec"}),
    ]


def deploy_files(root: Path) -> dict[str, dict]:
    """The deploy YAMLs as dicts; stage models are paths relative to the deploy file."""
    base, custom = "./" + CHECKPOINTS["tts_base"][2], "./" + CHECKPOINTS["tts_custom_voice"][2]
    full = {
        "pipeline": "aura_omni", "async_chunk": True, "connectors": {"codec": CODEC_CONNECTOR},
        "stages": [
            _stage(0, "./" + CHECKPOINTS["asr"][2], default_sampling_params={"temperature": 0.0, "max_tokens": 32}),
            _stage(1, "./" + CHECKPOINTS["aura"][2], default_sampling_params={"temperature": 0.5, "max_tokens": 32}),
            *_tts_stages(2, base),
        ],
    }
    tts = {"pipeline": "qwen3_tts", "async_chunk": True, "connectors": {"codec": CODEC_CONNECTOR},
           "stages": _tts_stages(0, base)}
    tts_cv = {"pipeline": "qwen3_tts", "async_chunk": True, "connectors": {"codec": CODEC_CONNECTOR},
              "stages": _tts_stages(0, custom)}
    # the demo: the full chain with both Talkers, so preset speakers (CustomVoice) and cloned voices (Base) both work
    # and AURA's prefix cache, as the shipped configs have it: a session's history and a turn's frames are prefilled
    # once (docs/architecture.md)
    demo = dict(full, stages=[full["stages"][0], dict(full["stages"][1], enable_prefix_caching=True),
                              *full["stages"][2:], *[dict(s, model_stage=role) for s, role in
                                                     zip(_tts_stages(4, custom), ("qwen3_tts", "code2wav"))]])
    return {"deploy.yaml": full, "deploy_tts.yaml": tts, "deploy_tts_customvoice.yaml": tts_cv, "deploy_demo.yaml": demo}


def make_tiny(out_dir: str | Path, seed: int = 0) -> dict[str, Path]:
    """Write every tiny checkpoint and the deploy files; returns name -> path."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, (target, kwargs, sub) in CHECKPOINTS.items():
        module, _, func = target.partition(":")
        writer = getattr(importlib.import_module(module), func)
        log.info("make-tiny: writing %s into %s", name, root / sub)
        writer(root / sub, seed=seed, **kwargs)
        written[name] = root / sub
    for fname, data in deploy_files(root).items():
        header = f"# Written by `aura-omni make-tiny {root}`: tiny random checkpoints on CPU.\n"
        (root / fname).write_text(header + yaml.safe_dump(data, sort_keys=False))
        written[fname] = root / fname
    return written
