"""What every framework client script shares: its arguments, the user's speech, and a failure that says what broke.

The scripts run in the frameworks' venv (.venv-agents, scripts/install_framework_venvs.sh), never in the project's,
so they import nothing from aura_omni: tests/e2e/test_agent_frameworks.py starts the server and writes the speech.
Each exits 0 when its framework saw what it must; otherwise it raises, naming the step and what arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

RATE = 24000  # OpenAI Realtime's pcm16
STEP_TIMEOUT_S = 60.0  # one turn on the tiny CPU deploy takes a few seconds; a hang fails here, by name


@dataclass
class Args:
    url: str  # http://HOST:PORT
    model: str
    api_key: str
    speech: bytes  # pcm16 mono 24 kHz: a spoken phrase, then enough silence for the server's VAD to end the turn

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://", 1)


def parse_args(extra: dict[str, dict] | None = None) -> tuple[Args, argparse.Namespace]:
    parser = argparse.ArgumentParser()
    for name in ("--url", "--model", "--api-key", "--speech"):
        parser.add_argument(name, required=True)
    for name, kw in (extra or {}).items():
        parser.add_argument(name, **kw)
    ns = parser.parse_args()
    return Args(ns.url, ns.model, ns.api_key, Path(ns.speech).read_bytes()), ns


def chunks(pcm: bytes, ms: int = 100) -> list[bytes]:
    size = RATE * 2 * ms // 1000
    return [pcm[i:i + size] for i in range(0, len(pcm), size)]


def log(*parts) -> None:
    print(*parts, flush=True)


def short(event) -> str:
    """An event for a failure message, without its audio."""
    text = json.dumps(event, default=str) if not isinstance(event, str) else event
    return text if len(text) < 1500 else text[:1500] + "..."


def pydantic_problems(errors: list[dict], skip: tuple = ()) -> str:
    """A pydantic ValidationError's `errors()` as `field: message` lines. Where a union was tried member by member,
    only the closest member's errors (the fewest) are kept: the others only say the value is not of their kind."""
    by_member: dict[str, list[dict]] = defaultdict(list)
    for err in errors:
        if tuple(err["loc"]) in skip:
            continue
        member = next((str(p) for p in err["loc"] if re.fullmatch(r"Realtime[A-Za-z]+", str(p))), "")
        by_member[member].append(err)
    if not by_member:
        return ""
    kept = by_member.pop("", []) + (min(by_member.values(), key=len) if by_member else [])
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'][:160]}" for e in kept)


async def step(name: str, awaitable, timeout: float = STEP_TIMEOUT_S):
    """Await one step of the scenario; a hang becomes an AssertionError naming the step."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"{name}: nothing within {timeout:.0f} s") from None


def run(main) -> None:
    asyncio.run(main())
    log("OK")
    sys.stdout.flush()
