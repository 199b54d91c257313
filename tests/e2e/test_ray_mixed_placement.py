"""Some stages in Ray actors, the rest in process (`ray_stages`): the tiny four-stage deploy with only ASR in an
actor (a process of its own, away from the interpreter lock the other stages and the event loop share). A realtime
push-to-talk turn and a transcription cross the actor; /health lists the actor's replica beside the local loops.

Skipped without Ray. Its own local Ray with 2 CPUs (about 40 s on 2 CPU cores)."""

from __future__ import annotations

import os

import pytest
import yaml

ray = pytest.importorskip("ray")

from aura_omni.bench.inputs import RECORDED_SPEECH  # noqa: E402
from aura_omni.deploy import ASR, AURA, TALKER, load_deploy_config  # noqa: E402
from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID  # noqa: E402
from aura_omni.placement.ray_stages import import_ray  # noqa: E402
from aura_omni.server.app import create_app  # noqa: E402
from placed_stages import push_to_talk_turn, wait_until  # noqa: E402

MODEL = "aura-tiny"
AUTH = {"Authorization": "Bearer test-key"}
SPEAK = [None, {"max_tokens": 6, "logit_bias": {str(AURA_SILENT_TOKEN_ID): -100, str(QWEN_IM_END_ID): -100}}]


@pytest.fixture(scope="module")
def served(chat_customvoice_deploy):
    from fastapi.testclient import TestClient

    data = yaml.safe_load(chat_customvoice_deploy.read_text())
    data.update(distributed_executor_backend="ray", ray_stages=[ASR])
    path = chat_customvoice_deploy.parent / "deploy_ray_asr.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    import_ray().init(num_cpus=2, include_dashboard=False)
    try:
        app = create_app(load_deploy_config(path), MODEL, "test-key")
        with TestClient(app) as client:
            yield client, app.state.server.runtime
    finally:
        ray.shutdown()


def test_only_the_named_stage_is_an_actor(served):
    client, runtime = served
    assert sorted(runtime.placement.infos) == [ASR]
    assert runtime.placement.infos[ASR][0]["pid"] != os.getpid()
    assert hasattr(runtime.models[AURA], "loop") and hasattr(runtime.models[TALKER], "talker_loop")  # in process
    stages = client.get("/health").json()["stages"]
    assert sorted(stages) == ["asr/0", "aura", "code2wav", "talker"]
    assert all(s["alive"] for s in stages.values())


def test_a_realtime_turn_crosses_the_asr_actor_and_the_local_stages(served):
    client, runtime = served
    asr_steps = runtime.stage_stats()["asr/0"].get("steps", 0)
    events = push_to_talk_turn(client, MODEL, AUTH, {"tts_max_new_tokens": 4, "sampling_params_list": SPEAK})
    types = [e["type"] for e in events]
    transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert transcript["transcript"]
    assert events[-1]["response"]["status"] == "completed", events[-1]
    assert types.count("response.audio.delta") > 0
    r = client.post("/v1/audio/transcriptions", headers=AUTH, data={"model": MODEL},
                    files={"file": ("hello.wav", RECORDED_SPEECH.read_bytes(), "audio/wav")})
    assert r.status_code == 200 and r.json()["text"]
    wait_until(lambda: runtime.stage_stats()["asr/0"].get("steps", 0) > asr_steps, 10,
               "the ASR actor's counters (as last polled) to move")


def test_a_local_stage_that_cannot_load_stops_the_start_and_says_why(served, chat_customvoice_deploy, tmp_path):
    from aura_omni.pipeline.runtime import Runtime

    data = yaml.safe_load(chat_customvoice_deploy.read_text())
    data.update(distributed_executor_backend="ray", ray_stages=[ASR])
    data["stages"][1]["model"] = str(tmp_path / "no_such_checkpoint")
    path = chat_customvoice_deploy.parent / "deploy_ray_asr_broken.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(Exception, match="no_such_checkpoint"):
        Runtime.load(load_deploy_config(path), device="cpu")
