"""The environment variables aura-omni reads live in one registry (aura_omni/env.py), and docs/deploy.md documents
every one of them and every deploy key."""

import re
import subprocess
import typing
from pathlib import Path

from pydantic import BaseModel

from aura_omni import env
from aura_omni.deploy import DeployConfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_MD = (ROOT / "docs" / "deploy.md").read_text()


def _models(annotation) -> list[type[BaseModel]]:
    """The pydantic models inside a field's annotation (`Stage`, `list[Stage]`, `dict[str, Connector]`, `X | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _keys(model: type[BaseModel], seen: set) -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        keys.add(name)
        for sub in _models(field.annotation):
            if sub not in seen:
                seen.add(sub)
                keys |= _keys(sub, seen)
    return keys


def test_every_variable_of_the_registry_is_documented():
    missing = [v.name for v in env.VARIABLES if f"`{v.name}`" not in DEPLOY_MD]
    assert not missing, f"docs/deploy.md does not list {missing}"


def test_every_deploy_key_is_documented():
    missing = sorted(k for k in _keys(DeployConfig, set()) if not re.search(rf"`[\w.<>]*\b{k}\b[^`]*`", DEPLOY_MD))
    assert not missing, f"docs/deploy.md does not mention the deploy keys {missing}"


def test_only_the_registry_reads_aura_omni_variables():
    hits = subprocess.run(["grep", "-rln", "AURA_OMNI_", str(ROOT / "aura_omni")], capture_output=True,
                          text=True).stdout.split()
    assert [Path(h).relative_to(ROOT).as_posix() for h in hits] == ["aura_omni/env.py"]


def test_the_registry_reads_its_values_from_the_environment():
    got = env.read({env.API_KEY: "k", env.ALLOWED_MEDIA_DOMAINS: "a.example, b.example,", env.GEMV: "0"})
    assert got == env.ProcessEnv(api_key="k", allowed_media_domains=("a.example", "b.example"), gemv=False)
    assert env.read({}) == env.ProcessEnv()
