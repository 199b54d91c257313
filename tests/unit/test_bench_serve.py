"""`aura-omni bench serve` without a model server: the realtime backend against a fake in-process Realtime socket
(OpenAI GA and beta event names, silent turns, errors, late chunks), the load generator, the report and the plot."""

import asyncio
import base64
import json
import math
import random
import time
import xml.etree.ElementTree as ET
from contextlib import asynccontextmanager

import numpy as np
import pytest
from websockets.asyncio.server import serve

from aura_omni.bench.backends import RequestResult, merged
from aura_omni.bench.inputs import wav_bytes
from aura_omni.bench.plot import concurrency_svg, nice_max
from aura_omni.bench.serve import Progress, benchmark, full_audio_throughput, markdown_table, run_once, summarize
from aura_omni.cli import build_parser

DELTA = base64.b64encode(b"\0\0" * 2400).decode()  # 0.1 s of PCM16 at 24 kHz


class FakeRealtime:
    """A Realtime endpoint that answers each commit by its `model` query: ga, beta, both, silent, slow, bad. Under
    server VAD it commits itself at the third append of silence after the phrase (0.6 s)."""

    def __init__(self):
        self.sessions: list[dict] = []  # per connection: headers, the session.update, appends, commit

    async def handler(self, ws):
        model = ws.request.path.partition("model=")[2]
        seen = {"path": ws.request.path, "auth": ws.request.headers.get("Authorization"), "appends": []}
        self.sessions.append(seen)
        await ws.send(json.dumps({"type": "session.created", "session": {}}))
        async for message in ws:
            event = json.loads(message)
            kind = event["type"]
            if kind == "session.update":
                seen["session"] = event["session"]
                if model == "bad":
                    await ws.send(json.dumps({"type": "error", "error": {
                        "type": "invalid_request_error", "code": "model_not_found", "message": "unknown model bad"}}))
                    continue
                await ws.send(json.dumps({"type": "session.updated", "session": event["session"]}))
            elif kind == "input_audio_buffer.append":
                seen["appends"].append(event)
                seen.setdefault("append_times", []).append(time.perf_counter())
                vad = (seen["session"].get("turn_detection") or {}).get("type") == "server_vad"
                if vad and "video_frames" not in event:  # the microphone's silence after the phrase
                    seen["silent_appends"] = seen.get("silent_appends", 0) + 1
                    if seen["silent_appends"] == 3:
                        await ws.send(json.dumps({"type": "input_audio_buffer.committed", "item_id": "item_1"}))
                        await self.respond(ws, model)
            elif kind == "input_audio_buffer.commit":
                seen["commit"] = event
                seen["commit_time"] = time.perf_counter()
                await self.respond(ws, model)
            elif kind == "session.close":
                await ws.send(json.dumps({"type": "session.closed"}))
                return

    async def respond(self, ws, model: str):
        send = lambda **e: ws.send(json.dumps(e))  # noqa: E731
        await asyncio.sleep(0.01)
        await send(type="conversation.item.input_audio_transcription.completed", item_id="item_1", transcript="hi")
        await send(type="response.created", response={"id": "resp_1", "status": "in_progress"})
        if model == "silent":
            await send(type="response.listen", response={"status": "listening"})
            return
        prefixes = {"beta": ["response.audio"], "both": ["response.output_audio", "response.audio"]}.get(
            model, ["response.output_audio"])
        await asyncio.sleep(0.02)
        for prefix in prefixes:
            await send(type=f"{prefix}_transcript.delta", delta="Hello")
        for i in range(3):
            if model == "slow" and i == 2:
                await asyncio.sleep(0.3)  # the 0.2 s before it have played out: an underrun
            for prefix in prefixes:  # "both": each delta under the GA and the beta name, as vLLM-Omni's aura does
                await send(type=f"{prefix}.delta", delta=DELTA)
        await send(type=f"{prefix}.done")
        await send(type="response.done", response={"id": "resp_1", "status": "completed"})


@asynccontextmanager
async def fake_server():
    fake = FakeRealtime()
    async with serve(fake.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield fake, f"http://127.0.0.1:{port}"


def bench_args(*argv: str):
    return build_parser().parse_args(["bench", "serve", "--disable-tqdm", "--num-warmups", "0", *argv])


def realtime_run(model: str, *argv: str):
    async def main():
        async with fake_server() as (fake, url):
            report = await benchmark(bench_args("--backend", "realtime", "--base-url", url, "--model", model,
                                                "--api-key", "sk-1", "--frame-size", "32", "--input-audio-seconds",
                                                "1", "--save-detailed", *argv))
            return fake, report

    return asyncio.run(main())


@pytest.mark.parametrize("model", ["ga", "beta", "both"])
def test_realtime_turns_are_timed_from_the_commit_with_ga_or_beta_event_names(model):
    fake, report = realtime_run(model, "--max-concurrency", "1", "2", "--num-prompts", "2")
    assert [run["completed"] for run in report["runs"]] == [2, 2]
    for run in report["runs"]:
        assert run["errors"] == 0 and run["underruns"] == 0
        assert run["total_audio_s"] == pytest.approx(0.6)  # 3 deltas of 0.1 s per turn, under either name or both
        assert 0 < run["p50_transcript_ms"] < run["p50_first_text_ms"] < run["p50_ttfa_ms"]
        assert run["p50_rtf"] > 0 and run["audio_throughput"] > 0
        assert [r["text"] for r in run["requests"]] == ["Hello", "Hello"]  # "both": the text counted once too
    assert len(fake.sessions) == 4  # one session per turn
    first = fake.sessions[0]
    assert first["auth"] == "Bearer sk-1" and first["path"].startswith(f"/v1/realtime?model={model}")
    assert first["session"]["modalities"] == ["audio", "text"] and first["session"]["turn_detection"] is None
    assert first["commit"] == {"type": "input_audio_buffer.commit", "create_response": True}
    audio = b"".join(base64.b64decode(a["audio"]) for a in first["appends"])
    assert len(audio) == 2 * 16000  # 1 s of PCM16 at 16 kHz, in 200 ms appends
    assert len(first["appends"]) == 5
    assert all(a["sample_rate_hz"] == 16000 and len(a["video_frames"]) == 2 for a in first["appends"])


@pytest.mark.parametrize("pace", ["realtime", "burst"])
def test_realtime_speech_is_appended_as_it_is_spoken_or_all_at_once(pace):
    """realtime: each 0.2 s append once its audio has passed, the commit right after the last (a microphone), so the
    turn's clock starts when the user stops talking; burst: everything at once."""
    fake, report = realtime_run("ga", "--num-prompts", "1", "--input-pace", pace)
    assert report["input_pace"] == pace and report["runs"][0]["completed"] == 1
    seen = fake.sessions[0]
    spread = seen["commit_time"] - seen["append_times"][0]
    if pace == "realtime":
        gaps = [b - a for a, b in zip(seen["append_times"], seen["append_times"][1:])]
        assert 0.75 <= spread < 1.5 and min(gaps) > 0.1  # 1 s of speech in 5 appends of 0.2 s
    else:
        assert spread < 0.2


def test_under_server_vad_a_phrase_then_silence_go_out_and_the_clock_starts_where_the_phrase_ends():
    """The recorded phrase (3.1 s, 16 appends, no is_speech: the server's VAD decides) as it is spoken, then silence
    until the reply ends; no commit from the client. The fake commits at its third silent append, about 0.5 s after
    the phrase ended."""
    fake, report = realtime_run("ga", "--num-prompts", "1", "--turn-detection", "server_vad")
    run, seen = report["runs"][0], fake.sessions[0]
    assert seen["session"]["turn_detection"]["type"] == "server_vad" and "commit" not in seen
    spoken = [a for a in seen["appends"] if "video_frames" in a]  # the phrase's appends carry the camera frames
    assert len(spoken) == 16 and "is_speech" not in spoken[0] and seen["silent_appends"] >= 3
    assert not any(any(base64.b64decode(a["audio"])) for a in seen["appends"][16:])  # then zeros
    assert run["completed"] == 1 and 400 < run["p50_commit_ms"] < 900 < run["p50_ttfa_ms"] + 400
    assert run["p50_commit_ms"] < run["p50_ttfa_ms"]


def test_the_commit_line_says_who_committed():
    from aura_omni.bench.serve import commit_summary

    run = {"max_concurrency": 4, "p50_commit_ms": 510.0, "p95_commit_ms": 620.0}
    assert "the server's VAD committed p50 / p95 510" in commit_summary(run, "server_vad")
    push_to_talk = commit_summary(run, "none")
    assert "VAD" not in push_to_talk and "acknowledged the client's commit" in push_to_talk


def test_a_silent_realtime_turn_is_a_success_without_audio():
    _, report = realtime_run("silent", "--num-prompts", "2")
    run = report["runs"][0]
    assert run["completed"] == 2 and run["silent"] == 2 and run["total_audio_s"] == 0 and run["p50_ttfa_ms"] is None
    assert 0 < run["p50_silent_decision_ms"] <= run["p99_silent_decision_ms"]


def test_a_late_realtime_chunk_counts_as_an_underrun():
    _, report = realtime_run("slow", "--num-prompts", "1")
    assert report["runs"][0]["underruns"] == 1 and report["runs"][0]["requests_with_underruns"] == 1
    (where,) = report["runs"][0]["underruns_by_position"]  # after the stream's first 0.2 s, ~0.1 s of silence
    assert where["audio_before_s"] == [0.1, 0.3] and where["n"] == 1 and 50 < where["max_gap_ms"] < 300


def test_realtime_errors_are_counted_with_their_message():
    _, report = realtime_run("bad", "--num-prompts", "2")
    run = report["runs"][0]
    assert run["completed"] == 0 and run["errors"] == 2
    assert run["error_messages"] == {"error: unknown model bad": 2}


def test_a_server_that_is_not_there_gives_errors_not_a_crash(capsys):
    from aura_omni.cli import main

    rc = main(["bench", "serve", "--backend", "speech", "--base-url", "http://127.0.0.1:9", "--num-prompts", "2",
               "--num-warmups", "0", "--disable-tqdm"])
    out = capsys.readouterr().out
    assert rc == 1 and "| inf | 0 / 2 |" in out and "ConnectionRefusedError" in out


def test_bad_flags_are_refused_by_the_parser(capsys):
    for argv in (["--request-rate", "0"], ["--max-concurrency", "0"], ["--extra-body", "[1]"],
                 ["--random-range-ratio", "1"], ["--random-range-ratio", "-0.1"],
                 ["--extra-body", "{"], ["--backend", "grpc"], ["--turn-detection", "semantic_vad"]):
        with pytest.raises(SystemExit) as e:
            bench_args(*argv)
        assert e.value.code == 2
    from aura_omni.cli import main

    assert main(["bench", "serve", "--base-url", "localhost:8000"]) == 2
    assert main(["bench", "serve", "--ref-audio", "/no/such.wav"]) == 2
    assert main(["bench", "serve", "--random-range-ratio", "0.5"]) == 2  # a ratio of no length
    assert "--base-url must start with http://" in capsys.readouterr().err


class CountingBackend:
    def __init__(self):
        self.in_flight = self.most = 0

    async def request(self, prompt, max_tokens=None):
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return RequestResult(ok=True, ttfa=0.01, latency=0.02, audio_seconds=1.0)


def test_concurrency_caps_requests_in_flight_and_a_rate_spreads_their_starts():
    assert bench_args().max_concurrency == [None]  # as vllm bench serve: no limit unless given
    backend = CountingBackend()
    asyncio.run(run_once(backend, [("x", None)] * 5, None, math.inf, 5, random.Random(0), Progress(5, "c=inf", False)))
    assert backend.most == 5
    backend = CountingBackend()
    results, duration = asyncio.run(run_once(backend, [("x", None)] * 12, 3, math.inf, 5, random.Random(0),
                                             Progress(12, "c=3", False)))
    assert len(results) == 12 and backend.most == 3 and duration < 1
    backend = CountingBackend()
    _, duration = asyncio.run(run_once(backend, [("x", None)] * 6, 6, 20.0, 5, random.Random(0), Progress(6, "r", False)))
    assert backend.most < 6 and duration > 0.1  # 5 gaps of 50 ms on average


def test_summary_percentiles_errors_and_table():
    results = [RequestResult(ok=True, ttfa=t, first_text=t / 2, latency=1.0, audio_seconds=2.0, underruns=u)
               for t, u in [(0.1, 0), (0.2, 1), (0.3, 0), (0.4, 2)]]
    results.append(RequestResult(error="HTTP 404: no such model"))
    run = summarize(results, 2.0, 4, math.inf)
    assert run["completed"] == 4 and run["errors"] == 1 and run["error_messages"] == {"HTTP 404: no such model": 1}
    assert run["p50_ttfa_ms"] == pytest.approx(250) and run["p99_ttfa_ms"] == pytest.approx(397)
    assert run["p50_first_text_ms"] == pytest.approx(125) and run["p50_rtf"] == pytest.approx(0.5)
    assert run["audio_throughput"] == pytest.approx(4.0) and run["request_rate"] == "inf"
    assert run["underruns"] == 3 and run["requests_with_underruns"] == 2
    table = markdown_table({"runs": [run]})
    assert "| 4 | 4 / 5 | 250 / 385 / 397 | 125 / 192 / 198 | 0.500 / 0.500 | 4.00 | 3 (2 requests) | 1 |" in table


def test_plot_is_an_svg_with_both_panels_and_survives_missing_values():
    runs = [{"max_concurrency": c, "p50_ttfa_ms": t, "p95_ttfa_ms": t and t * 1.5, "p99_ttfa_ms": t and t * 2,
             "audio_throughput": a} for c, t, a in [(1, 34.0, 18.0), (8, 293.0, 50.0), (32, None, 0.0)]]
    svg = concurrency_svg({"backend": "speech", "model": "m<&>", "base_url": "u", "runs": runs})
    root = ET.fromstring(svg)  # well-formed, the model name escaped
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "TTFA p95" in texts and "audio-s/s" in texts and "32" in texts
    assert len(list(root.iter("{http://www.w3.org/2000/svg}polyline"))) == 4
    assert [nice_max(v) for v in (0, 0.3, 7, 23, 101, 1475)] == [1.0, 0.5, 10, 25, 200, 2000]


def test_extra_body_merges_into_nested_objects():
    body = {"additional_information": {"tts_ref_audio": "data:..."}, "max_tokens": 4}
    assert merged(body, {"additional_information": {"tts_max_new_tokens": 4}, "max_tokens": 8}) == {
        "additional_information": {"tts_ref_audio": "data:...", "tts_max_new_tokens": 4}, "max_tokens": 8}


def http_result(backend_name: str, status: int, content: bytes, ctype: str, max_tokens: int | None = None
                ) -> tuple[RequestResult, dict]:
    """One request of the backend against a canned HTTP reply: its result, and the JSON body it sent."""
    import httpx

    from aura_omni.bench.backends import BACKENDS, BenchConfig

    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        return httpx.Response(status, content=content, headers={"content-type": ctype})

    async def main():
        backend = BACKENDS[backend_name](BenchConfig(base_url="http://x", model="m", frame_size=16,
                                                     input_audio_seconds=0.5, api_key="sk"))
        await backend.client.aclose()
        backend.client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        try:
            return await backend.request("Say this.", max_tokens)
        finally:
            await backend.aclose()

    return asyncio.run(main()), seen[0]


def sse(*events) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


def test_speech_backend_reads_pcm_and_refuses_replies_that_are_not_audio():
    ok, body = http_result("speech", 200, b"\0\0" * 4800, "audio/pcm")
    assert ok.ok and ok.audio_seconds == pytest.approx(0.2) and ok.ttfa > 0 and ok.rtf > 0
    assert body["stream"] is True and body["response_format"] == "pcm" and body["model"] == "m"
    assert "max_new_tokens" not in body and http_result("speech", 200, b"\0\0", "audio/pcm", 7)[1]["max_new_tokens"] == 7
    for status, content, ctype, message in [
            (200, b'{"object": "x"}', "application/json", "expected a PCM audio stream"),
            (200, b"", "audio/pcm", "the reply had no audio"),
            (400, b'{"error": {"message": "input: text to speak is empty"}}', "application/json",
             "HTTP 400: input: text to speak is empty"),
            (502, b"<html>bad gateway</html>", "text/html", "HTTP 502: <html>bad gateway</html>")]:
        bad, _ = http_result("speech", status, content, ctype)
        assert not bad.ok and bad.error.startswith(message), bad.error


def test_chat_backend_reads_text_audio_silence_and_in_band_errors():
    audio = base64.b64encode(b"\0\0" * 2400).decode()
    chunk = lambda delta, finish=None: {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # noqa
    ok, body = http_result("chat", 200, sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi"}),
                                      chunk({"audio": {"id": "a", "data": audio}}),
                                      chunk({"audio": {"id": "a", "data": audio}}), chunk({}, "stop"), "[DONE]"),
                     "text/event-stream")
    assert ok.ok and ok.first_text > 0 and ok.ttfa >= ok.first_text and ok.audio_seconds == pytest.approx(0.2)
    content = body["messages"][0]["content"]
    assert [p["type"] for p in content] == ["input_audio", "image_url", "image_url"]
    assert body["audio"] == {"voice": "Vivian", "format": "pcm16"} and body["modalities"] == ["text", "audio"]
    wav = base64.b64encode(wav_bytes(np.zeros(4800, np.float32), 24000)).decode()  # vLLM-Omni: audio in content
    omni, _ = http_result("chat", 200, sse({**chunk({"content": "Hi"}), "modality": "text"},
                                           {**chunk({"content": wav}), "modality": "audio"}, "[DONE]"),
                          "text/event-stream")
    assert omni.ok and omni.audio_seconds == pytest.approx(0.2) and omni.first_text > 0
    silent, _ = http_result("chat", 200, sse(chunk({"silent": True}, "stop"), "[DONE]"), "text/event-stream")
    assert silent.ok and silent.silent and silent.audio_seconds == 0
    failed, _ = http_result("chat", 200, sse(chunk({"content": "Hi"}), {"error": {"message": "turn failed: boom"}},
                                          "[DONE]"), "text/event-stream")
    assert not failed.ok and failed.error == "turn failed: boom"


def test_frame_size_takes_a_camera_shape_or_a_square():
    assert bench_args("--frame-size", "640x480").frame_size == (640, 480)
    assert bench_args("--frame-size", "64").frame_size == (64, 64)
    with pytest.raises(SystemExit):
        bench_args("--frame-size", "0x480")


def test_a_random_range_ratio_spreads_each_requests_cap_around_max_tokens():
    """vllm bench serve's --random-range-ratio: replies of one length end together, so each wave of new requests
    would arrive as a burst; drawn lengths spread them. Seeded, so runs repeat."""
    from aura_omni.bench.serve import _max_tokens

    draws = [_max_tokens(bench_args("--max-tokens", "100", "--random-range-ratio", "0.5"), random.Random(3))
             for _ in range(2)]
    assert draws[0] == draws[1]
    rng, args = random.Random(0), bench_args("--max-tokens", "100", "--random-range-ratio", "0.5")
    caps = [_max_tokens(args, rng) for _ in range(200)]
    assert min(caps) >= 50 and max(caps) <= 150 and len(set(caps)) > 50
    assert _max_tokens(bench_args("--max-tokens", "100"), rng) == 100 and _max_tokens(bench_args(), rng) is None
    fake, report = realtime_run("ga", "--num-prompts", "6", "--max-tokens", "10", "--random-range-ratio", "0.5")
    sent = [f["session"]["max_response_output_tokens"] for f in fake.sessions]
    assert all(5 <= n <= 15 for n in sent) and len(set(sent)) > 1 and report["random_range_ratio"] == 0.5


def test_full_throughput_counts_audio_only_until_the_last_request_was_sent():
    """Two slots, three requests: the third starts at t=1 when the first ends. Until then the first's 2 s of audio
    arrived whole, a quarter of the second's 4 s (first audio at 0.5, end at 2.5), and none of the third's: 3 s in 1 s.
    A run with no more requests than slots, or paced by a rate, has no such window."""
    results = [RequestResult(ok=True, start=10.0, ttfa=0.0, latency=1.0, audio_seconds=2.0),
               RequestResult(ok=True, start=10.0, ttfa=0.5, latency=2.5, audio_seconds=4.0),
               RequestResult(ok=True, start=11.0, ttfa=0.2, latency=2.0, audio_seconds=3.0)]
    assert full_audio_throughput(results) == pytest.approx(3.0)
    assert summarize(results, 3.0, 2, math.inf)["full_audio_throughput"] == pytest.approx(3.0)
    assert summarize(results, 3.0, 3, math.inf)["full_audio_throughput"] is None
    assert summarize(results, 3.0, 2, 4.0)["full_audio_throughput"] is None


@pytest.mark.parametrize("spread", [0.0, 1.2])
def test_sessions_open_together_and_commit_together_or_spread_evenly(spread):
    """Four sessions at once (--max-concurrency 4): without --commit-spread their commits come together (a burst);
    with it each session waits its offset after session.updated, so the commits cover the window evenly."""
    fake, report = realtime_run("ga", "--num-prompts", "4", "--max-concurrency", "4", "--input-pace", "burst",
                                "--commit-spread", str(spread))
    assert report["runs"][0]["completed"] == 4 and report["commit_spread_s"] == spread
    commits = sorted(s["commit_time"] for s in fake.sessions)
    if not spread:
        assert commits[-1] - commits[0] < 0.3
    else:  # offsets frac(k * 0.618) * 1.2 s: 0, 0.74, 0.28, 1.02
        gaps = np.diff(commits)
        assert commits[-1] - commits[0] > 0.8 and gaps.min() > 0.1


def test_a_negative_commit_spread_is_refused(capsys):
    from aura_omni.bench.serve import main

    assert main(bench_args("--backend", "realtime", "--commit-spread", "-1")) == 2
    assert "--commit-spread" in capsys.readouterr().err


def test_bench_plot_puts_saved_runs_on_one_picture_and_labels_spread_commits(tmp_path, capsys):
    from aura_omni.cli import main

    def saved(name: str, concurrency: int, ttfa: float, spread: float = 0.0) -> str:
        run = {"max_concurrency": concurrency, "p50_ttfa_ms": ttfa, "p95_ttfa_ms": ttfa * 1.2, "p99_ttfa_ms": ttfa * 1.3,
               "audio_throughput": concurrency / 2}
        path = tmp_path / name
        path.write_text(json.dumps({"backend": "realtime", "model": "aura", "base_url": "u", "runs": [run],
                                    "commit_spread_s": spread}))
        return str(path)

    files = [saved("s8.json", 8, 140.0), saved("s32.json", 32, 280.0), saved("s64.json", 64, 460.0, spread=2.0)]
    out = tmp_path / "capacity.svg"
    assert main(["bench", "plot", *files, "--out", str(out), "--title", "capacity <H100>"]) == 0
    root = ET.fromstring(out.read_text())
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "capacity <H100>" in texts and "64 (spread 2 s)" in texts and "8" in texts and "32" in texts
    assert texts.index("8") < texts.index("32") < texts.index("64 (spread 2 s)")  # in the order given
    (tmp_path / "not_a_result.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match="not a `bench serve --save-result` file"):
        main(["bench", "plot", str(tmp_path / "not_a_result.json"), "--out", str(out)])
    with pytest.raises(SystemExit, match="cannot read"):
        main(["bench", "plot", str(tmp_path / "missing.json"), "--out", str(out)])
