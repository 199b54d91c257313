"""Print where turns' first audio went so far, from a server's /metrics (`aura_omni:turn_phase_seconds`): each
phase's count and mean since the server started.  python scripts/turn_phases.py URL [LABEL] [--api-key KEY]"""

import argparse
import re

import httpx

PHASES = ("asr", "aura_first_token", "speech_start", "first_audio")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("label", nargs="?", default="")
    p.add_argument("--api-key")
    args = p.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    text = httpx.get(args.url.rstrip("/") + "/metrics", headers=headers, timeout=30).text
    got = {(m[1], m[0]): float(m[2]) for m in
           re.findall(r'^aura_omni:turn_phase_seconds_(sum|count)\{phase="(\w+)"\} (\S+)$', text, re.M)}
    parts = [f"{p} n={got[(p, 'count')]:.0f} mean={1000 * got[(p, 'sum')] / got[(p, 'count')]:.1f} ms"
             for p in PHASES if got.get((p, "count"))]
    print(f"=== {args.label} turn phases: " + ("  ".join(parts) or "none yet"))


if __name__ == "__main__":
    main()
