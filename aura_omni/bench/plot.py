"""`bench serve --plot` and `bench plot`: TTFA percentiles and audio-s/s against concurrency, as a hand-written SVG (no
plotting library). Concurrency levels sit at equal spacing in the order they were run.

    aura-omni bench plot s8.json s16.json s32.json s64_spread.json --out capacity.svg   # saved runs on one picture
"""

from __future__ import annotations

import argparse
import json
import math
from html import escape
from pathlib import Path

WIDTH, HEIGHT = 960, 400
PANEL_W, PANEL_H = 380, 260  # plot area of each panel
LEFT, TOP = 80, 70  # first panel's plot origin (top-left)
GAP = 100  # between the panels
SERIES = {"p50_ttfa_ms": ("TTFA p50", "#1f77b4"), "p95_ttfa_ms": ("TTFA p95", "#ff7f0e"),
          "p99_ttfa_ms": ("TTFA p99", "#d62728")}
THROUGHPUT = ("audio_throughput", "audio-s/s", "#2ca02c")


def nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above `value` (an axis top)."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(step * scale for step in (1, 2, 2.5, 5, 10) if step * scale >= value * (1 - 1e-9))


def _panel(x0: float, runs: list[dict], series: dict[str, tuple[str, str]], y_label: str) -> list[str]:
    values = [run[key] for run in runs for key in series if run.get(key) is not None]
    top = nice_max(max(values, default=0.0) * 1.05)
    n = len(runs)
    xs = [x0 + (PANEL_W * (i + 0.5) / n) for i in range(n)]
    y = lambda v: TOP + PANEL_H - PANEL_H * v / top  # noqa: E731
    out = [f'<rect x="{x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#888"/>']
    for k in range(6):  # y grid and ticks
        v = top * k / 5
        out.append(f'<line x1="{x0}" x2="{x0 + PANEL_W}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x0 - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    for x, run in zip(xs, runs):
        label = escape(str(run.get("label") or run["max_concurrency"] or "inf"))  # None: no limit
        out.append(f'<text x="{x:.1f}" y="{TOP + PANEL_H + 18}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{TOP + PANEL_H + 40}" text-anchor="middle">max concurrency</text>')
    out.append(f'<text transform="translate({x0 - 55},{TOP + PANEL_H / 2}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    for j, (key, (label, color)) in enumerate(series.items()):
        points = [(x, y(run[key])) for x, run in zip(xs, runs) if run.get(key) is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}"/>' for px, py in points]
        lx, ly = x0 + 10 + 110 * j, TOP - 12  # legend above the panel
        out.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 24}" y="{ly}">{escape(label)}</text>')
    return out


def concurrency_svg(report: dict) -> str:
    runs = report["runs"]
    where = report.get("model") or report["base_url"]
    title = report.get("title") or f"aura-omni bench serve: {report['backend']} on {where}"
    key, label, color = THROUGHPUT
    body = [f'<text x="{WIDTH / 2}" y="28" text-anchor="middle" font-size="16">{escape(title)}</text>',
            *_panel(LEFT, runs, SERIES, "time to first audio, ms"),
            *_panel(LEFT + PANEL_W + GAP, runs, {key: (label, color)}, "audio seconds per second")]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">\n'
            f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def merged_report(reports: list[dict], title: str | None = None) -> dict:
    """Saved results (`bench serve --save-result`) as one report: every run in the order given, a realtime run whose
    commits were spread labelled so ("64 (spread 2 s)")."""
    runs = []
    for report in reports:
        spread = report.get("commit_spread_s") or 0
        for run in report["runs"]:
            label = f"{run['max_concurrency'] or 'inf'} (spread {spread:g} s)" if spread else None
            runs.append({**run, "label": label})
    first = reports[0]
    return {"backend": first["backend"], "model": first.get("model"), "base_url": first.get("base_url"),
            "title": title, "runs": runs}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", metavar="RESULT.json", help="`bench serve --save-result` files")
    parser.add_argument("--out", required=True, metavar="FILE.svg")
    parser.add_argument("--title", default=None, help="the picture's title (default: the first file's backend and model)")


def main(args: argparse.Namespace) -> int:
    reports = []
    for name in args.results:
        try:
            reports.append(json.loads(Path(name).read_text()))
        except (OSError, ValueError) as e:
            raise SystemExit(f"aura-omni bench plot: cannot read {name}: {e}") from None
        if not isinstance(reports[-1], dict) or not isinstance(reports[-1].get("runs"), list):
            raise SystemExit(f"aura-omni bench plot: {name} is not a `bench serve --save-result` file (no runs)")
    Path(args.out).write_text(concurrency_svg(merged_report(reports, args.title)))
    print(f"plot: {args.out}")
    return 0
