"""Checkpoint resolution and safetensors loading shared by every model.

A checkpoint is a local directory or a Hugging Face repo id. Weights are read from
`model.safetensors` or the shards named in `model.safetensors.index.json`; nothing else is run.
"""

import json
import os
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open
from torch import nn


PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be found or does not match the model: the message says what to do."""


def resolve_checkpoint(model: str | os.PathLike, allow_patterns: list[str] | None = None) -> Path:
    """Local directory as is; otherwise a Hugging Face repo id fetched (or found in the cache) by huggingface_hub."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists() or str(model).startswith((".", "/")):
        raise CheckpointError(f"checkpoint path {model!s} is not a directory")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=str(model), allow_patterns=allow_patterns))
    except Exception as e:  # network down, gated repo, typo: one clear message
        raise CheckpointError(
            f"cannot fetch checkpoint {model!r} from the Hugging Face Hub ({type(e).__name__}: {e}). "
            f"Without network, download it elsewhere (`huggingface-cli download {model} --local-dir DIR`) "
            f"and point the deploy YAML's `model:` at DIR."
        ) from e


def dummy_config_dir(model: str | os.PathLike) -> Path:
    """Where `--load-format dummy` reads config.json: a local checkpoint dir, else the shipped preset of a
    released checkpoint (presets/<org>__<name>/, the real config.json of e.g. Qwen/Qwen3-ASR-1.7B)."""
    local = Path(model)
    if (local / "config.json").exists():
        return local
    preset = PRESETS_DIR / str(model).replace("/", "__")
    if not (preset / "config.json").exists():
        known = sorted(p.name.replace("__", "/") for p in PRESETS_DIR.iterdir() if (p / "config.json").exists())
        raise CheckpointError(f"--load-format dummy: no config.json in {model!r} and no preset for it (known: {known})")
    return preset


def read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def safetensors_files(ckpt: Path) -> list[Path]:
    index = ckpt / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(read_json(index)["weight_map"].values()))
        return [ckpt / s for s in shards]
    single = ckpt / "model.safetensors"
    if single.exists():
        return [single]
    raise CheckpointError(f"no model.safetensors or model.safetensors.index.json in {ckpt} (only safetensors are supported)")


def iter_tensors(ckpt: Path, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(name without prefix, tensor) for every tensor whose name starts with `prefix`."""
    for file in safetensors_files(ckpt):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                if name.startswith(prefix):
                    yield name[len(prefix):], f.get_tensor(name)


def load_into(module: nn.Module, tensors: Iterator[tuple[str, torch.Tensor]], *, where: str = "",
              ignore: tuple[str, ...] = ()) -> None:
    """Copy named tensors into `module`'s parameters/buffers (casting dtype); every parameter must be found."""
    params = dict(module.named_parameters())
    params.update(dict(module.named_buffers()))
    seen = set()
    unexpected = []
    for name, tensor in tensors:
        target = params.get(name)
        if target is None:
            if not name.startswith(ignore):
                unexpected.append(name)
            continue
        if target.shape != tensor.shape:
            raise CheckpointError(f"{where}: {name} has shape {tuple(tensor.shape)}, model expects {tuple(target.shape)}")
        with torch.no_grad():
            target.copy_(tensor.to(target.dtype))
        seen.add(name)
    missing = [n for n, _ in module.named_parameters() if n not in seen]
    if missing or unexpected:
        raise CheckpointError(f"{where}: weights do not match the model; missing {missing[:8]}, unexpected {unexpected[:8]}")


def init_dummy(module: nn.Module, seed: int = 0, std: float = 0.02) -> None:
    """`--load-format dummy`: random weights (norm weights 1) for full-size benchmarks without a download.

    Drawn on each parameter's own device, so an 8B model on a GPU initialises in seconds.
    """
    generators: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight") or p.dim() == 1 and "norm" in name:
                p.fill_(1.0)
                continue
            gen = generators.setdefault(p.device, torch.Generator(device=p.device).manual_seed(seed))
            p.copy_(torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32).mul_(std).to(p.dtype))
