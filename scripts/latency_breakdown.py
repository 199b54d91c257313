"""Print where requests' time went since a server started, from its /metrics: each turn phase's mean and, per stage,
the mean wait in front of its engine and to its first output (aura_omni/bench/breakdown.py; `bench serve` prints
the same per run).  python scripts/latency_breakdown.py URL [LABEL] [--api-key KEY]"""

import argparse
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aura_omni.bench import breakdown  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("label", nargs="?", default="")
    p.add_argument("--api-key")
    args = p.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    text = httpx.get(args.url.rstrip("/") + "/metrics", headers=headers, timeout=30).text
    for line in breakdown.lines(breakdown.means(None, breakdown.parse(text)), prefix=f"=== {args.label} ") or [
            f"=== {args.label} no turn or stage latencies yet"]:
        print(line)


if __name__ == "__main__":
    main()
