"""Stages in processes of the server's own, without Ray (`process_stages`): the tiny four-stage deploy with ASR, AURA and
the Talker + Code2Wav each in a process of its own, served by the app's event loop. A realtime push-to-talk turn, a
chat turn with its text streamed into the Talker, and a transcription cross them; a stage's own error keeps its type;
leaving a stream frees its request in the process; a killed process fails its request with 503, shows on /health and
comes back; a stage that cannot load stops the start; closing the server ends the processes. A group of stages
(`[[asr, aura], qwen3_tts]`) shares one process.

No Ray needed. Three stage processes (about 40 s on 2 CPU cores), then two."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import signal
import threading

import numpy as np
import pytest
import soundfile as sf
import yaml
from PIL import Image

from aura_omni.bench.inputs import RECORDED_SPEECH
from aura_omni.deploy import ASR, AURA, TALKER, load_deploy_config, parse_deploy_config
from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID
from aura_omni.pipeline.runtime import Runtime, load_stage
from aura_omni.server.app import create_app
from aura_omni.stages.tts import TTSRequest, TTSRequestError
from placed_stages import push_to_talk_turn, wait_until

MODEL = "aura-tiny"
AUTH = {"Authorization": "Bearer test-key"}
SPEAK = [None, {"max_tokens": 8, "logit_bias": {str(AURA_SILENT_TOKEN_ID): -100, str(QWEN_IM_END_ID): -100}}]
FEW = 4  # Talker frames per sentence
LONG = 4000  # Talker frames of a request still running when the test leaves it or kills its process
APART = [ASR, AURA, TALKER]


@pytest.fixture(scope="module")
def served(chat_customvoice_deploy):
    from fastapi.testclient import TestClient

    data = yaml.safe_load(chat_customvoice_deploy.read_text())
    data["process_stages"] = APART
    data["heap_trim_interval_s"] = 0.2  # each process trims its own C heap, as the server does
    data["stages"][2]["default_sampling_params"]["max_tokens"] = LONG  # requests that run until they are stopped
    path = chat_customvoice_deploy.parent / "deploy_processes.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    app = create_app(load_deploy_config(path), MODEL, "test-key")
    with TestClient(app) as client:
        runtime = app.state.server.runtime
        yield client, runtime, path
        actors = runtime.placement.actors
    for actor in actors:  # the server closed: its stage processes are gone
        assert actor.pid is not None and wait_until(lambda a=actor: not actor_alive(a), 20, "the process to end")


def actor_alive(actor) -> bool:
    try:
        os.kill(actor.pid, 0)
    except ProcessLookupError:
        return False
    return actor._process.poll() is None


def actor_of(runtime, role: str):
    return next(a for a in runtime.placement.actors if a.label == role)


def test_named_stages_run_in_their_own_processes_and_health_lists_them(served):
    client, runtime, _ = served
    pids = {label: infos[0]["pid"] for label, infos in runtime.placement.infos.items()}
    assert sorted(pids) == sorted(APART) and os.getpid() not in pids.values() and len(set(pids.values())) == 3
    stages = client.get("/health").json()["stages"]
    assert sorted(stages) == ["asr/0", "aura/0", "code2wav/0", "talker/0"]
    assert all(s["alive"] and s["restarts"] == 0 for s in stages.values())
    metrics = client.get("/metrics", headers=AUTH).text
    assert 'aura_omni:stage_up{stage="talker/0"} 1.0' in metrics


def test_every_process_reports_its_counters_before_a_request_reaches_it(served):
    """(First to use the server: no request has reached the processes.) The warm-up ran on an event loop of its own;
    the server's must read the processes' reports from its start, or /health's `warming` and the counters admission
    reads stay as they were at ready until a request happens to reach each process."""
    _, runtime, _ = served
    reports = {actor.label: 0 for actor in runtime.placement.actors}
    noted = {}
    for actor in runtime.placement.actors:
        def count(stats, actor=actor, note=actor.on_stats):
            reports[actor.label] += 1
            note(stats)
        noted[actor], actor.on_stats = actor.on_stats, count
    try:
        wait_until(lambda: min(reports.values()) >= 2, 10, "every process's counters to come, twice")
    finally:
        for actor, note in noted.items():
            actor.on_stats = note


def test_each_stage_process_trims_its_own_heap_and_its_memory_is_on_metrics(served):
    client, runtime, _ = served
    wait_until(lambda: len(runtime.process_memory()) == 3 and all(
        m["trims"] >= 1 for m in runtime.process_memory().values()), 10, "every process to report a trim")
    metrics = client.get("/metrics", headers=AUTH).text
    for process in APART:
        line = next(x for x in metrics.splitlines()
                    if x.startswith(f'aura_omni:stage_process_resident_memory_bytes{{process="{process}"}}'))
        assert float(line.split()[-1]) > 50e6  # an interpreter with torch and a tiny stage
    assert 'aura_omni:stage_process_heap_trim_released_bytes_total{process="asr"}' in metrics


def test_a_realtime_turn_crosses_the_processes(served):
    client, runtime, _ = served
    before = {name: runtime.stage_stats()[name].get("steps", 0) for name in ("asr/0", "aura/0", "talker/0")}
    frame = io.BytesIO()
    Image.new("RGB", (64, 48), (30, 140, 200)).save(frame, "JPEG")
    events = push_to_talk_turn(client, MODEL, AUTH, {"tts_max_new_tokens": FEW, "sampling_params_list": SPEAK},
                               [frame.getvalue()])
    types = [e["type"] for e in events]
    transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert transcript["transcript"]
    assert events[-1]["response"]["status"] == "completed", events[-1]
    assert types.count("response.audio.delta") > 0
    wait_until(lambda: all(runtime.stage_stats()[n].get("steps", 0) > before[n] for n in before), 10,
               "every stage process's counters to move")
    assert len(actor_of(runtime, "aura")._channel._held) == 1  # the camera frame crossed whole once, then by key


def test_a_chat_turn_streams_its_text_into_the_talker_process(served):
    client, _, _ = served
    r = client.post("/v1/chat/completions", headers=AUTH, json={
        "model": MODEL, "modalities": ["text", "audio"], "audio": {"voice": "serena", "format": "wav"},
        "messages": [{"role": "user", "content": "Hello there, how are you today?"}], "max_tokens": 8, "seed": 1,
        "sampling_params_list": SPEAK, "additional_information": {"tts_max_new_tokens": FEW}})
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    wav, sr = sf.read(io.BytesIO(base64.b64decode(message["audio"]["data"])), dtype="float32")
    assert message["content"] and sr == 24000 and wav.size > 0 and np.abs(wav).max() > 0


def test_text_fed_while_spoken_reaches_the_process_in_order(served):
    client, runtime, _ = served
    speech = runtime.pipeline.speech
    template = TTSRequest(task_type="CustomVoice", speaker="Vivian", non_streaming_mode=False, max_new_tokens=12, seed=0)
    text = "Hello there, this sentence reaches the Talker in pieces while it speaks."

    async def both():
        async def pieces():
            for word in text.split(" "):
                yield word + " "

        fed = [c async for c in speech.speak_stream(pieces(), template, request_id="fed-1")]
        whole = [c async for c in speech.speak(text, None, template, request_id="whole-1")]
        return np.concatenate(fed), np.concatenate(whole)

    fed, whole = client.portal.call(both)  # on the server's event loop, which serves the processes' sockets
    assert fed.shape == whole.shape and np.allclose(fed, whole, atol=1e-4)


def test_a_transcription_in_its_process_equals_the_in_process_stage(served):
    client, _, path = served
    audio = RECORDED_SPEECH.read_bytes()
    r = client.post("/v1/audio/transcriptions", headers=AUTH, data={"model": MODEL},
                    files={"file": ("hello.wav", audio, "audio/wav")})
    assert r.status_code == 200, r.text
    deploy = load_deploy_config(path)
    local = load_stage(deploy, deploy.stage(ASR), "cpu", None, None)
    try:
        wav, sr = sf.read(io.BytesIO(audio), dtype="float32")
        assert r.json()["text"] == local.transcribe([(wav, sr)])[0].text != ""
    finally:
        local.close()


def test_request_errors_from_a_process_keep_their_type(served):
    _, runtime, _ = served
    with pytest.raises(TTSRequestError, match="Base checkpoint"):  # raised in the Talker's process, same type here
        runtime.models[TALKER].create_voice_prompt(np.zeros(24000, np.float32), 24000, "hi")


def test_leaving_a_stream_frees_its_request_in_the_process(served):
    client, runtime, _ = served
    req = TTSRequest(text="A long sentence that would take a while to speak.", task_type="CustomVoice",
                     speaker="Vivian", max_new_tokens=LONG, seed=0)

    def talker_shows(check, what: str) -> dict:
        return wait_until(lambda: check(stats := runtime.stage_stats()["talker/0"]) and stats, 10, what)

    stream = runtime.speak(req, 1, 1)

    async def first_chunk():
        return await anext(stream)

    async def leave():
        await stream.aclose()

    client.portal.call(first_chunk)  # on the server's event loop, which serves the processes' sockets
    talker_shows(lambda s: s["in_flight"] == 1 and s["running"] == 1, "the request running")
    client.portal.call(leave)
    assert talker_shows(lambda s: s["in_flight"] == 0 and s["running"] == 0, "the request dropped")["alive"]


def test_a_killed_process_fails_its_request_with_503_shows_on_health_and_comes_back(served):
    client, runtime, _ = served
    answer = {}
    speech = {"model": MODEL, "input": "A long sentence that keeps the Talker busy for a while.", "voice": "vivian",
              "max_new_tokens": LONG, "response_format": "wav"}
    worker = threading.Thread(target=lambda: answer.update(r=client.post("/v1/audio/speech", headers=AUTH, json=speech)))
    worker.start()
    wait_until(lambda: runtime.stage_stats()["talker/0"].get("running", 0) >= 1, 30, "the speech request to run")
    actor = actor_of(runtime, TALKER)
    old = actor.pid
    os.kill(old, signal.SIGKILL)
    worker.join(60)
    r = answer["r"]
    assert r.status_code == 503 and r.json()["error"]["code"] == "stage_unavailable"
    health = client.get("/health")
    assert health.status_code == 503 and {"talker/0", "code2wav/0"} <= set(health.json()["down"])

    wait_until(lambda: client.get("/health").status_code == 200, 120, "the Talker's process to come back")
    assert runtime.stage_stats()["talker/0"]["restarts"] == 1 and actor.pid != old
    r = client.post("/v1/audio/speech", headers=AUTH, json={**speech, "max_new_tokens": FEW})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"


def test_a_stage_that_cannot_load_in_its_process_stops_the_start_and_says_why(tmp_path):
    missing = str(tmp_path / "no-such-checkpoint")
    deploy = parse_deploy_config({"pipeline": "qwen3_tts", "process_stages": [TALKER], "stages": [
        {"stage_id": 0, "model": missing, "devices": "cpu"}, {"stage_id": 1, "model": missing, "devices": "cpu"}]})
    with pytest.raises(RuntimeError, match="failed to start in its own process.*no-such-checkpoint"):
        Runtime.load(deploy)


def test_two_talker_stages_each_in_a_process_behind_one_talker_set(tiny_dir):
    """The demo's Base and CustomVoice Talkers, each in a process of its own, routed by the request's task type."""
    data = yaml.safe_load((tiny_dir / "deploy_demo.yaml").read_text())
    data["process_stages"] = [TALKER]
    path = tiny_dir / "deploy_demo_processes.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    runtime = Runtime.load(load_deploy_config(path), device="cpu")

    async def speak(task_type: str, speaker: str | None) -> int:
        await runtime.warm_up()
        req = TTSRequest(text="Hello there.", task_type=task_type, speaker=speaker, max_new_tokens=FEW, seed=0)
        return sum([chunk.size async for chunk in runtime.speak(req, 1, 2)])

    try:
        assert sorted(runtime.placement.infos) == [f"{TALKER}.2", f"{TALKER}.4"]
        assert asyncio.run(speak("CustomVoice", "Vivian")) > 0
        steps = wait_until(lambda: runtime.stage_stats()["talker:custom_voice/0"].get("steps"), 10, "its counters")
        assert steps > 0 and runtime.stage_stats()["talker:base/0"]["alive"]
    finally:
        runtime.close()


def test_a_group_of_stages_shares_one_process(chat_customvoice_deploy):
    """`process_stages: [[asr, aura], qwen3_tts]`: ASR and AURA in one process, the Talker in another; a realtime turn
    crosses both."""
    from fastapi.testclient import TestClient

    data = yaml.safe_load(chat_customvoice_deploy.read_text())
    data["process_stages"] = [[ASR, AURA], TALKER]
    path = chat_customvoice_deploy.parent / "deploy_process_group.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    app = create_app(load_deploy_config(path), MODEL, "test-key")
    with TestClient(app) as client:
        placement = app.state.server.runtime.placement
        assert sorted(actor.label for actor in placement.actors) == [f"{ASR}+{AURA}", TALKER]
        pids = {label: infos[0]["pid"] for label, infos in placement.infos.items()}
        assert pids[ASR] == pids[AURA] != pids[TALKER] and os.getpid() not in pids.values()
        events = push_to_talk_turn(client, MODEL, AUTH, {"tts_max_new_tokens": FEW, "sampling_params_list": SPEAK},
                                   [])
        assert events[-1]["response"]["status"] == "completed", events[-1]
        assert any(e["type"] == "response.audio.delta" for e in events)
        stages = wait_until(lambda: (h := client.get("/health").json()["stages"]) and
                            all(s.get("steps") for s in h.values()) and h, 10, "every stage's counters")
        assert sorted(stages) == ["asr/0", "aura/0", "code2wav/0", "talker/0"]
