"""Which kind of request the server's memory grows with: after a mixed warm-up, the soak's load one group of job
kinds at a time, each group's growth per job (issue 31: a soak's slope, split by what causes it).

For each group it runs `scripts/soak.py`'s jobs of those kinds only for `--minutes-per-group`, waits for every stage
to be idle, and compares the samples before and after: the C heap's bytes in use and the interpreter's memory blocks
(from `/metrics`: memory something holds, whatever the allocator does with freed pages) and, for a local server
(`--server-pid`), anonymous and resident pages. A kind that leaks shows as bytes per job that stay when its group is
run again (`--rounds 2`); a cache filling towards its bound shows in the first round only.

    python scripts/heap_by_kind.py --url http://127.0.0.1:8091 --server-pid PID --report heap_by_kind.json

The report is rewritten after every group (`finished` false until the end), so a run across device calls brings back
what it has so far.
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import soak  # noqa: E402

GROUPS = ["speech,speech_wav", "chat,chat_audio_in", "chat_leave", "transcription", "realtime", "realtime_barge_in",
          "realtime_leave", "hostile"]
MEASURES = {"heap_mb": 1024, "anon_mb": 1024, "rss_mb": 1024, "py_blocks": 1}  # per job: KiB, or blocks
PER_JOB = {"heap_mb": "heap_kib", "anon_mb": "anon_kib", "rss_mb": "rss_kib", "py_blocks": "py_blocks"}


def growth_per_job(before: dict, after: dict, jobs: int) -> dict:
    """What each measure grew by over a phase, per job of it (KiB, or interpreter blocks)."""
    return {PER_JOB[k]: round((after[k] - before[k]) * scale / jobs, 2)
            for k, scale in MEASURES.items() if jobs and before.get(k) is not None and after.get(k) is not None}


async def phase(args, minutes: float, kinds: list[str] | None) -> dict:
    """One run of the soak's load (only `kinds`, or the whole mix), from a sample before it to one after the stages
    are idle again."""
    run_args = argparse.Namespace(**{**vars(args), "minutes": minutes, "warmup_minutes": minutes, "kinds": kinds,
                                     "report": None, "flat_limit": soak.FLAT_LIMIT})
    report = await soak.Soak(run_args).run()
    before, after = report["memory_samples"][0], report["memory_samples"][-1]
    return {"kinds": kinds or "all", "minutes": minutes, "jobs": report["jobs"],
            "unexpected_errors": report["unexpected_errors"], "outcomes": report["outcomes"],
            "before": {k: before.get(k) for k in (*MEASURES, "prefix_blocks")},
            "after": {k: after.get(k) for k in (*MEASURES, "prefix_blocks")},
            "per_job": growth_per_job(before, after, report["jobs"])}


def write(path: Path | None, report: dict) -> None:
    if path:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1))
        tmp.replace(path)


def table(rows: list[dict]) -> str:
    lines = ["| round | kinds | jobs | heap KiB/job | interpreter blocks/job | anon KiB/job | RSS KiB/job | errors |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r["per_job"]
        lines.append(f"| {r.get('round', '-')} | {r['kinds'] if isinstance(r['kinds'], str) else ','.join(r['kinds'])} "
                     f"| {r['jobs']} | {g.get('heap_kib', '-')} | {g.get('py_blocks', '-')} | {g.get('anon_kib', '-')} "
                     f"| {g.get('rss_kib', '-')} | {r['unexpected_errors']} |")
    return "\n".join(lines)


async def main_async(args) -> dict:
    report = {"finished": False, "warmup": None, "groups": []}
    report["warmup"] = await phase(args, args.warmup_minutes, None)
    write(args.report, report)
    for n in range(1, args.rounds + 1):
        for group in args.groups:
            row = await phase(args, args.minutes_per_group, group.split(","))
            report["groups"].append({"round": n, **row})
            write(args.report, report)
            print(table([report["groups"][-1]]).splitlines()[-1], flush=True)
    report["finished"] = True
    write(args.report, report)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8191")
    p.add_argument("--api-key")
    p.add_argument("--model", default=None, help="the served model name (default: the server's first)")
    p.add_argument("--server-pid", type=int)
    p.add_argument("--warmup-minutes", type=float, default=4)
    p.add_argument("--minutes-per-group", type=float, default=1.5)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--groups", nargs="+", default=GROUPS, help="comma-separated kinds per group")
    p.add_argument("--concurrency", type=int, default=12)
    p.add_argument("--sample-s", type=float, default=10)
    p.add_argument("--warm-timeout", type=float, default=600)
    p.add_argument("--job-timeout", type=float, default=120)
    p.add_argument("--aura-tokens", type=int, default=16)
    p.add_argument("--tts-tokens", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", type=Path)
    args = p.parse_args(argv)
    unknown = {k for g in args.groups for k in g.split(",")} - set(soak.WEIGHTS)
    if unknown:
        p.error(f"unknown kinds {sorted(unknown)}: the soak's mix has {', '.join(soak.WEIGHTS)}")
    if args.model is None:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        args.model = httpx.get(args.url.rstrip("/") + "/v1/models", headers=headers).json()["data"][0]["id"]
    report = asyncio.run(main_async(args))
    print(table(report["groups"]))
    failed = [r for r in [report["warmup"], *report["groups"]] if r["unexpected_errors"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
