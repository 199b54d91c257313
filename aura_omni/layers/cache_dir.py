"""The server's one cache directory: persistent compile caches and, by default, the voice library.

    root = resolve_cache_dir(None)       # ~/.cache/aura-omni, or $XDG_CACHE_HOME/aura-omni
    use_compile_caches(root)             # before any kernel compiles: Triton and Inductor keep their work there

    <root>/triton    Triton's compiled kernels (TRITON_CACHE_DIR)
    <root>/inductor  torch.compile's artefacts (TORCHINDUCTOR_CACHE_DIR)
    <root>/voices    registered voices (server/voice_library.py), unless a voice directory is given

A cache directory kept across restarts (a persistent volume in a container) spares a restart the kernel compiles of
its warm start. An environment variable the operator set wins over the directory.
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "aura-omni"
TRITON_ENV, INDUCTOR_ENV = "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/aura-omni`, else `~/.cache/aura-omni` (the XDG base directory rule)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"  # relative XDG values are invalid
    return base / APP_NAME


def resolve_cache_dir(given: str | os.PathLike | None) -> Path:
    """The cache directory a flag or deploy key names (`~` expanded), else the default; not created here."""
    return Path(given).expanduser().absolute() if given else default_cache_dir()


def voice_dir_under(cache_dir: Path) -> Path:
    return cache_dir / "voices"


def use_compile_caches(cache_dir: Path, environ: dict | None = None) -> dict[str, str]:
    """Point Triton's and Inductor's disk caches into `cache_dir` (both read the variables when they first compile,
    so call this before any kernel runs); variables already set are kept. Returns the values in effect."""
    env = os.environ if environ is None else environ
    for name, sub in ((TRITON_ENV, "triton"), (INDUCTOR_ENV, "inductor")):
        if not env.get(name):
            path = cache_dir / sub
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
    return {name: env[name] for name in (TRITON_ENV, INDUCTOR_ENV)}
