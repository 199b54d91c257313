"""`aura-omni bench serve`: load against any running server (aura-omni or vLLM-Omni), in `vllm bench serve`'s terms.

  aura-omni bench serve --backend speech --base-url http://localhost:8000 --model NAME \\
      --max-concurrency 1 8 32 --num-prompts 64 --save-result --result-filename tts.json --plot tts.svg

Each `--max-concurrency` value is one run of `--num-prompts` requests (a sweep when several are given); requests
start all at once (`--request-rate inf`) or with Poisson arrivals at that rate, never more than the concurrency
in flight. Per run: p50 / p95 / p99 of the time to first audio (TTFA) and to first text, the real-time factor
(a request's time to its last audio / its audio seconds), audio seconds per second of the run, underruns
(media/playback.py: a chunk that arrived after the audio before it had finished playing) and errors. Against an
aura-omni server, each run also reports the server's own account of it from `/metrics` (bench/breakdown.py: turn
phases and per-stage waits). The exit status is 1 when no request succeeded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import random
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import numpy as np

from . import breakdown
from .backends import BACKENDS, BenchConfig, RequestResult
from .inputs import data_url, load_prompts

PERCENTILES = (50, 95, 99)


def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="speech",
                        help="speech: streaming /v1/audio/speech; chat: streaming chat with audio + frames; "
                             "realtime: push-to-talk turns over /v1/realtime")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="server root, e.g. http://host:8000")
    parser.add_argument("--endpoint", default=None, help="path on the server (default: the backend's)")
    parser.add_argument("--model", default=None, help="`model` sent with each request (default: none sent)")
    parser.add_argument("--api-key", default=None, help="sent as `Authorization: Bearer KEY`")
    parser.add_argument("--max-concurrency", type=_positive_int, nargs="+", default=[None], metavar="N",
                        help="requests in flight at most (default: no limit); several values make a sweep, one run "
                             "each")
    parser.add_argument("--num-prompts", type=_positive_int, default=16, help="requests per run")
    parser.add_argument("--request-rate", type=_rate, default=math.inf,
                        help="requests per second, Poisson arrivals (default inf: all at once)")
    parser.add_argument("--seed", type=int, default=0, help="arrival times and prompt order")
    parser.add_argument("--num-warmups", type=int, default=1, help="requests sent one by one first, not counted")
    parser.add_argument("--prompts-file", default=None, help="texts to speak, one per line (default: built in)")
    parser.add_argument("--voice", default="Vivian", help="speaker (CustomVoice) or registered voice name")
    parser.add_argument("--ref-audio", default=None, metavar="FILE",
                        help="reference voice for Base checkpoints, sent with every request")
    parser.add_argument("--ref-text", default=None, help="transcript of --ref-audio (else x-vector-only cloning)")
    parser.add_argument("--max-tokens", type=_positive_int, default=None,
                        help="speech: codec frames (12.5 per audio second); chat / realtime: AURA tokens")
    parser.add_argument("--random-range-ratio", type=_ratio, default=0.0, metavar="R",
                        help="each request's --max-tokens drawn from [N(1-R), N(1+R)] (vllm bench serve's flag): "
                             "replies of one length end together, and each wave of new requests arrives as a burst")
    parser.add_argument("--ignore-eos", action="store_true", help="chat: generate --max-tokens tokens")
    parser.add_argument("--input-audio-seconds", type=float, default=3.0, help="chat / realtime: user speech")
    parser.add_argument("--num-frames", type=int, default=2, help="chat / realtime: camera frames per turn")
    parser.add_argument("--frame-size", type=_frame_size, default=(640, 480),
                        help="camera frame WIDTHxHEIGHT (or one number: square), pixels")
    parser.add_argument("--input-pace", choices=("realtime", "burst"), default="realtime",
                        help="realtime: the user's speech is appended as it is spoken, the commit after it (a live "
                             "microphone); burst: every append at once before the commit")
    parser.add_argument("--turn-detection", choices=("none", "server_vad"), default="none",
                        help="realtime: none (push to talk: the client commits after the speech) or server_vad "
                             "(a recorded phrase, then silence until the server's VAD commits; the clock starts "
                             "where the phrase ends, so it includes the VAD's 500 ms of silence)")
    parser.add_argument("--commit-spread", type=float, default=0.0, metavar="SECONDS",
                        help="realtime: the sessions open as they are sent (all at once under --max-concurrency "
                             "with the default rate) but each starts speaking at an offset spread evenly over SECONDS, "
                             "so their commits come at a steady rate instead of together (0: together, a burst)")
    parser.add_argument("--http-client", choices=("builtin", "httpx"), default="builtin",
                        help="speech / chat: the bench's own HTTP/1.1 client (its time is not the server's), or httpx "
                             "(what a client on httpx, as the OpenAI SDK, sees: its pool's time at a burst included)")
    parser.add_argument("--extra-body", type=_json_object, default={},
                        help="JSON object merged into each request (realtime: the session's extra_body)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a request counts as failed")
    parser.add_argument("--save-result", action="store_true", help="write the results as JSON")
    parser.add_argument("--result-filename", default=None, help="JSON file (default: bench-BACKEND-TIME.json)")
    parser.add_argument("--save-detailed", action="store_true", help="add every request's timings to the JSON")
    parser.add_argument("--plot", default=None, metavar="FILE",
                        help="SVG of TTFA percentiles and audio-s/s against concurrency")
    parser.add_argument("--disable-tqdm", action="store_true", help="no progress bar")
    return parser


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return n


def _ratio(value: str) -> float:
    r = float(value)
    if not 0 <= r < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1) (got {value})")
    return r


def _frame_size(value: str) -> tuple[int, int]:
    width, _, height = value.lower().partition("x")
    return _positive_int(width), _positive_int(height or width)


def _rate(value: str) -> float:
    rate = float(value)
    if not rate > 0:
        raise argparse.ArgumentTypeError(f"must be above 0 requests/s, or inf (got {value})")
    return rate


def _json_object(value: str) -> dict:
    try:
        obj = json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return obj


# ------------------------------------------------------------------------------------------------ running

class Progress:
    """A plain progress bar on stderr (a line per run when stderr is not a terminal)."""

    def __init__(self, total: int, label: str, enabled: bool):
        self.total, self.label, self.done, self.errors = total, label, 0, 0
        self.enabled = enabled
        self.live = enabled and sys.stderr.isatty()

    def update(self, result: RequestResult) -> None:
        self.done += 1
        self.errors += not result.ok
        if self.live:
            filled = int(30 * self.done / self.total)
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}"
                             f" errors {self.errors}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.live:
            sys.stderr.write("\n")
        elif self.enabled:
            print(f"{self.label}: {self.done}/{self.total} requests, {self.errors} errors", file=sys.stderr)


async def run_once(backend, prompts: list[tuple[str, int | None]], concurrency: int | None, rate: float,
                   timeout: float, rng: random.Random, progress: Progress) -> tuple[list[RequestResult], float]:
    """All (text, max tokens) prompts through `backend` with at most `concurrency` in flight; the results and the
    run's seconds."""
    gate = asyncio.Semaphore(concurrency or len(prompts))

    async def one(prompt: tuple[str, int | None]) -> RequestResult:
        async with gate:
            start = time.perf_counter()
            try:
                result = await asyncio.wait_for(backend.request(*prompt), timeout)
            except TimeoutError:
                result = RequestResult(error=f"timeout after {timeout:g} s", start=start)
        progress.update(result)
        return result

    t0 = time.perf_counter()
    tasks = []
    for i, prompt in enumerate(prompts):
        if i and math.isfinite(rate):
            await asyncio.sleep(rng.expovariate(rate))
        tasks.append(asyncio.create_task(one(prompt)))
    results = await asyncio.gather(*tasks)
    duration = time.perf_counter() - t0
    progress.close()
    return results, duration


def _percentiles(values: list[float], name: str, scale: float = 1.0, unit: str = "") -> dict:
    out = {f"mean_{name}{unit}": float(np.mean(values)) * scale if values else None}
    for p in PERCENTILES:
        out[f"p{p}_{name}{unit}"] = float(np.percentile(values, p)) * scale if values else None
    return out


def full_audio_throughput(results: list[RequestResult]) -> float | None:
    """Audio-s/s until the last request was sent, while every slot was busy (requests queued up front). After it
    fewer run, and with spread lengths the run ends on a tail of its longest requests whose pace says more about
    their draw than about the server. Each request's audio counts as arriving evenly from its first audio to its end.
    """
    t0 = min((r.start for r in results), default=0.0)
    until = max((r.start for r in results), default=0.0) - t0
    if until <= 0:
        return None
    audio = 0.0
    for r in results:
        if not r.ok or r.ttfa is None or r.latency is None:
            continue
        first, end = r.start - t0 + r.ttfa, r.start - t0 + r.latency
        if end > first:
            audio += r.audio_seconds * max(0.0, min(end, until) - first) / (end - first)
        elif end <= until:
            audio += r.audio_seconds
    return audio / until


def summarize(results: list[RequestResult], duration: float, concurrency: int | None, rate: float) -> dict:
    """One run's numbers, in vllm bench serve's naming (`p99_ttfa_ms`, `request_throughput`, ...)."""
    ok = [r for r in results if r.ok]
    audio = sum(r.audio_seconds for r in ok)
    errors: dict[str, int] = {}
    for r in results:
        if not r.ok:
            errors[r.error] = errors.get(r.error, 0) + 1
    return {
        "max_concurrency": concurrency, "request_rate": rate if math.isfinite(rate) else "inf",
        "num_prompts": len(results), "completed": len(ok), "errors": len(results) - len(ok),
        "error_messages": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
        "silent": sum(r.silent for r in ok), "duration_s": duration,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "total_audio_s": audio, "audio_throughput": audio / duration if duration > 0 else 0.0,
        "full_audio_throughput": (full_audio_throughput(results)
                                  if concurrency and len(results) > concurrency and not math.isfinite(rate) else None),
        **_percentiles([r.ttfa for r in ok if r.ttfa is not None], "ttfa", 1000, "_ms"),
        **_percentiles([r.first_text for r in ok if r.first_text is not None], "first_text", 1000, "_ms"),
        **_percentiles([r.rtf for r in ok if r.rtf is not None], "rtf"),
        "underruns": sum(r.underruns for r in ok), "requests_with_underruns": sum(r.underruns > 0 for r in ok),
        "underruns_by_position": underruns_by_position(ok),
        **_percentiles([r.latency for r in ok if r.silent], "silent_decision", 1000, "_ms"),  # commit -> listen
        **_percentiles([r.commit for r in ok if r.commit is not None], "commit", 1000, "_ms"),  # server VAD
        **_percentiles([r.transcript for r in ok if r.transcript is not None], "transcript", 1000, "_ms"),
    }


# seconds of audio already received: between the ends of the shipped window schedule's windows (1, 2, 4, 8, 16, 25
# frames of 80 ms end at 0.08, 0.24, 0.56, 1.2, 2.48, 4.48 s), so each row names the window that came late (the
# first row: the second window)
UNDERRUN_POSITIONS = (0.1, 0.3, 0.6, 1.25, 2.5, 4.5)


def underruns_by_position(results: list[RequestResult]) -> list[dict]:
    """Where in their streams the underruns came (the audio received before the late chunk, up to each bound; the
    last row unbounded), with how long the listener heard nothing: a stream's second window late says the start of
    a burst, a later one a steady-state shortfall."""
    rows = []
    for i, bound in enumerate([*UNDERRUN_POSITIONS, math.inf]):
        low = UNDERRUN_POSITIONS[i - 1] if i else 0.0
        gaps = [gap for r in results for at, gap in r.underrun_gaps if low <= at < bound]
        if gaps:
            rows.append({"audio_before_s": [low, bound if math.isfinite(bound) else None], "n": len(gaps),
                         "p50_gap_ms": float(np.median(gaps)), "max_gap_ms": max(gaps)})
    return rows


def _max_tokens(args: argparse.Namespace, rng: random.Random) -> int | None:
    """A request's cap: --max-tokens, or with --random-range-ratio R a draw from [N(1-R), N(1+R)]."""
    n, r = args.max_tokens, args.random_range_ratio
    if not n or not r:
        return n
    return rng.randint(max(1, round(n * (1 - r))), round(n * (1 + r)))


async def benchmark(args: argparse.Namespace) -> dict:
    cfg = BenchConfig(base_url=args.base_url, model=args.model, endpoint=args.endpoint, api_key=args.api_key,
                      voice=args.voice, max_tokens=args.max_tokens, ignore_eos=args.ignore_eos,
                      ref_audio=data_url(args.ref_audio) if args.ref_audio else None, ref_text=args.ref_text,
                      input_audio_seconds=args.input_audio_seconds, num_frames=args.num_frames,
                      frame_size=args.frame_size, timeout=args.timeout, extra_body=args.extra_body,
                      input_pace=args.input_pace, turn_detection=args.turn_detection,
                      commit_spread_s=args.commit_spread, http_client=args.http_client)
    texts = load_prompts(args.prompts_file)
    rng = random.Random(args.seed)
    backend = BACKENDS[args.backend](cfg)
    runs, details = [], []
    # the server's own account of each run (aura-omni's /metrics; nothing from a server without them)
    metrics_client = httpx.AsyncClient()
    metrics_url = re.sub(r"^ws", "http", args.base_url)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        for i in range(max(args.num_warmups, 0)):
            warm = await backend.request(texts[i % len(texts)])
            if not warm.ok:
                print(f"warm-up request failed: {warm.error}", file=sys.stderr)
        for concurrency in args.max_concurrency:
            prompts = [(texts[rng.randrange(len(texts))], _max_tokens(args, rng)) for _ in range(args.num_prompts)]
            progress = Progress(len(prompts), f"c={concurrency or 'inf'}", not args.disable_tqdm)
            before = await breakdown.scrape(metrics_client, metrics_url, headers)
            results, duration = await run_once(backend, prompts, concurrency, args.request_rate, args.timeout,
                                               rng, progress)
            runs.append(summarize(results, duration, concurrency, args.request_rate))
            runs[-1]["server_breakdown"] = breakdown.means(
                before, await breakdown.scrape(metrics_client, metrics_url, headers))
            if args.save_detailed:
                t0 = min(r.start for r in results)
                details.append([{**r.as_dict(), "start": r.start - t0} for r in results])
    finally:
        await backend.aclose()
        await metrics_client.aclose()
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "backend": args.backend,
              "base_url": args.base_url, "endpoint": args.endpoint or backend.default_endpoint, "model": args.model,
              "voice": args.voice, "max_tokens": args.max_tokens, "random_range_ratio": args.random_range_ratio,
              "num_prompts": args.num_prompts,
              "request_rate": args.request_rate if math.isfinite(args.request_rate) else "inf", "runs": runs}
    if args.backend != "realtime":
        report.update(http_client=args.http_client)
    if args.backend != "speech":
        report.update(input_audio_seconds=args.input_audio_seconds, num_frames=args.num_frames)
    if args.backend == "realtime":
        report.update(input_pace=args.input_pace, commit_spread_s=args.commit_spread)
    if args.save_detailed:
        for run, requests in zip(runs, details):
            run["requests"] = requests
    return report


# ------------------------------------------------------------------------------------------------ output

def _ms(value) -> str:
    return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _num(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown_table(report: dict) -> str:
    rows = ["| concurrency | ok / sent | TTFA p50 / p95 / p99 ms | first text p50 / p95 / p99 ms | RTF p50 / p95 "
            "| audio-s/s | underruns | errors |",
            "|---|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        rows.append(
            f"| {run['max_concurrency'] or 'inf'} | {run['completed']} / {run['num_prompts']} "
            f"| {' / '.join(_ms(run[f'p{p}_ttfa_ms']) for p in PERCENTILES)} "
            f"| {' / '.join(_ms(run[f'p{p}_first_text_ms']) for p in PERCENTILES)} "
            f"| {_num(run['p50_rtf'])} / {_num(run['p95_rtf'])} | {run['audio_throughput']:.2f} "
            f"| {run['underruns']} ({run['requests_with_underruns']} requests) | {run['errors']} |")
    return "\n".join(rows)


def commit_summary(run: dict, turn_detection: str) -> str:
    """When `input_audio_buffer.committed` came: under server VAD the server decided the turn was over (timed
    from the phrase's end); in push to talk it acknowledges the client's commit (timed from sending it)."""
    times = f"p50 / p95 {_ms(run['p50_commit_ms'])} / {_ms(run['p95_commit_ms'])} ms"
    if turn_detection == "server_vad":
        what = f"the server's VAD committed {times} after the phrase ended"
    else:
        what = f"the server acknowledged the client's commit {times} after it was sent"
    return f"c={run['max_concurrency'] or 'inf'}: {what}"


def main(args: argparse.Namespace) -> int:
    if args.ref_audio and not Path(args.ref_audio).is_file():
        print(f"aura-omni bench serve: --ref-audio {args.ref_audio}: no such file", file=sys.stderr)
        return 2
    try:
        load_prompts(args.prompts_file)
    except (OSError, ValueError) as e:
        print(f"aura-omni bench serve: --prompts-file: {e}", file=sys.stderr)
        return 2
    if args.commit_spread < 0 or not math.isfinite(args.commit_spread):
        print("aura-omni bench serve: --commit-spread must be a number of seconds >= 0", file=sys.stderr)
        return 2
    if args.random_range_ratio and not args.max_tokens:
        print("aura-omni bench serve: --random-range-ratio needs --max-tokens", file=sys.stderr)
        return 2
    schemes = ("http://", "https://") + (("ws://", "wss://") if args.backend == "realtime" else ())
    if not args.base_url.startswith(schemes):
        print(f"aura-omni bench serve: --base-url must start with {' or '.join(schemes)} (got {args.base_url!r})",
              file=sys.stderr)
        return 2
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    report = asyncio.run(benchmark(args))
    rate = "inf" if not math.isfinite(args.request_rate) else f"{args.request_rate:g}/s"
    lengths = f", max tokens {args.max_tokens} x [{1 - args.random_range_ratio:g}, {1 + args.random_range_ratio:g}]" \
        if args.random_range_ratio else ""
    print(f"\n{args.backend} on {args.base_url} (model {args.model or '-'}, {args.num_prompts} requests per run, "
          f"request rate {rate}{lengths})\n")
    print(markdown_table(report))
    for run in report["runs"]:
        if run["silent"]:
            print(f"c={run['max_concurrency'] or 'inf'}: {run['silent']} silent replies, decision p50 / p95 "
                  f"{_ms(run['p50_silent_decision_ms'])} / {_ms(run['p95_silent_decision_ms'])} ms")
        if run.get("full_audio_throughput") and run["audio_throughput"]:
            print(f"c={run['max_concurrency']}: {run['full_audio_throughput']:.2f} audio-s/s until the last request was "
                  f"sent (every slot busy)")
        for row in run.get("underruns_by_position", []):
            low, high = row["audio_before_s"]
            where = f"after {low:g}-{high:g} s of audio" if high is not None else f"after {low:g} s of audio or more"
            print(f"c={run['max_concurrency'] or 'inf'}: {row['n']} underruns {where}, silence p50 / max "
                  f"{_ms(row['p50_gap_ms'])} / {_ms(row['max_gap_ms'])} ms")
        if run["p50_commit_ms"] is not None:
            print(commit_summary(run, args.turn_detection))
        if run["p50_transcript_ms"] is not None:
            print(f"c={run['max_concurrency'] or 'inf'}: the user's transcript p50 / p95 {_ms(run['p50_transcript_ms'])} / "
                  f"{_ms(run['p95_transcript_ms'])} ms after the commit")
        for message, count in run["error_messages"].items():
            print(f"c={run['max_concurrency'] or 'inf'}: {count} x {message}")
        for line in breakdown.lines(run.get("server_breakdown") or {}, prefix=f"c={run['max_concurrency'] or 'inf'}: "):
            print(line)
    if args.save_result:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(args.result_filename or f"bench-{args.backend}-{stamp}.json")
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"result: {path}")
    if args.plot:
        from .plot import concurrency_svg

        Path(args.plot).write_text(concurrency_svg(report))
        print(f"plot: {args.plot}")
    return 0 if any(run["completed"] for run in report["runs"]) else 1
