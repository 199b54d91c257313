"""The tiny four-stage deploy served through Ray actors (`distributed_executor_backend: ray`) on a local Ray on CPU,
with two Talker + Code2Wav replicas: a chat turn, a transcription and a realtime push-to-talk turn run through the
actors; requests spread over the replicas and a session's AURA requests carry its id; leaving a stream frees the
request inside its actor; a killed actor fails its request in flight (503, or a realtime `error` event), shows on
/health, the other replica serves meanwhile, and the killed one comes back.

Skipped without Ray (`pip install 'aura-omni[ray]'`). One Ray instance and one app for the module (about a minute and
a half on 2 CPU cores: Ray start, four actor processes, three actor restarts).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from PIL import Image

ray = pytest.importorskip("ray")

import aura_omni  # noqa: E402
from aura_omni.bench.inputs import RECORDED_SPEECH  # noqa: E402
from aura_omni.deploy import ASR, AURA, TALKER, load_deploy_config  # noqa: E402
from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID  # noqa: E402
from aura_omni.pipeline.runtime import load_stage  # noqa: E402
from aura_omni.placement import StageUnavailableError  # noqa: E402
from aura_omni.placement.ray_stages import import_ray  # noqa: E402
from aura_omni.server.app import create_app  # noqa: E402
from aura_omni.stages.tts import TTSRequest, TTSRequestError  # noqa: E402
from placed_stages import push_to_talk_turn, receive_until, wait_until  # noqa: E402

MODEL = "aura-tiny"
API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SPEECH_WAV = RECORDED_SPEECH  # espeak-ng, 16 kHz
SPEAK = [None, {"max_tokens": 8, "logit_bias": {str(AURA_SILENT_TOKEN_ID): -100, str(QWEN_IM_END_ID): -100}}]
FEW = 4  # Talker frames per sentence
LONG = 4000  # Talker frames of a request that is still running when the test leaves it or kills its actor


@pytest.fixture(scope="module")
def ray_deploy(chat_customvoice_deploy) -> Path:
    data = yaml.safe_load(chat_customvoice_deploy.read_text())
    data["distributed_executor_backend"] = "ray"
    data["stages"][1]["enable_prefix_caching"] = True
    data["stages"][2]["default_sampling_params"]["max_tokens"] = LONG  # requests that run until they are stopped
    data["stages"][2]["num_replicas"] = 2
    path = chat_customvoice_deploy.parent / "deploy_ray.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def served(ray_deploy):
    from fastapi.testclient import TestClient

    import_ray().init(num_cpus=2, include_dashboard=False)
    try:
        app = create_app(load_deploy_config(ray_deploy), MODEL, API_KEY)  # joins this Ray: actors, then warm
        with TestClient(app) as client:
            yield client, app.state.server.runtime
    finally:
        ray.shutdown()


def test_stages_are_actors_running_this_code_and_health_lists_each_replica(served):
    client, runtime = served
    infos = runtime.placement.infos
    assert sorted(infos) == sorted([ASR, AURA, TALKER])
    for info in (i for replicas in infos.values() for i in replicas):
        assert Path(info["aura_omni_file"]) == Path(aura_omni.__file__) and info["pid"] != os.getpid()
    health = client.get("/health")
    assert health.status_code == 200
    stages = health.json()["stages"]
    assert sorted(stages) == ["asr/0", "aura/0", "code2wav/0", "code2wav/1", "talker/0", "talker/1"]
    assert all(s["alive"] and s["restarts"] == 0 for s in stages.values())
    assert len({i["pid"] for i in infos[TALKER]}) == 2
    metrics = client.get("/metrics", headers=AUTH).text
    assert 'aura_omni:stage_up{stage="talker/1"} 1.0' in metrics
    assert 'aura_omni:stage_restarts{stage="aura/0"} 0.0' in metrics


def test_concurrent_requests_spread_over_the_replicas(served):
    _, runtime = served
    before = [runtime.stage_stats()[f"talker/{i}"]["steps"] for i in range(2)]

    async def speak(text: str) -> int:
        req = TTSRequest(text=text, task_type="CustomVoice", speaker="Vivian", max_new_tokens=FEW, seed=0)
        return sum([chunk.size async for chunk in runtime.speak(req, 1, 2)])

    async def both():
        return await asyncio.gather(speak("The first sentence."), speak("The second sentence."))

    assert all(n > 0 for n in asyncio.run(both()))
    wait_until(lambda: all(runtime.stage_stats()[f"talker/{i}"]["steps"] > before[i] for i in range(2)), 10,
               "both Talker replicas to have stepped")


def test_chat_turn_through_actors(served):
    client, runtime = served
    steps = runtime.stage_stats()["talker/0"]["steps"]
    r = client.post("/v1/chat/completions", headers=AUTH, json={
        "model": MODEL, "modalities": ["text", "audio"], "audio": {"voice": "serena", "format": "wav"},
        "messages": [{"role": "user", "content": "Hello there, how are you today?"}], "max_tokens": 8, "seed": 1,
        "sampling_params_list": SPEAK, "additional_information": {"tts_max_new_tokens": FEW}})
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message["content"]
    wav, sr = sf.read(io.BytesIO(base64.b64decode(message["audio"]["data"])), dtype="float32")
    assert sr == 24000 and wav.size > 0 and np.abs(wav).max() > 0
    wait_until(lambda: runtime.stage_stats()["talker/0"]["steps"] > steps, 10, "the Talker replica's counters")
    wait_until(lambda: 'aura_omni:stage_time_to_first_output_seconds_count{stage="aura/0"}' in
               client.get("/metrics", headers=AUTH).text, 10, "AURA's replica latency histograms on /metrics")
    assert runtime.stage_latencies()["aura/0"]["first_output"].count >= 1


def test_transcription_through_an_actor_equals_the_in_process_stage(served, ray_deploy):
    client, _ = served
    audio = SPEECH_WAV.read_bytes()
    r = client.post("/v1/audio/transcriptions", headers=AUTH, data={"model": MODEL},
                    files={"file": ("hello.wav", audio, "audio/wav")})
    assert r.status_code == 200, r.text
    deploy = load_deploy_config(ray_deploy)
    local = load_stage(deploy, deploy.stage(ASR), "cpu", None, None)
    try:
        wav, sr = sf.read(io.BytesIO(audio), dtype="float32")
        assert r.json()["text"] == local.transcribe([(wav, sr)])[0].text != ""
    finally:
        local.close()


def test_realtime_push_to_talk_turn_through_actors(served, monkeypatch):
    client, runtime = served
    aura_steps = runtime.stage_stats()["aura/0"]["steps"]
    aura = runtime.models[AURA].replicas
    keys = []
    monkeypatch.setattr(aura, "pick", lambda session=None, pick=aura.pick: keys.append(session) or pick(session))
    frame = io.BytesIO()
    Image.new("RGB", (64, 48), (30, 140, 200)).save(frame, "JPEG")
    events = push_to_talk_turn(client, MODEL, AUTH, {"tts_max_new_tokens": FEW, "sampling_params_list": SPEAK},
                               [frame.getvalue()])
    session_id = events[0]["session"]["id"]
    types = [e["type"] for e in events]
    assert "conversation.item.input_audio_transcription.completed" in types
    assert events[-1]["response"]["status"] == "completed", events[-1]
    assert types.count("response.audio.delta") > 0  # the flat session shape above: the beta dialect's names
    # the session's AURA replica is chosen by its id (its prefix cache), for the prompt through the frame prefilled
    # while ASR ran and for the turn's request, which found that prefix cached
    assert keys == [session_id, session_id]
    wait_until(lambda: runtime.stage_stats()["aura/0"]["steps"] > aura_steps, 10, "the AURA replica's counters")
    wait_until(lambda: runtime.stage_stats()["aura/0"]["prefix_cache_hit_rate"] > 0, 10, "the replica's prefix hits")


def test_text_fed_while_spoken_reaches_its_replica_in_order(served):
    _, runtime = served
    speech = runtime.pipeline.speech
    template = TTSRequest(task_type="CustomVoice", speaker="Vivian", non_streaming_mode=False, max_new_tokens=12, seed=0)
    text = "Hello there, this sentence reaches the Talker in pieces while it speaks."

    async def pieces():
        for word in text.split(" "):
            yield word + " "
            await asyncio.sleep(0.01)

    async def both():
        fed = [c async for c in speech.speak_stream(pieces(), template, request_id="fed-1")]
        whole = [c async for c in speech.speak(text, None, template, request_id="whole-1")]
        return np.concatenate(fed), np.concatenate(whole)

    fed, whole = asyncio.run(both())
    assert fed.shape == whole.shape and np.allclose(fed, whole, atol=1e-4)  # the frames of the whole text


def test_a_stage_that_cannot_load_in_its_actor_stops_the_start_and_says_why(served, tmp_path):
    from aura_omni.deploy import parse_deploy_config
    from aura_omni.pipeline.runtime import Runtime

    missing = str(tmp_path / "no-such-checkpoint")
    deploy = parse_deploy_config({"pipeline": "qwen3_tts", "distributed_executor_backend": "ray", "stages": [
        {"stage_id": 0, "model": missing, "devices": "cpu"}, {"stage_id": 1, "model": missing, "devices": "cpu"}]})
    with pytest.raises(RuntimeError, match="a stage actor failed to start.*no-such-checkpoint"):
        Runtime.load(deploy)


def test_request_errors_from_an_actor_keep_their_type(served):
    _, runtime = served
    with pytest.raises(TTSRequestError, match="Base checkpoint"):  # raised inside the actor, same type here
        runtime.models[TALKER].create_voice_prompt(np.zeros(24000, np.float32), 24000, "hi")


def test_leaving_a_stream_frees_its_request_in_the_actor(served):
    _, runtime = served
    req = TTSRequest(text="A long sentence that would take a while to speak.", task_type="CustomVoice",
                     speaker="Vivian", max_new_tokens=LONG, seed=0)

    async def talker_shows(i: int, check, what: str) -> dict:
        for _ in range(100):
            if check(stats := runtime.stage_stats()[f"talker/{i}"]):
                return stats
            await asyncio.sleep(0.1)
        raise AssertionError(f"Talker replica {i} never showed {what}: {stats}")

    async def leave_while_it_runs():
        stream = runtime.speak(req, 1, 1)
        await anext(stream)
        i = serving_talker(runtime)
        await talker_shows(i, lambda s: s["in_flight"] == 1 and s["running"] == 1, "the request running")
        await stream.aclose()
        return await talker_shows(i, lambda s: s["in_flight"] == 0 and s["running"] == 0, "the request dropped")

    assert asyncio.run(leave_while_it_runs())["alive"]


def all_replicas_alive(runtime) -> bool:
    return all(s["alive"] for s in runtime.stage_stats().values())


def serving_talker(runtime) -> int:
    """The index of the Talker replica with a request in flight from this process."""
    return wait_until(lambda: next((r.index + 1 for r in runtime.models[TALKER].replicas.replicas if r.in_flight), 0),
                      30, "a Talker request in flight") - 1


def test_a_killed_actor_fails_its_request_with_503_shows_on_health_and_comes_back(served):
    client, runtime = served
    answer = {}
    speech = {"model": MODEL, "input": "A long sentence that keeps the Talker busy for a while.", "voice": "vivian",
              "max_new_tokens": LONG, "response_format": "wav"}
    worker = threading.Thread(target=lambda: answer.update(r=client.post("/v1/audio/speech", headers=AUTH, json=speech)))
    worker.start()
    i = serving_talker(runtime)
    wait_until(lambda: runtime.stage_stats()[f"talker/{i}"].get("running", 0) >= 1, 30, "the speech request to run")
    ray.kill(runtime.placement.actors(TALKER)[i], no_restart=False)
    worker.join(60)
    r = answer["r"]
    assert r.status_code == 503 and r.json()["error"]["code"] == "stage_unavailable"
    health = client.get("/health")
    assert health.status_code == 503 and {f"talker/{i}", f"code2wav/{i}"} <= set(health.json()["down"])

    r = client.post("/v1/audio/speech", headers=AUTH, json={**speech, "max_new_tokens": FEW})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"  # the other replica serves while this one restarts
    wait_until(lambda: client.get("/health").status_code == 200, 120, "the Talker replica to restart")
    assert runtime.stage_stats()[f"talker/{i}"]["restarts"] == 1


def test_a_loop_that_dies_in_an_actor_is_restarted_there(served):
    """The actor's host supervises its loops as the runtime does in process: a dead loop is down for a second
    (/health 503), then restarted in the same actor (no replica restart), and the replica serves again."""
    client, runtime = served
    i = 1
    before = runtime.stage_stats()[f"code2wav/{i}"]["restarts"]
    ray.get(runtime.placement.actors(TALKER)[i].inject_fault.remote("code2wav", "kill"))
    wait_until(lambda: not runtime.stage_stats()[f"code2wav/{i}"]["alive"], 10, "the loop to be seen down")
    wait_until(lambda: client.get("/health").status_code == 200, 30, "the loop to be restarted")
    assert runtime.stage_stats()[f"code2wav/{i}"]["restarts"] == before  # the same actor
    speech = {"model": MODEL, "input": "Hello there.", "voice": "vivian", "max_new_tokens": FEW,
              "response_format": "wav"}
    assert all(client.post("/v1/audio/speech", headers=AUTH, json=speech).status_code == 200 for _ in range(4))


def test_a_gpu_failure_in_an_actor_ends_its_process_and_ray_starts_it_afresh(served):
    """A CUDA error that poisons the actor's GPU context cannot be served past in that process: the actor's host ends
    it, and Ray restarts the replica (fresh context, loaded and warmed again) while the other replica serves."""
    client, runtime = served
    i = 0
    before = runtime.stage_stats()[f"talker/{i}"]["restarts"]
    ray.get(runtime.placement.actors(TALKER)[i].inject_fault.remote("talker", "device"))  # at its next step
    speech = {"model": MODEL, "input": "Hello there.", "voice": "vivian", "max_new_tokens": FEW,
              "response_format": "wav"}
    answers = [client.post("/v1/audio/speech", headers=AUTH, json=speech) for _ in range(4)]  # one reaches replica 0
    assert {r.status_code for r in answers} <= {200, 503} and 503 in {r.status_code for r in answers}
    wait_until(lambda: runtime.stage_stats()[f"talker/{i}"]["restarts"] == before + 1
               and client.get("/health").status_code == 200, 120, "the Talker replica to restart")
    r = client.post("/v1/audio/speech", headers=AUTH, json=speech)
    assert r.status_code == 200 and r.content[:4] == b"RIFF"


def test_a_request_in_flight_on_a_dying_actor_raises_stage_unavailable(served):
    _, runtime = served
    req = TTSRequest(text="Another long sentence for the Talker.", task_type="CustomVoice", speaker="Vivian",
                     max_new_tokens=LONG, seed=0)

    async def kill_after_first_chunk():
        stream = runtime.speak(req, 1, 1)
        await anext(stream)
        ray.kill(runtime.placement.actors(TALKER)[serving_talker(runtime)], no_restart=False)
        async for _ in stream:
            pass

    with pytest.raises(StageUnavailableError, match="qwen3_tts replica"):
        asyncio.run(kill_after_first_chunk())
    wait_until(lambda: all_replicas_alive(runtime), 120, "the Talker replica to restart")


def test_a_realtime_turn_on_a_dying_aura_actor_gets_an_error_event_and_the_session_goes_on(served):
    client, runtime = served
    long_reply = [None, {"max_tokens": 2000, "logit_bias": {str(AURA_SILENT_TOKEN_ID): -100,
                                                            str(QWEN_IM_END_ID): -100}}]
    with client.websocket_connect(f"/v1/realtime?model={MODEL}", headers=AUTH) as ws:
        until = functools.partial(receive_until, ws)
        until("session.created")
        ws.send_json({"type": "session.update", "session": {"voice": "vivian", "output_modalities": ["text"],
                                                            "extra_body": {"sampling_params_list": long_reply}}})
        until("session.updated")
        ws.send_json({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a long story."}]}})
        ws.send_json({"type": "response.create"})
        until("response.output_text.delta")
        ray.kill(runtime.placement.actors(AURA)[0], no_restart=False)
        events = until("response.done")
        errors = [e["error"] for e in events if e["type"] == "error"]
        assert errors and errors[0]["type"] == "server_error"
        assert events[-1]["response"]["status"] == "failed"

        wait_until(lambda: runtime.stage_stats()["aura/0"]["alive"], 120, "the AURA replica to restart")
        ws.send_json({"type": "session.update", "session": {"extra_body": {"sampling_params_list": SPEAK}}})
        until("session.updated")
        ws.send_json({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "And a short one?"}]}})
        ws.send_json({"type": "response.create"})
        assert until("response.done")[-1]["response"]["status"] == "completed"  # the session carries on
