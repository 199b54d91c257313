"""Soak: N minutes of mixed load against a running aura-omni server; memory must stay flat and nothing fail.

    aura-omni make-tiny /tmp/soak-tiny
    aura-omni serve --deploy-config /tmp/soak-tiny/deploy.yaml --device cpu --port 8191 &
    python scripts/soak.py --url http://127.0.0.1:8191 --minutes 30 --server-pid $! --report soak.json

CI runs 2 minutes of it (tests/e2e/test_soak.py); docs/reliability.md has the recorded runs. `--concurrency`
workers (default 2) each loop over a weighted mix of jobs, loopback only:

- `speech`, `speech_wav`: `/v1/audio/speech` streamed PCM, and a whole WAV;
- `chat`, `chat_audio_in`: streaming `/v1/chat/completions` (text in; speech in), audio out;
- `chat_leave`: a streaming chat left as soon as its first audio arrives (client disconnect mid-stream);
- `transcription`: `/v1/audio/transcriptions` of a short clip;
- `realtime`: a push-to-talk turn on `/v1/realtime`;
- `realtime_barge_in`: a turn cancelled (`response.cancel`) at its first audio, then a second turn to the end;
- `realtime_leave`: a socket closed at the first audio of its reply;
- `hostile`: a bad request (malformed JSON, unknown model, text sent as audio, a limit passed): its 4xx is expected.

Every job is timed; any 5xx, hang (past `--job-timeout`), dropped connection, in-band error, or a 4xx where a 2xx was
due counts as an unexpected error, by kind. Every `--sample-s` seconds it reads the server's RSS
(`/proc/<--server-pid>/status`: VmRSS, and of it anonymous, file-backed and shared pages; else `/metrics`
aura_omni:resident_memory_bytes), GPU memory in use (`nvidia-smi`, when there is one), from `/metrics` the C heap's
bytes in use, the interpreter's memory blocks and torch's pinned host memory (parts of the RSS) and what the C heap's
trims gave back, each stage process's resident memory (a process deploy, `process_stages`: judged flat or not as the
server's is, `stage_processes_rss_flat`), and `/health` (a 503 is an error). It prints one line per minute (jobs,
errors, latency p50/p95/p99 by kind, each stage's requests in flight and busy seconds), under it that minute's turn
phases and stage waits from `/metrics` (aura_omni/bench/breakdown.py), and at the end a JSON report (`--report`).

Detached (a run longer than one shell, e.g. across device calls): start it with `nohup ... > soak.log 2>&1 &`;
`--report` is rewritten every minute (`finished` false until the end), with RSS by minute, and the log has a line a
minute.

Pass: 0 unexpected errors; RSS at the end within 5% of RSS at the end of warm-up (`--warmup-minutes`, default 10% of
the run, at least 1); every stage idle on `/health` (nothing running, queued or in flight; every KV block free) a
few seconds after the load stops. The last memory sample waits until no dropped duplex session is held for a resume
any more (up to their 30 s grace). The exit status is 0 on a pass. Apart from the pass, it prints a flatness verdict:
RSS at the end (the mean of the last 3 samples) within ±`--flat-limit` (1%) of RSS after warm-up (the mean of the
first 3 after it), with the slope in MB a minute (`rss_flat` in the report; `anon_flat` the same of anonymous pages),
and, for a local server, which mappings of `/proc/PID/smaps` the RSS changed in since warm-up (`[anon]`, `[heap]`, a
library by path: `rss_growth_by_mapping`).

The load starts once the server's background warm start is done (`/health` lists no stage `warming`; up to
`--warm-timeout` s): each CUDA graph it captures holds host and device memory for good, and one captured under the
soak's load would read as growth. A sample taken while some stage is still warming records it (`warming`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aura_omni.bench import breakdown  # noqa: E402
from aura_omni.bench.inputs import speech_like, wav_bytes  # noqa: E402
from aura_omni.media.encode import to_pcm16  # noqa: E402

WEIGHTS = {"speech": 3, "speech_wav": 1, "chat": 3, "chat_audio_in": 2, "chat_leave": 1, "transcription": 2,
           "realtime": 2, "realtime_barge_in": 1, "realtime_leave": 1, "hostile": 2}
SENTENCES = ["Hello there, how are you today?", "The weather is calm and the sea is quiet.",
             "Please read this sentence out loud.", "Numbers like 42 and 7 are fine too.",
             "A short one.", "Soak tests run for a long time, and nothing may leak."]
GROWTH_LIMIT = 0.05  # RSS growth after warm-up
FLAT_LIMIT = 0.01  # the flatness verdict: RSS at the end within this of RSS after warm-up (issue 31's target)
DETACHED_GRACE_S = 35.0  # the server holds a dropped duplex session 30 s for a resume (disconnect_grace_s)


class Unexpected(Exception):
    """A job's outcome that the server should never give."""


class Soak:
    def __init__(self, args):
        self.args = args
        self.base = args.url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        self.client = httpx.AsyncClient(base_url=self.base, headers=self.headers,
                                        timeout=httpx.Timeout(args.job_timeout, connect=10.0))
        self.rng = random.Random(args.seed)
        ref = wav_bytes(speech_like(1.0, 16000), 16000)
        self.ref_b64 = base64.b64encode(ref).decode()
        self.clip_wav = wav_bytes(speech_like(1.5, 16000), 16000)
        self.pcm_16k = to_pcm16(speech_like(1.0, 16000))
        self.results: list[tuple[float, str, str, float]] = []  # (t since start, kind, outcome, seconds)
        self.errors: Counter = Counter()
        self.error_examples: dict[str, str] = {}
        self.memory: list[dict] = []
        self.warm_wait_s = 0.0
        self.mappings_at: dict[str, float] | None = None  # RSS by mapping at the end of warm-up (`--server-pid`)
        self.start = time.monotonic()

    def warm_s(self) -> float:
        """Seconds of warm-up: `--warmup-minutes`, default 10% of the run, at least a minute."""
        a = self.args
        return max(60.0, a.warmup_minutes * 60 if a.warmup_minutes else a.minutes * 6)

    # ------------------------------------------------------------------ jobs
    def tts_info(self) -> dict:
        return {"tts_ref_audio": self.ref_b64, "tts_x_vector_only_mode": True,
                "tts_max_new_tokens": self.args.tts_tokens}

    async def speech(self, stream: bool = True) -> str:
        body = {"model": self.args.model, "input": self.rng.choice(SENTENCES), "voice": "soak",
                "ref_audio": self.ref_b64, "x_vector_only_mode": True, "max_new_tokens": self.args.tts_tokens}
        body.update({"response_format": "pcm", "stream": True} if stream else {"response_format": "wav"})
        async with self.client.stream("POST", "/v1/audio/speech", json=body) as r:
            data = await r.aread()
            self.expect_ok(r, data)
        if not stream and data[:4] != b"RIFF":
            raise Unexpected("speech: the body is not a WAV file")
        return "ok"

    def chat_body(self, audio_in: bool) -> dict:
        content = ([{"type": "input_audio", "input_audio": {"data": base64.b64encode(self.clip_wav).decode(),
                                                            "format": "wav"}}] if audio_in
                   else [{"type": "text", "text": self.rng.choice(SENTENCES)}])
        return {"model": self.args.model, "stream": True, "messages": [{"role": "user", "content": content}],
                "max_tokens": self.args.aura_tokens, "audio": {"voice": "soak", "format": "pcm16"},
                "additional_information": self.tts_info()}

    async def chat(self, audio_in: bool = False, leave: bool = False) -> str:
        async with self.client.stream("POST", "/v1/chat/completions", json=self.chat_body(audio_in)) as r:
            if r.status_code != 200:
                self.expect_ok(r, await r.aread())
            done = False
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                event = json.loads(line[6:])
                if "error" in event:
                    raise Unexpected(f"in-band error {event['error'].get('code')}: {event['error'].get('message')}")
                if leave and any((c.get("delta") or {}).get("audio", {}).get("data") for c in event["choices"]):
                    return "left"  # closing the stream here is the disconnect
            if not done:
                raise Unexpected("the chat stream ended without [DONE]")
        return "left_late" if leave else "ok"

    async def transcription(self) -> str:
        files = {"file": ("clip.wav", self.clip_wav, "audio/wav")}
        r = await self.client.post("/v1/audio/transcriptions", files=files, data={"model": self.args.model})
        self.expect_ok(r, r.content)
        if "text" not in r.json():
            raise Unexpected("transcription without text")
        return "ok"

    async def hostile(self) -> str:
        case = self.rng.choice(["bad_json", "unknown_model", "text_as_audio", "over_limit", "bad_base64"])
        if case == "bad_json":
            r = await self.client.post("/v1/chat/completions", content=b'{"model": "x", "messages": [',
                                       headers={"Content-Type": "application/json"})
        elif case == "unknown_model":
            r = await self.client.post("/v1/audio/speech", json={"model": "no-such-model", "input": "hi"})
        elif case == "text_as_audio":
            r = await self.client.post("/v1/audio/transcriptions", data={"model": self.args.model},
                                       files={"file": ("a.wav", b"this is not audio at all", "audio/wav")})
        elif case == "over_limit":
            body = self.chat_body(False) | {"max_tokens": 10**9, "stream": False}
            r = await self.client.post("/v1/chat/completions", json=body)
        else:
            body = {"model": self.args.model, "input": "hi", "voice": "soak", "ref_audio": "%%%not base64%%%",
                    "x_vector_only_mode": True}
            r = await self.client.post("/v1/audio/speech", json=body)
        if not 400 <= r.status_code < 500 or "error" not in r.json():
            raise Unexpected(f"hostile {case}: HTTP {r.status_code} {r.text[:200]}")
        return f"refused_{r.status_code}"

    async def realtime(self, mode: str = "turn") -> str:
        from websockets.asyncio.client import connect

        url = "ws" + self.base[4:] + "/v1/realtime"
        async with connect(url, additional_headers=self.headers, max_size=None, open_timeout=10) as ws:
            await ws.send(json.dumps({"type": "session.update", "session": {
                "modalities": ["audio", "text"], "turn_detection": None,
                "max_response_output_tokens": self.args.aura_tokens, "extra_body": self.tts_info()}}))
            await until(ws, "session.updated")
            turns = 2 if mode == "barge_in" else 1
            outcome = "ok"
            for turn in range(turns):
                for i in range(0, len(self.pcm_16k), 6400):
                    await ws.send(json.dumps({"type": "input_audio_buffer.append", "format": "pcm16",
                                              "sample_rate_hz": 16000,
                                              "audio": base64.b64encode(self.pcm_16k[i:i + 6400]).decode()}))
                await ws.send(json.dumps({"type": "input_audio_buffer.commit", "create_response": True}))
                interrupt = (mode == "barge_in" and turn == 0) or mode == "leave"
                status = await read_reply(ws, interrupt)
                if status == "audio" and mode == "leave":
                    return "left"  # `async with` closes the socket mid-response
                if status == "audio":  # barge-in at the first audio
                    await ws.send(json.dumps({"type": "response.cancel"}))
                    status = await read_reply(ws, False)
                    if status not in ("cancelled", "completed", "listening"):  # it may have ended first
                        raise Unexpected(f"realtime: response.cancel gave status {status!r}")
                    outcome = "barged_in"
                elif status not in ("completed", "listening"):
                    raise Unexpected(f"realtime: response.done status {status!r}")
            await ws.send(json.dumps({"type": "session.close"}))
            await until(ws, "session.closed")
        return outcome

    def expect_ok(self, r: httpx.Response, body: bytes) -> None:
        if r.status_code != 200:
            raise Unexpected(f"HTTP {r.status_code}: {body[:200].decode(errors='replace')}")

    # ------------------------------------------------------------------ load
    async def job(self, kind: str) -> str:
        if kind == "speech":
            return await self.speech()
        if kind == "speech_wav":
            return await self.speech(stream=False)
        if kind in ("chat", "chat_audio_in", "chat_leave"):
            return await self.chat(audio_in=kind == "chat_audio_in", leave=kind == "chat_leave")
        if kind == "transcription":
            return await self.transcription()
        if kind.startswith("realtime"):
            return await self.realtime({"realtime": "turn", "realtime_barge_in": "barge_in",
                                        "realtime_leave": "leave"}[kind])
        return await self.hostile()

    async def worker(self, deadline: float) -> None:
        wanted = getattr(self.args, "kinds", None)  # --kinds: only these of the mix
        kinds, weights = zip(*((k, w) for k, w in WEIGHTS.items() if not wanted or k in wanted))
        while time.monotonic() < deadline:
            kind = self.rng.choices(kinds, weights)[0]
            t0 = time.monotonic()
            try:
                outcome = await asyncio.wait_for(self.job(kind), self.args.job_timeout)
            except asyncio.TimeoutError:
                outcome = self.error(kind, "hang", f"no answer within {self.args.job_timeout} s")
            except Unexpected as e:
                outcome = self.error(kind, "unexpected", str(e))
            except Exception as e:  # noqa: BLE001 - a dropped connection, a refused socket: counted, never fatal
                outcome = self.error(kind, type(e).__name__, str(e))
            self.results.append((t0 - self.start, kind, outcome, time.monotonic() - t0))

    def error(self, kind: str, what: str, message: str) -> str:
        key = f"{kind}:{what}"
        self.errors[key] += 1
        self.error_examples.setdefault(key, message[:300])
        return f"error:{what}"

    async def sampler(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            await self.sample()
            await asyncio.sleep(self.args.sample_s)

    async def sample(self) -> dict:
        memory = await self.memory_metrics()
        local = self.proc_memory()
        row = {"t": round(time.monotonic() - self.start, 1), "rss_mb": local.get("rss_mb", memory.get("rss_mb")),
               "gpu_mb": gpu_mb(), **{k: v for k, v in memory.items() if k != "rss_mb"},
               **{k: v for k, v in local.items() if k != "rss_mb"}}
        if self.args.server_pid and self.mappings_at is None and row["t"] >= self.warm_s():
            self.mappings_at = mapping_rss(self.args.server_pid)  # the first sample after warm-up: growth from here
        try:
            h = await self.client.get("/health", timeout=10)
            row["health"] = h.status_code
            if h.status_code != 200:
                self.error("health", f"http_{h.status_code}", h.text[:300])
            else:  # per stage: requests in flight and seconds spent in steps so far (which stage a stall is in)
                body = h.json()
                row["stages"] = {k: {"in_flight": v.get("in_flight"), "busy_s": round(v.get("busy_s", 0), 1)}
                                 for k, v in body.get("stages", {}).items()}
                if body.get("warming"):  # graphs still captured in the background: memory that is not growth
                    row["warming"] = body["warming"]
        except Exception as e:  # noqa: BLE001
            row["health"] = None
            self.error("health", type(e).__name__, str(e))
        self.memory.append(row)
        return row

    def proc_memory(self) -> dict:
        """The server's resident memory by kind, MB, when it runs here (`--server-pid`): all of it (VmRSS), anonymous
        pages (what the process allocated: heaps, arenas, the driver's maps), pages of mapped files (libraries' code
        and data, faulted in as first used; the kernel can drop them) and shared memory."""
        if not self.args.server_pid:
            return {}
        try:
            status = Path(f"/proc/{self.args.server_pid}/status").read_text()
        except OSError:
            return {}
        out = {}
        for key, field in (("rss_mb", "VmRSS"), ("anon_mb", "RssAnon"), ("file_mb", "RssFile"),
                           ("shmem_mb", "RssShmem")):
            m = re.search(rf"{field}:\s+(\d+) kB", status)
            if m:
                out[key] = round(int(m.group(1)) / 1024, 1)
        return out

    async def memory_metrics(self) -> dict:
        """From one read of /metrics, in MB: the resident memory (when the server is not local), what of it the C
        heap has handed out, what is torch's pinned host memory (never trimmed), and what the C heap's trims gave
        back so far (stages/heap_trim.py)."""
        try:
            text = (await self.client.get("/metrics", timeout=10)).text
        except Exception:  # noqa: BLE001 - a sample without them
            return {}
        row = {}
        for key, name in (("rss_mb", "aura_omni:resident_memory_bytes"), ("heap_mb", "aura_omni:heap_in_use_bytes"),
                          ("pinned_mb", "aura_omni:pinned_host_memory_bytes"),
                          ("py_blocks", "aura_omni:python_allocated_blocks"),
                          ("trimmed_mb", "aura_omni:heap_trim_released_bytes_total")):
            m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
            if m:
                row[key] = int(float(m.group(1))) if key == "py_blocks" else round(float(m.group(1)) / 2**20, 1)
        stages = re.findall(r'^aura_omni:stage_process_resident_memory_bytes\{process="([^"]+)"\} ([0-9.e+]+)$', text,
                            re.M)
        if stages:  # a process deploy (`process_stages`): each stage process's own resident memory
            row["stage_rss_mb"] = {process: round(float(v) / 2**20, 1) for process, v in stages}
        blocks = re.findall(r'^aura_omni:prefix_cache_blocks\{stage="([^"]+)"\} ([0-9.e+]+)$', text, re.M)
        if blocks:  # each registered block holds its hash and ids on the host until it is reused
            row["prefix_blocks"] = {stage: int(float(n)) for stage, n in blocks}
        return row

    async def reporter(self, deadline: float) -> None:
        shown = 0
        scraped = await breakdown.scrape(self.client, self.base, self.headers)
        while time.monotonic() < deadline:
            await asyncio.sleep(min(60.0, max(0.0, deadline - time.monotonic()) + 0.5))
            self.write_report(None)  # a detached run's progress, readable while it runs
            window = [r for r in self.results[shown:]]
            shown = len(self.results)
            mem = self.memory[-1] if self.memory else {}
            stages = "  ".join(f"{k} {v['in_flight']} in flight, {v['busy_s']} s busy"
                               for k, v in (mem.get("stages") or {}).items())
            print(f"[{(time.monotonic() - self.start) / 60:5.1f} min] jobs {len(window):4d}  errors "
                  f"{sum(1 for r in window if r[2].startswith('error')):3d}  rss {mem.get('rss_mb')} MB  "
                  + "".join(f"({key[:-3]} {mem[key]} MB)  " for key in ("anon_mb", "file_mb", "heap_mb", "pinned_mb")
                            if mem.get(key) is not None)
                  + (f"(py {mem['py_blocks'] / 1e6:.3f}M blocks)  " if mem.get("py_blocks") is not None else "")
                  + "  ".join(f"{k} p50 {p[0]:.2f} p95 {p[1]:.2f}" for k, p in percentiles(window).items())
                  + f"  | {stages}" + (f"  | warming {mem['warming']}" if mem.get("warming") else ""),
                  flush=True)
            now = await breakdown.scrape(self.client, self.base, self.headers)
            for line in breakdown.lines(breakdown.means(scraped, now), prefix="    "):  # the minute's waits
                print(line, flush=True)
            scraped = now or scraped
            for kind, n in self.errors.items():  # what failed so far, with an example, while it runs
                print(f"    {kind}: {n}  e.g. {self.error_examples.get(kind, '')[:160]}", flush=True)

    async def wait_warm(self) -> float:
        """Until `/health` lists no stage `warming` (CUDA graphs the server captures in its lulls after ready,
        pipeline/warmup.py), at most --warm-timeout seconds: the soak measures the served steady state, and a
        capture under its load would read as growth. Returns the seconds waited; the clock starts after."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.args.warm_timeout:
            try:
                if not (await self.client.get("/health", timeout=10)).json().get("warming"):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            await asyncio.sleep(1.0)
        waited = time.monotonic() - t0
        if waited >= 1:
            print(f"waited {waited:.0f} s for the server's background warm start", flush=True)
        self.start = time.monotonic()
        return waited

    async def run(self) -> dict:
        self.warm_wait_s = await self.wait_warm()
        deadline = self.start + self.args.minutes * 60
        await self.sample()
        await asyncio.gather(self.sampler(deadline), self.reporter(deadline),
                             *(self.worker(deadline) for _ in range(self.args.concurrency)))
        idle = await self.settled()
        await self.sample()
        await self.client.aclose()
        return self.write_report(idle)

    def write_report(self, idle: dict | None) -> dict:
        """The report so far (`finished` false while the load runs), written to --report when given."""
        report = self.report(idle)
        if self.args.report:
            tmp = self.args.report.with_suffix(".tmp")
            tmp.write_text(json.dumps(report, indent=1))
            tmp.replace(self.args.report)  # a reader never sees half a file
        return report

    async def settled(self, within_s: float = 10.0) -> dict:
        """The stages' counters once the load stopped: every stage idle, every KV block back; then (up to the
        sessions' grace, 30 s) no duplex session still held for a resume after its socket dropped, so that the
        memory sampled next is not theirs."""
        t0 = time.monotonic()
        while True:
            stages = (await self.client.get("/health", timeout=10)).json().get("stages", {})
            busy = {name: c for name, c in stages.items()
                    if c.get("in_flight") or c.get("queued") or c.get("running") or c.get("waiting")
                    or c.get("free_blocks", 0) != c.get("total_blocks", 0)}
            if not busy or time.monotonic() - t0 > within_s:
                break
            await asyncio.sleep(0.2)
        detached = await self.detached_sessions()
        while detached and time.monotonic() - t0 < within_s + DETACHED_GRACE_S:
            await asyncio.sleep(1.0)
            detached = await self.detached_sessions()
        return {"idle": not busy, "busy": busy, "detached_sessions": detached,
                "seconds": round(time.monotonic() - t0, 2)}

    async def detached_sessions(self) -> int:
        """Duplex sessions the server holds for a resume (`/metrics`; 0 when it does not say)."""
        try:
            text = (await self.client.get("/metrics", timeout=10)).text
        except Exception:  # noqa: BLE001
            return 0
        m = re.search(r"^aura_omni:realtime_sessions_detached ([0-9.e+]+)$", text, re.M)
        return int(float(m.group(1))) if m else 0

    def report(self, idle: dict | None) -> dict:
        warm_s = self.warm_s()
        rss = [(m["t"], m["rss_mb"]) for m in self.memory if m["rss_mb"] is not None]
        rss_after = [(t, v) for t, v in rss if t >= warm_s]
        after = [v for _, v in rss_after]
        base = after[0] if after else None
        growth = (max(after[-3:]) - base) / base if after and base else None
        flat = flatness(rss_after, self.args.flat_limit)
        anon = [(m["t"], m["anon_mb"]) for m in self.memory if m.get("anon_mb") is not None and m["t"] >= warm_s]
        mappings = None
        if self.mappings_at is not None:  # which mappings the growth is in (every minute: a cut-short run still says)
            mappings = mapping_growth(self.mappings_at, mapping_rss(self.args.server_pid))
        by_minute = defaultdict(list)
        for r in self.results:
            by_minute[int(r[0] // 60)].append(r)
        outcomes = Counter(f"{r[1]}:{r[2]}" for r in self.results)
        report = {
            "url": self.base, "minutes": self.args.minutes, "concurrency": self.args.concurrency,
            "warm_wait_s": round(self.warm_wait_s, 1),
            "jobs": len(self.results), "outcomes": dict(sorted(outcomes.items())),
            "unexpected_errors": sum(self.errors.values()), "errors_by_kind": dict(self.errors),
            "error_examples": self.error_examples,
            "latency_s_by_kind": {k: dict(zip(("p50", "p95", "p99"), map(lambda x: round(x, 3), v)))
                                  for k, v in percentiles(self.results).items()},
            "latency_s_by_minute": {m: {k: dict(zip(("p50", "p95", "p99"), map(lambda x: round(x, 3), v)))
                                        for k, v in percentiles(rows).items()}
                                    for m, rows in sorted(by_minute.items())},
            "rss_mb": {"start": rss[0][1] if rss else None, "after_warmup": base,
                       "end": rss[-1][1] if rss else None, "max": max(v for _, v in rss) if rss else None,
                       "growth_after_warmup": None if growth is None else round(growth, 4),
                       "by_minute": rss_by_minute(rss)},
            "rss_flat": flat, "anon_flat": flatness(anon, self.args.flat_limit),
            "stage_processes_rss_flat": {  # a process deploy's stage processes, each judged as the server is
                process: flatness([(m["t"], m["stage_rss_mb"][process]) for m in self.memory
                                   if m["t"] >= warm_s and process in m.get("stage_rss_mb", {})], self.args.flat_limit)
                for process in sorted({p for m in self.memory for p in m.get("stage_rss_mb", {})})} or None,
            "rss_growth_by_mapping": mappings, "finished": idle is not None,
            "gpu_mb": [m["gpu_mb"] for m in self.memory if m.get("gpu_mb") is not None][-1:] or None,
            "memory_samples": self.memory, "stages_after": idle,
        }
        report["pass"] = (report["unexpected_errors"] == 0 and growth is not None and growth < GROWTH_LIMIT
                          and idle is not None and idle["idle"])
        return report


def flatness(after_warmup: list[tuple[float, float]], limit: float) -> dict | None:
    """Whether memory stayed flat after warm-up: the mean of its last 3 samples within ±`limit` of the mean of its first
    3 (the same number at both ends, so that neither is one sample taken at a peak of work in flight), with the
    straight-line slope in MB a minute (a leak shows as a steady slope)."""
    if len(after_warmup) < 2:
        return None
    t = [x for x, _ in after_warmup]
    v = [y for _, y in after_warmup]
    n = min(3, len(v) // 2)
    head, tail = sum(v[:n]) / n, sum(v[-n:]) / n
    change = (tail - head) / head
    mt, mv = sum(t) / len(t), sum(v) / len(v)
    var = sum((x - mt) ** 2 for x in t)
    slope = sum((x - mt) * (y - mv) for x, y in after_warmup) / var * 60 if var else 0.0
    return {"after_warmup_mb": round(head, 1), "end_mb": round(tail, 1), "change": round(change, 4),
            "slope_mb_per_min": round(slope, 3), "limit": limit, "flat": abs(change) <= limit}


def mapping_rss(pid: int) -> dict[str, float]:
    """The process's resident memory by mapping, MB, from /proc/PID/smaps: files by path, anonymous maps as `[anon]`,
    and the kernel's names (`[heap]`, `[stack]`)."""
    out: dict[str, float] = defaultdict(float)
    name = "[anon]"
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
            name = head[5].strip() if len(head) == 6 else "[anon]"
        elif line.startswith("Rss:"):
            out[name] += int(line.split()[1]) / 1024
    return dict(out)


def mapping_growth(before: dict[str, float], after: dict[str, float], top: int = 12) -> dict[str, float]:
    """The mappings whose resident memory changed most, MB, largest change first."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(before) | set(after)}
    return {k: round(v, 1) for k, v in sorted(delta.items(), key=lambda kv: -abs(kv[1]))[:top] if abs(v) >= 0.1}


def rss_by_minute(rss: list[tuple[float, float]]) -> dict[int, float]:
    """The last RSS sample of each minute, MB (the curve at a glance)."""
    out: dict[int, float] = {}
    for t, v in rss:
        out[int(t // 60)] = round(v, 1)
    return out


TOLERATED = {"response_cancel_not_active"}  # a barge-in that came as the reply ended: the reply won the race


def realtime_error(event: dict) -> bool:
    """An `error` event the soak did not provoke."""
    return event.get("type") == "error" and (event.get("error") or {}).get("code") not in TOLERATED


async def until(ws, kind: str) -> dict:
    async for message in ws:
        event = json.loads(message)
        if event.get("type") == kind:
            return event
        if realtime_error(event):
            raise Unexpected(f"realtime error {event.get('error')}")
    raise Unexpected(f"the socket closed before {kind}")


AUDIO_DELTAS = ("response.audio.delta", "response.output_audio.delta")  # the beta dialect's name (the default), GA's


async def read_reply(ws, stop_at_audio: bool) -> str:
    """A reply's end status ("completed", "cancelled", "listening"...), or "audio" at its first audio delta."""
    async for message in ws:
        event = json.loads(message)
        kind = event.get("type")
        if kind in AUDIO_DELTAS and stop_at_audio:
            return "audio"
        if kind == "response.listen":
            await until(ws, "response.done")
            return "listening"
        if kind == "response.done":
            return event["response"]["status"]
        if realtime_error(event):
            raise Unexpected(f"realtime error {event.get('error')}")
    raise Unexpected("the socket closed mid-reply")


def percentiles(rows) -> dict[str, tuple[float, float, float]]:
    by_kind = defaultdict(list)
    for _, kind, outcome, seconds in rows:
        if not outcome.startswith("error"):
            by_kind[kind].append(seconds)
    out = {}
    for kind, xs in sorted(by_kind.items()):
        xs.sort()
        out[kind] = tuple(xs[min(len(xs) - 1, int(q * len(xs)))] for q in (0.5, 0.95, 0.99))
    return out


def gpu_mb() -> float | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return sum(float(x) for x in out.split())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8191")
    p.add_argument("--api-key")
    p.add_argument("--model", default=None, help="the served model name (default: the server's first)")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--warmup-minutes", type=float, default=None)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--server-pid", type=int)
    p.add_argument("--sample-s", type=float, default=10)
    p.add_argument("--warm-timeout", type=float, default=600,
                   help="wait up to this long for /health to stop listing `warming` stages before the load (0: not)")
    p.add_argument("--job-timeout", type=float, default=120)
    p.add_argument("--aura-tokens", type=int, default=16)
    p.add_argument("--tts-tokens", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", type=lambda s: s.split(","), default=None,
                   help=f"only these kinds of the mix, comma-separated (of {', '.join(WEIGHTS)}; default all)")
    p.add_argument("--report", type=Path, help="the JSON report; rewritten every minute while the load runs")
    p.add_argument("--flat-limit", type=float, default=FLAT_LIMIT,
                   help="the flatness verdict's bound on RSS change after warm-up (default 0.01: ±1%%)")
    args = p.parse_args(argv)
    if not args.url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
        p.error("the soak is loopback only: --url http://127.0.0.1:PORT")
    if set(args.kinds or ()) - set(WEIGHTS):
        p.error(f"unknown --kinds {sorted(set(args.kinds) - set(WEIGHTS))}: the mix has {', '.join(WEIGHTS)}")
    if args.model is None:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        args.model = httpx.get(args.url.rstrip("/") + "/v1/models", headers=headers).json()["data"][0]["id"]
    report = asyncio.run(Soak(args).run())
    summary = {k: report[k] for k in ("jobs", "unexpected_errors", "errors_by_kind", "rss_mb", "rss_flat", "anon_flat",
                                      "stage_processes_rss_flat", "stages_after", "pass")}
    print(json.dumps(summary, indent=1))
    flat = report["rss_flat"]
    if flat is None:
        print("RSS flatness: no verdict (no RSS samples after warm-up)")
    else:
        print(f"RSS flatness: {'FLAT' if flat['flat'] else 'NOT FLAT'}: {flat['after_warmup_mb']} MB after warm-up, "
              f"{flat['end_mb']} MB at the end ({flat['change']:+.2%}, limit ±{flat['limit']:.0%}), "
              f"slope {flat['slope_mb_per_min']:+.2f} MB/min")
    if report["anon_flat"]:
        a = report["anon_flat"]
        print(f"anonymous pages: {a['after_warmup_mb']} -> {a['end_mb']} MB ({a['change']:+.2%})")
    if report["rss_growth_by_mapping"]:
        print("RSS change by mapping after warm-up, MB: " + ", ".join(
            f"{k} {v:+.1f}" for k, v in report["rss_growth_by_mapping"].items()))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
