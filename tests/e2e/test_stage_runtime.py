"""The stage runtime seen from outside, on a served tiny four-stage deploy: every stage served a warm request before
`/health` said ready; `/health` answers from published counters while every stage is busy; a long upload is decoded
off the event loop."""

from __future__ import annotations

import io
import statistics
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile as sf
from serving import API_KEY, _start

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory):
    s = _start(tiny_dir, tmp_path_factory, "deploy.yaml")
    yield s
    s.stop()


def health_times(url: str, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(timeout=10) as c:
        while not stop.is_set():
            t = time.perf_counter()
            r = c.get(url + "/health")
            out.append(time.perf_counter() - t)
            assert r.status_code == 200
            time.sleep(0.01)


def test_every_stage_is_warm_when_health_says_ready(server):
    stages = httpx.get(server.url + "/health").json()["stages"]
    assert set(stages) == {"asr", "aura", "talker", "code2wav"}
    for name, c in stages.items():
        assert c["alive"] and c["steps"] > 0, f"stage {name} served no request before ready"


def test_health_answers_from_counters_while_every_stage_is_busy(server, ref_audio_b64):
    body = {"model": "tiny-tts", "stream": True, "max_tokens": 60, "ignore_eos": True,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "talk"}]}],
            "additional_information": {"tts_ref_audio": ref_audio_b64, "tts_x_vector_only_mode": True,
                                       "tts_max_new_tokens": 60}}
    busy_seen = set()

    def turn():
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=120) as r:
            assert r.status_code == 200
            for _ in r.iter_lines():
                pass

    turns = [threading.Thread(target=turn) for _ in range(4)]
    for t in turns:
        t.start()
    times: list[float] = []
    with httpx.Client(timeout=10) as c:
        while any(t.is_alive() for t in turns):
            t0 = time.perf_counter()
            stages = c.get(server.url + "/health").json()["stages"]
            times.append(time.perf_counter() - t0)
            busy_seen |= {n for n, s in stages.items() if s["in_flight"] or s["queued"]}
            time.sleep(0.01)
    for t in turns:
        t.join()
    assert {"aura", "talker"} <= busy_seen, "the turns never overlapped the health checks"
    assert statistics.median(times) < 0.020, f"/health median {statistics.median(times) * 1000:.1f} ms under load"


def test_a_long_upload_is_decoded_off_the_event_loop(server):
    sr = 16000
    wav = (np.random.default_rng(0).standard_normal(sr * 600) * 0.05).astype(np.float32)  # 10 minutes
    buf = io.BytesIO()
    sf.write(buf, wav, sr, format="FLAC")
    stop, times = threading.Event(), []
    poller = threading.Thread(target=health_times, args=(server.url, stop, times))
    poller.start()
    try:
        r = httpx.post(server.url + "/v1/audio/transcriptions", headers=AUTH, timeout=300,
                       files={"file": ("long.flac", buf.getvalue(), "audio/flac")},
                       data={"model": "tiny-tts", "response_format": "verbose_json"})
    finally:
        stop.set()
        poller.join()
    assert r.status_code == 200, r.text
    assert r.json()["duration"] == pytest.approx(600, abs=0.01)
    assert len(times) > 5 and statistics.median(times) < 0.050, f"/health {max(times) * 1000:.0f} ms max"
