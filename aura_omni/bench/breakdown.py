"""Where a run's time went on the server, from an aura-omni server's `/metrics` read before and after the run: the
mean of each turn phase (`aura_omni:turn_phase_seconds`) and, per stage, the mean wait in front of its engine, the
Talker's wait for its text and time to its first output (`aura_omni:stage_queue_time_seconds`,
`aura_omni:stage_input_wait_seconds`, `aura_omni:stage_time_to_first_output_seconds`).
A server without these metrics (vLLM-Omni, or one without the API key's access) gives none, never an error."""

from __future__ import annotations

import re

import httpx

from ..pipeline.turn import TURN_PHASES
_HISTOGRAMS = {"phase": ("aura_omni:turn_phase_seconds", "phase"),
               "queue": ("aura_omni:stage_queue_time_seconds", "stage"),
               "input_wait": ("aura_omni:stage_input_wait_seconds", "stage"),
               "first_output": ("aura_omni:stage_time_to_first_output_seconds", "stage")}


def parse(text: str) -> dict[str, dict[str, tuple[float, float]]]:
    """kind (phase, queue, input_wait, first_output) -> label -> (sum seconds, count) from Prometheus text."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for kind, (metric, label) in _HISTOGRAMS.items():
        got: dict[str, list[float]] = {}
        for part, value, number in re.findall(rf'^{metric}_(sum|count)\{{{label}="([^"]+)"\}} (\S+)$', text, re.M):
            got.setdefault(value, [0.0, 0.0])[part == "count"] = float(number)
        out[kind] = {k: (v[0], v[1]) for k, v in got.items()}
    return out


async def scrape(client: httpx.AsyncClient, base_url: str, headers: dict) -> dict | None:
    try:
        r = await client.get(base_url.rstrip("/") + "/metrics", headers=headers, timeout=10)
    except httpx.HTTPError:
        return None
    return parse(r.text) if r.status_code == 200 else None


def means(before: dict | None, after: dict | None) -> dict[str, dict[str, dict]]:
    """kind -> label -> {"n", "mean_ms"} of what happened between two scrapes (labels with nothing new left out)."""
    if not after:
        return {}
    out: dict[str, dict[str, dict]] = {}
    for kind, labels in after.items():
        for label, (total, count) in labels.items():
            t0, c0 = (before or {}).get(kind, {}).get(label, (0.0, 0.0))
            if count - c0 > 0:
                out.setdefault(kind, {})[label] = {"n": int(count - c0),
                                                   "mean_ms": round(1000 * (total - t0) / (count - c0), 2)}
    return out


def lines(breakdown: dict, prefix: str = "") -> list[str]:
    """The breakdown as two readable lines (none when empty)."""
    out = []
    phases = breakdown.get("phase", {})
    if phases:
        out.append(prefix + "turn phases (mean ms): " + "  ".join(
            f"{p} {phases[p]['mean_ms']:.1f} (n={phases[p]['n']})" for p in TURN_PHASES if p in phases))
    first, queue, wait = (breakdown.get(k, {}) for k in ("first_output", "queue", "input_wait"))
    if first:
        out.append(prefix + "stages, mean queue / first output ms: " + "  ".join(
            f"{s} {queue.get(s, {}).get('mean_ms', 0.0):.1f} / {first[s]['mean_ms']:.1f}"
            + (f" (waited {wait[s]['mean_ms']:.1f} for input)" if s in wait else "") + f" (n={first[s]['n']})"
            for s in sorted(first)))
    return out
