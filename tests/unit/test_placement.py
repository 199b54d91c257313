"""Stage placement without Ray: which replica takes a request, what /health reads of replicas, the deploy keys and CLI
flags that ask for Ray actors (the actors themselves: tests/e2e/test_ray_placement.py)."""

import subprocess
import sys

import pytest

from aura_omni.cli import build_parser, load_serve_config
from aura_omni.deploy import DeployConfigError, parse_deploy_config
from aura_omni.placement.replicas import Replica, ReplicaSet


def replicas(n: int) -> ReplicaSet:
    return ReplicaSet("aura", [Replica(i, actor=None, loops=["aura"], started="s0") for i in range(n)])


def test_requests_go_to_the_least_loaded_replica_in_turn():
    rs = replicas(3)
    assert [rs.pick().index for _ in range(3)] == [0, 1, 2]  # all idle: in turn
    rs.replicas[0].in_flight, rs.replicas[1].in_flight = 2, 1
    assert {rs.pick().index for _ in range(4)} == {2}  # 2 is idle
    rs.replicas[2].in_flight = 1
    assert {rs.pick().index for _ in range(4)} == {1, 2}  # tied at one request: in turn


def test_a_session_sticks_to_its_replica_until_that_replica_is_down():
    rs = replicas(2)
    first = rs.pick("sess_a").index
    rs.replicas[first].in_flight = 5  # busier, yet the session's prefix cache is there
    assert rs.pick("sess_a").index == first
    assert rs.pick("sess_b").index == 1 - first  # a new session goes to the idle one
    rs.replicas[first].alive = False
    moved = rs.pick("sess_a").index
    assert moved == 1 - first
    rs.replicas[first].alive = True
    assert rs.pick("sess_a").index == moved  # it now lives there


def test_down_replicas_take_no_new_requests_unless_all_are_down():
    rs = replicas(2)
    rs.replicas[0].alive = False
    assert {rs.pick().index for _ in range(4)} == {1}
    rs.replicas[1].alive = False
    assert {rs.pick().index for _ in range(2)} == {0, 1}  # Ray queues the call until the restart


def test_health_counters_per_replica_and_restarts():
    rs = ReplicaSet("qwen3_tts", [Replica(i, None, loops=["talker", "code2wav"], started="a") for i in range(2)])
    rs.note_stats(rs.replicas[0], {"started": "a", "loops": {"talker": {"alive": True, "running": 3},
                                                             "code2wav": {"alive": True}}})
    rs.note_stats(rs.replicas[1], None)  # its stats call failed: the actor is gone
    stats = rs.stage_stats()
    assert sorted(stats) == ["code2wav/0", "code2wav/1", "talker/0", "talker/1"]
    assert stats["talker/0"]["running"] == 3 and stats["talker/0"]["alive"] is True
    assert stats["talker/1"]["alive"] is False and stats["code2wav/1"]["alive"] is False
    rs.note_stats(rs.replicas[1], {"started": "b", "loops": {"talker": {"alive": True}, "code2wav": {"alive": True}}})
    stats = rs.stage_stats()
    assert stats["talker/1"]["alive"] is True and stats["talker/1"]["restarts"] == 1 and stats["talker/0"]["restarts"] == 0


def deploy(**top) -> dict:
    stages = [{"stage_id": 0, "model": "m", "devices": "cpu"}, {"stage_id": 1, "model": "m", "devices": "cpu"}]
    for i, extra in top.pop("stages", {}).items():
        stages[i].update(extra)
    return {"pipeline": "qwen3_tts", "stages": stages, **top}


def test_replicas_and_ray_keys_in_the_deploy_file():
    cfg = parse_deploy_config(deploy(distributed_executor_backend="ray", stages={0: {"num_replicas": 2}}))
    assert cfg.distributed_executor_backend == "ray" and cfg.stages[0].num_replicas == 2
    with pytest.raises(DeployConfigError, match=r"stages\[0\].num_replicas: replicas are Ray actors"):
        parse_deploy_config(deploy(stages={0: {"num_replicas": 2}}))
    with pytest.raises(DeployConfigError, match=r"stages\[1\].num_replicas: Code2Wav runs inside each Talker replica"):
        parse_deploy_config(deploy(distributed_executor_backend="ray", stages={0: {"num_replicas": 2},
                                                                              1: {"num_replicas": 1}}))
    with pytest.raises(DeployConfigError, match="distributed_executor_backend"):
        parse_deploy_config(deploy(distributed_executor_backend="mp"))
    with pytest.raises(DeployConfigError, match="ray_address: a Ray cluster serves stages only with"):
        parse_deploy_config(deploy(ray_address="10.0.0.1:6379"))


def test_ray_stages_name_the_stages_in_actors():
    cfg = parse_deploy_config(deploy(distributed_executor_backend="ray", ray_stages=["qwen3_tts"]))
    assert [cfg.in_ray(s) for s in cfg.stages] == [True, True]  # Code2Wav goes with its Talker
    assert not any(parse_deploy_config(deploy()).in_ray(s) for s in cfg.stages)
    for top, why in ((dict(ray_stages=["qwen3_tts"]), r"ray_stages: names the stages .* distributed_executor_backend"),
                     (dict(distributed_executor_backend="ray", ray_stages=[]), "ray_stages: name at least one"),
                     (dict(distributed_executor_backend="ray", ray_stages=["code2wav"]),
                      r"ray_stages\[0\]: code2wav runs in its Talker's actor"),
                     (dict(distributed_executor_backend="ray", ray_stages=["qwen3_tts", "asr"]),
                      r"ray_stages\[1\]: no stage has role 'asr'")):
        with pytest.raises(DeployConfigError, match=why):
            parse_deploy_config(deploy(**top))


def test_serve_flags_ask_for_ray_over_the_deploy_file(tmp_path):
    import yaml

    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(deploy(stages={0: {"model": "./m"}, 1: {"model": "./m"}})))
    args = build_parser().parse_args(["serve", "--deploy-config", str(path)])
    assert load_serve_config(args).distributed_executor_backend is None
    args = build_parser().parse_args(["serve", "--deploy-config", str(path), "--distributed-executor-backend", "ray",
                                      "--ray-address", "10.0.0.1:6379"])
    cfg = load_serve_config(args)
    assert (cfg.distributed_executor_backend, cfg.ray_address) == ("ray", "10.0.0.1:6379")
    assert cfg.stages[0].model == str((tmp_path / "m").resolve())  # still resolved against the file's folder
    assert cfg.source == str(path)


def test_the_ray_flag_makes_a_file_with_replicas_valid(tmp_path):
    """Replicas need Ray; the flag asks for it before the file is checked, as the deploy key would."""
    import yaml

    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(deploy(stages={0: {"model": "./m", "num_replicas": 2}, 1: {"model": "./m"}})))
    with pytest.raises(DeployConfigError, match="replicas are Ray actors"):
        load_serve_config(build_parser().parse_args(["serve", "--deploy-config", str(path)]))
    cfg = load_serve_config(build_parser().parse_args(["serve", "--deploy-config", str(path),
                                                       "--distributed-executor-backend", "ray"]))
    assert (cfg.distributed_executor_backend, cfg.stages[0].num_replicas) == ("ray", 2)


def test_in_process_serving_never_imports_ray():
    code = ("import sys, aura_omni.pipeline.runtime, aura_omni.server.app, aura_omni.session.handler, aura_omni.cli; "
            "sys.exit('ray imported' if 'ray' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


def test_streamed_text_pieces_reach_the_talker_in_order_even_before_the_request():
    from aura_omni.placement.host import _Feed

    class Facade:
        fed = []

        def feed_text(self, request_id, req, ids, end=False):
            self.fed.append((request_id, ids, end))

    feed = _Feed()
    feed.add(1, [3, 4], False)  # Ray delivered the second piece first, before the request itself
    feed.add(0, [1, 2], False)
    assert Facade.fed == []
    feed.start(Facade(), "r1", object())
    feed.add(2, [5], True)
    assert Facade.fed == [("r1", [1, 2], False), ("r1", [3, 4], False), ("r1", [5], True)]


def test_gpu_stages_that_cannot_fit_the_cluster_are_refused_at_start():
    from types import SimpleNamespace

    from aura_omni.placement.ray_stages import _check_gpus

    cfg = parse_deploy_config(deploy(distributed_executor_backend="ray", stages={
        0: {"devices": "0", "gpu_memory_utilization": 0.6, "num_replicas": 2}, 1: {"devices": "0"}}))
    talker = cfg.stages[0]
    cluster = lambda gpus: SimpleNamespace(cluster_resources=lambda: {"GPU": gpus})  # noqa: E731
    with pytest.raises(RuntimeError, match="has none"):
        _check_gpus(cluster(0), [talker], None)
    with pytest.raises(RuntimeError, match="ask for 1.2 GPUs"):
        _check_gpus(cluster(1), [talker], None)
    _check_gpus(cluster(2), [talker], None)
    _check_gpus(cluster(0), [talker], "cpu")  # --device cpu: no GPU asked for


def test_process_stages_in_the_deploy_file():
    cfg = parse_deploy_config(deploy(process_stages=["qwen3_tts"]))
    assert cfg.in_own_process(cfg.stages[0]) and cfg.in_own_process(cfg.stages[1])  # Code2Wav in its Talker's
    assert not parse_deploy_config(deploy()).in_own_process(cfg.stages[0])
    with pytest.raises(DeployConfigError, match=r"process_stages\[0\]: code2wav runs in its Talker's process"):
        parse_deploy_config(deploy(process_stages=["code2wav"]))
    with pytest.raises(DeployConfigError, match=r"process_stages\[0\]: no stage has role 'asr'"):
        parse_deploy_config(deploy(process_stages=["asr"]))
    with pytest.raises(DeployConfigError, match="process_stages: with distributed_executor_backend: ray"):
        parse_deploy_config(deploy(process_stages=["qwen3_tts"], distributed_executor_backend="ray"))


def test_process_stages_groups_share_one_process():
    cfg = parse_deploy_config(deploy(process_stages=[["qwen3_tts"]]))
    assert cfg.process_group_of(cfg.stages[0]) == cfg.process_group_of(cfg.stages[1]) == 0
    assert parse_deploy_config(deploy()).process_group_of(cfg.stages[0]) is None
    with pytest.raises(DeployConfigError, match=r"process_stages\[0\]\[1\]: code2wav runs in its Talker's process"):
        parse_deploy_config(deploy(process_stages=[["qwen3_tts", "code2wav"]]))
    with pytest.raises(DeployConfigError, match=r"process_stages\[1\]: qwen3_tts is named twice"):
        parse_deploy_config(deploy(process_stages=[["qwen3_tts"], "qwen3_tts"]))
    with pytest.raises(DeployConfigError, match=r"process_stages\[0\]: an empty group"):
        parse_deploy_config(deploy(process_stages=[[]]))


def test_a_group_and_a_lone_stage_get_a_process_each_whatever_their_numbers():
    from aura_omni.placement.process_stages import process_groups

    stages = [{"stage_id": i, "model": "m", "devices": "cpu", "model_stage": role}
              for i, role in enumerate(["asr", "aura", "qwen3_tts", "code2wav"])]
    cfg = parse_deploy_config({"pipeline": "aura_omni", "stages": stages, "process_stages": [["aura"], "asr"]})
    apart = [s for s in cfg.stages if cfg.role_of(s) != "code2wav" and cfg.in_own_process(s)]
    # the group is entry 0 and ASR is stage 0: still two processes
    assert [[s.stage_id for s in group] for group in process_groups(cfg, apart)] == [[0], [1]]


def test_a_stage_process_warms_the_rest_after_ready_with_its_own_stages_and_serves_on_if_that_fails(caplog):
    import asyncio
    import types

    from aura_omni.placement.process_host import _Server

    host = types.SimpleNamespace(role="qwen3_tts", model=object(), busy=lambda: False)
    other = types.SimpleNamespace(role="asr", model=object(), busy=lambda: True)
    calls = []

    async def rest(models, busy):
        calls.append((models, busy))
        if len(calls) == 2:
            raise RuntimeError("a capture failed")

    server = _Server({"qwen3_tts": host, "asr": other})  # a group's process: its stages warm together
    asyncio.run(server._warm_after_ready(rest, freeze=False))
    assert calls == [({"qwen3_tts": host.model, "asr": other.model}, server._busy)] and server._busy()
    asyncio.run(server._warm_after_ready(rest, freeze=False))  # logged; the process serves on
    assert "the warm start after ready failed" in caplog.text
    asyncio.run(server._warm_after_ready(None, freeze=False))  # warmed whole before ready: nothing left
    assert len(calls) == 2
