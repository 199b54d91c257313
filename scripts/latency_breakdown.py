"""Print where requests' time went so far, from a server's /metrics: each turn phase's count and mean
(`aura_omni:turn_phase_seconds`), and per stage the mean wait in front of its engine and to its first output
(`aura_omni:stage_queue_time_seconds`, `aura_omni:stage_time_to_first_output_seconds`). Cumulative since the server
started.  python scripts/latency_breakdown.py URL [LABEL] [--api-key KEY]"""

import argparse
import re

import httpx

PHASES = ("asr", "aura_first_token", "speech_start", "first_audio")


def means(text: str, metric: str, label: str) -> dict[str, tuple[int, float]]:
    """label value -> (count, mean ms) of a histogram."""
    got = {(m[1], m[0]): float(m[2]) for m in
           re.findall(rf'^{metric}_(sum|count)\{{{label}="([^"]+)"\}} (\S+)$', text, re.M)}
    return {k: (int(got[(k, "count")]), 1000 * got[(k, "sum")] / got[(k, "count")])
            for k, kind in got if kind == "count" and got[(k, "count")]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("label", nargs="?", default="")
    p.add_argument("--api-key")
    args = p.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    text = httpx.get(args.url.rstrip("/") + "/metrics", headers=headers, timeout=30).text
    phases = means(text, "aura_omni:turn_phase_seconds", "phase")
    queue = means(text, "aura_omni:stage_queue_time_seconds", "stage")
    first = means(text, "aura_omni:stage_time_to_first_output_seconds", "stage")
    print(f"=== {args.label} turn phases: " + ("  ".join(f"{k} n={phases[k][0]} {phases[k][1]:.1f} ms"
                                                      for k in PHASES if k in phases) or "none"))
    print(f"=== {args.label} stages (mean queue / first output): " + "  ".join(
        f"{s} n={first[s][0]} {queue.get(s, (0, 0.0))[1]:.1f} / {first[s][1]:.1f} ms" for s in first))


if __name__ == "__main__":
    main()
