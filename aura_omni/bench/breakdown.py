"""Where a run's time went on the server, from an aura-omni server's `/metrics` read before and after the run: the
mean of each turn phase (`aura_omni:turn_phase_seconds`) and, per stage, the mean wait in front of its engine, the
Talker's wait for its text, Code2Wav's first windows and time to its first output
(`aura_omni:stage_queue_time_seconds`, `aura_omni:stage_input_wait_seconds`, `aura_omni:stage_first_window_seconds`,
`aura_omni:stage_time_to_first_output_seconds`); and the server's own first audio (mean, and p95 from the histogram's
buckets) and underruns per endpoint, as it handed each chunk to the transport: beside the client's figures they split
a run's latency into the server's part and the network's and client's part. A server without these metrics
(vLLM-Omni, or one without the API key's access) gives none, never an error."""

from __future__ import annotations

import re

import httpx

from .. import metric_names as names
from ..pipeline.turn import TURN_PHASES

_HISTOGRAMS = {"phase": (names.TURN_PHASE, "phase"),
               "queue": (names.STAGE_QUEUE_TIME, "stage"),
               "input_wait": (names.STAGE_INPUT_WAIT, "stage"),
               "first_window": (names.STAGE_FIRST_WINDOW, "stage"),
               "first_output": (names.STAGE_TIME_TO_FIRST_OUTPUT, "stage"),
               "add": (names.STAGE_ADD_TIME, "stage"),
               "step": (names.STAGE_STEP_TIME, "stage"),
               "device_wait": (names.STAGE_DEVICE_WAIT, "stage"),
               "gc": (names.GC_PAUSE, "generation"),
               "ttfa": (names.AUDIO_TTFP, "endpoint"),
               "loop_lag": (names.EVENT_LOOP_LAG, None)}  # no label: read as label "server"
_QUANTILES = ("ttfa", "loop_lag")  # histograms whose p95 is also read from their buckets
_UNDERRUNS = names.AUDIO_UNDERRUNS + "_total"
_COMPILES, _COMPILE_SECONDS = names.KERNEL_COMPILES, names.KERNEL_COMPILE_SECONDS
_STEPS, _PROMPT_STEPS = names.STAGE_ENGINE_STEPS + "_total", names.STAGE_PROMPT_STEPS + "_total"
_SEAT_BOUND_STEPS = names.STAGE_SEAT_BOUND_STEPS + "_total"
_ALLOCATOR_CALLS = names.GPU_ALLOCATOR_CALLS + "_total"


def parse(text: str) -> dict[str, dict[str, tuple[float, float]]]:
    """kind (phase, queue, input_wait, first_window, first_output, add, step, device_wait; gc by generation; loop_lag;
    kernel_compiles by phase) -> label -> (sum seconds, count) from Prometheus text; "ttfa_buckets" and
    "loop_lag_buckets" -> label -> bound -> cumulative count; "prompt_steps" -> stage -> (steps that took prompts,
    steps, steps with every seat taken while requests waited); "gpu_allocator" -> device -> call (malloc, free, retry)
    -> count."""
    out: dict = {}
    for kind, (metric, label) in _HISTOGRAMS.items():
        labelled = rf'\{{{label}="([^"]+)"\}}' if label else "()"
        got: dict[str, list[float]] = {}
        for part, value, number in re.findall(rf'^{metric}_(sum|count){labelled} (\S+)$', text, re.M):
            got.setdefault(value or "server", [0.0, 0.0])[part == "count"] = float(number)
        out[kind] = {k: (v[0], v[1]) for k, v in got.items()}
        if kind in _QUANTILES:
            labelled = rf'{label}="([^"]+)",' if label else "()"
            buckets: dict[str, dict[float, float]] = {}
            for value, le, number in re.findall(rf'^{metric}_bucket\{{{labelled}le="([^"]+)"\}} (\S+)$', text, re.M):
                buckets.setdefault(value or "server", {})[float(le)] = float(number)
            out[kind + "_buckets"] = buckets
    out["underruns"] = {v: float(n) for v, n in re.findall(rf'^{_UNDERRUNS}\{{endpoint="([^"]+)"\}} (\S+)$', text, re.M)}
    made = dict(re.findall(rf'^{_COMPILES}_total\{{phase="([^"]+)"\}} (\S+)$', text, re.M))
    took = dict(re.findall(rf'^{_COMPILE_SECONDS}_total\{{phase="([^"]+)"\}} (\S+)$', text, re.M))
    out["kernel_compiles"] = {phase: (float(took.get(phase, 0.0)), float(n)) for phase, n in made.items()}
    steps = dict(re.findall(rf'^{_STEPS}\{{stage="([^"]+)"\}} (\S+)$', text, re.M))
    prompts = dict(re.findall(rf'^{_PROMPT_STEPS}\{{stage="([^"]+)"\}} (\S+)$', text, re.M))
    full = dict(re.findall(rf'^{_SEAT_BOUND_STEPS}\{{stage="([^"]+)"\}} (\S+)$', text, re.M))
    out["prompt_steps"] = {stage: (float(prompts.get(stage, 0.0)), float(n), float(full.get(stage, 0.0)))
                           for stage, n in steps.items()}
    calls: dict[str, dict[str, float]] = {}
    for device, call, n in re.findall(rf'^{_ALLOCATOR_CALLS}\{{device="([^"]+)",call="([^"]+)"\}} (\S+)$', text, re.M):
        calls.setdefault(device, {})[call] = float(n)
    out["gpu_allocator"] = calls
    return out


def _quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """Seconds below which a fraction q of the new observations fell, interpolated inside its bucket (as
    Prometheus' histogram_quantile does); None when there are none."""
    edges = sorted(after)
    counts = [after[e] - before.get(e, 0.0) for e in edges]  # cumulative
    if not counts or counts[-1] <= 0:
        return None
    rank, low, below = q * counts[-1], 0.0, 0.0
    for edge, cum in zip(edges, counts):
        if cum >= rank:
            if edge == float("inf"):
                return low  # past the last finite bucket: its bound is all that is known
            return low + (edge - low) * (rank - below) / max(cum - below, 1e-12)
        low, below = edge, cum
    return None


async def scrape(client: httpx.AsyncClient, base_url: str, headers: dict) -> dict | None:
    try:
        r = await client.get(base_url.rstrip("/") + "/metrics", headers=headers, timeout=10)
    except httpx.HTTPError:
        return None
    return parse(r.text) if r.status_code == 200 else None


def means(before: dict | None, after: dict | None) -> dict[str, dict[str, dict]]:
    """kind -> label -> {"n", "mean_ms"} of what happened between two scrapes (labels with nothing new left out);
    "ttfa_p95" -> endpoint -> {"ms"} and "loop_lag_p95" -> "server" -> {"ms"}, "underruns" -> endpoint -> {"n"}."""
    if not after:
        return {}
    out: dict[str, dict[str, dict]] = {}
    for kind, labels in after.items():
        prev = (before or {}).get(kind, {})
        for label, now in labels.items():
            if kind.endswith("_buckets"):
                p95 = _quantile(prev.get(label, {}), now, 0.95)
                if p95 is not None:
                    out.setdefault(kind.removesuffix("_buckets") + "_p95", {})[label] = {"ms": round(1000 * p95, 1)}
            elif kind == "underruns":
                if (n := int(now - prev.get(label, 0.0))) > 0:
                    out.setdefault(kind, {})[label] = {"n": n}
            elif kind == "gpu_allocator":
                made = {call: int(n - prev.get(label, {}).get(call, 0.0)) for call, n in now.items()}
                if any(made.values()):
                    out.setdefault(kind, {})[label] = made
            elif kind == "prompt_steps":
                (prompts, steps, full), (p0, s0, f0) = now, prev.get(label, (0.0, 0.0, 0.0))
                if steps - s0 > 0:
                    out.setdefault(kind, {})[label] = {"n": int(steps - s0), "prompt": int(prompts - p0),
                                                       "seat_bound": int(full - f0)}
            else:
                (total, count), (t0, c0) = now, prev.get(label, (0.0, 0.0))
                if count - c0 > 0:
                    out.setdefault(kind, {})[label] = {"n": int(count - c0),
                                                       "mean_ms": round(1000 * (total - t0) / (count - c0), 2)}
    return out


def lines(breakdown: dict, prefix: str = "") -> list[str]:
    """The breakdown as readable lines: turn phases, stages, the server's first audio per endpoint (none when
    empty)."""
    out = []
    phases = breakdown.get("phase", {})
    if phases:
        out.append(prefix + "turn phases (mean ms): " + "  ".join(
            f"{p} {phases[p]['mean_ms']:.1f} (n={phases[p]['n']})" for p in TURN_PHASES if p in phases))
    first, queue, wait, window = (breakdown.get(k, {})
                                  for k in ("first_output", "queue", "input_wait", "first_window"))
    if first:
        out.append(prefix + "stages, mean queue / first output ms: " + "  ".join(
            f"{s} {queue.get(s, {}).get('mean_ms', 0.0):.1f} / {first[s]['mean_ms']:.1f}"
            + (f" (waited {wait[s]['mean_ms']:.1f} for input)" if s in wait else "")
            + (f" (first windows {window[s]['mean_ms']:.1f})" if s in window else "") + f" (n={first[s]['n']})"
            for s in sorted(first)))
    add, step, device = (breakdown.get(k, {}) for k in ("add", "step", "device_wait"))
    if step:
        out.append(prefix + "stage loops, mean add / step ms: " + "  ".join(
            f"{s} {add.get(s, {}).get('mean_ms', 0.0):.2f} / {step[s]['mean_ms']:.2f}"
            + (f" (device wait {device[s]['mean_ms']:.2f})" if s in device else "") + f" ({step[s]['n']} steps)"
            for s in sorted(step)))
    if prompt_steps := breakdown.get("prompt_steps"):  # steps beside which prompts were prefilled (no decode graph)
        out.append(prefix + "engine steps that took prompts: " + "  ".join(
            f"{s} {p['prompt']} of {p['n']}" for s, p in sorted(prompt_steps.items())))
        if bound := {s: p for s, p in prompt_steps.items() if p.get("seat_bound")}:  # a stage short of seats
            out.append(prefix + "engine steps with every seat taken and requests waiting: " + "  ".join(
                f"{s} {p['seat_bound']} of {p['n']}" for s, p in sorted(bound.items())))
    if devices := breakdown.get("gpu_allocator"):  # steps that waited on the driver, every stage on the device with them
        out.append(prefix + "GPU allocator calls to the driver (steps that waited on it): " + "  ".join(
            f"device {d}: cudaMalloc {c.get('malloc', 0)}, cudaFree {c.get('free', 0)}, retries {c.get('retry', 0)}"
            for d, c in sorted(devices.items())))
    if gc := breakdown.get("gc"):  # a collection holds every thread
        out.append(prefix + "garbage collection, mean pause ms: " + "  ".join(
            f"gen {g} {gc[g]['mean_ms']:.2f} (n={gc[g]['n']})" for g in sorted(gc)))
    if lag := breakdown.get("loop_lag", {}).get("server"):  # every callback of the event loop waited about this
        p95 = breakdown.get("loop_lag_p95", {}).get("server")
        out.append(prefix + f"event loop lag: mean {lag['mean_ms']:.2f} ms" + (f", p95 ~{p95['ms']:.1f} ms" if p95 else "")
                   + f" ({lag['n']} ticks)")
    if made := breakdown.get("kernel_compiles", {}).get("serving"):  # each one stalled its stage's loop
        out.append(prefix + f"Triton kernel variants made while serving: {made['n']}, "
                            f"{made['mean_ms']:.0f} ms each on average (the warm start missed them)")
    ttfa, p95, underruns = (breakdown.get(k, {}) for k in ("ttfa", "ttfa_p95", "underruns"))
    for endpoint in sorted(ttfa):
        out.append(prefix + f"server {endpoint}: first audio mean {ttfa[endpoint]['mean_ms']:.1f} ms"
                   + (f", p95 ~{p95[endpoint]['ms']:.0f} ms" if endpoint in p95 else "")
                   + f" (n={ttfa[endpoint]['n']}); underruns {underruns.get(endpoint, {}).get('n', 0)}")
    return out
