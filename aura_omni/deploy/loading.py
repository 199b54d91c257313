"""Reading a deploy file: YAML -> a validated `DeployConfig`, every mistake refused with the file and the field path
(`configs/x.yaml: stages[1].gpu_memory_utilization: must be <= 1 (got 7)`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from aura_omni.deploy.refusals import refusals
from aura_omni.deploy.schema import DeployConfig, DeployConfigError

def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _explain(err: dict) -> tuple[str, str]:
    """(field path, message) for one pydantic error, in plain words."""
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p and p.startswith(("function", "literal"))))
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        return _loc(loc), "unknown key"
    if kind == "missing":
        return _loc(loc), "required key is missing"
    bounds = {"less_than_equal": "<=", "less_than": "<", "greater_than_equal": ">=", "greater_than": ">"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        limit = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
        return _loc(loc), f"must be {bounds[kind]} {limit} (got {got!r})"
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        path, sep, rest = msg.partition(": ")
        if sep and loc == () and " " not in path:
            return path, rest
        return _loc(loc), msg
    return _loc(loc), f"{err['msg'].rstrip('.').lower()} (got {got!r})"


def parse_deploy_config(data: Any, source: str = "<memory>", default_model: str | None = None) -> DeployConfig:
    """Validate a parsed deploy mapping; `default_model` (the CLI's MODEL) fills stages without `model`."""
    if not isinstance(data, dict):
        raise DeployConfigError(f"{source}: the deploy file must be a mapping of keys (got {type(data).__name__})")
    if default_model and isinstance(data.get("stages"), list):
        data = dict(data, stages=[dict(s, model=s.get("model") or default_model) if isinstance(s, dict) else s
                                  for s in data["stages"]])
    try:
        cfg = DeployConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            path, msg = _explain(err)
            lines.append(f"{source}: {path}: {msg}" if path else f"{source}: {msg}")
        raise DeployConfigError("\n".join(lines)) from None
    cfg._source = source
    for name in ["", *cfg.platforms]:  # the file as written, and as each platform's overrides make it
        refused = refusals(cfg.for_platform(name) if name else cfg)
        if refused:
            on = f" (platforms.{name} merged)" if name else ""
            raise DeployConfigError("\n".join(f"{source}: {path}: {why}{on}" for path, why in refused))
    return cfg


def load_deploy_config(path: str | os.PathLike, default_model: str | None = None,
                       overrides: dict[str, Any] | None = None) -> DeployConfig:
    """Read and validate a deploy YAML; relative stage `model` paths resolve against the file's folder.
    `overrides` (top-level keys, from `serve` flags) replace the file's before it is checked, so a file whose
    replicas need Ray is valid when the flag asks for Ray."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DeployConfigError(f"{path}: cannot read deploy file ({e.strerror or e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DeployConfigError(f"{path}: not valid YAML ({e})") from None
    if overrides and isinstance(data, dict):
        data = {**data, **overrides}
    cfg = parse_deploy_config(data, str(path), default_model)
    for s in cfg.stages:
        if s.model.startswith(("./", "../")):
            s.model = str((path.parent / s.model).resolve())
    for key in ("cache_dir", "voice_dir"):  # a relative directory is the file's neighbour, as a relative model is
        value = getattr(cfg, key)
        if value and not Path(value).expanduser().is_absolute():
            setattr(cfg, key, str((path.parent / value).resolve()))
    return cfg


def single_model_config(model: str, pipeline: str = "qwen3_tts") -> DeployConfig:
    """The deploy config implied by `aura-omni serve MODEL` without --deploy-config (TTS checkpoints only)."""
    if pipeline != "qwen3_tts":
        raise DeployConfigError(f"serving {model!r} alone needs --deploy-config for pipeline {pipeline!r}")
    return parse_deploy_config({
        "pipeline": "qwen3_tts",
        "stages": [{"stage_id": 0, "model": model}, {"stage_id": 1, "model": model}],
    }, f"<serve {model}>")
