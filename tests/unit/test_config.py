"""Deploy YAML validation: the shipped configs load, and mistakes name the field and the file."""

from pathlib import Path

import pytest
import yaml

from aura_omni.deploy import (ASR, AURA, CODE2WAV, TALKER, DeployConfigError, load_deploy_config,
                              parse_deploy_config)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _write(tmp_path: Path, data: dict, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _aura(**stage1) -> dict:
    return {"pipeline": "aura_omni", "stages": [
        {"stage_id": 0, "model": "asr"}, {"stage_id": 1, "model": "aura", **stage1},
        {"stage_id": 2, "model": "tts"}, {"stage_id": 3, "model": "tts"}]}


def test_shipped_aura_omni_config_has_the_seed_topology():
    cfg = load_deploy_config(CONFIGS / "aura_omni.yaml")
    assert cfg.pipeline == "aura_omni" and cfg.roles == {ASR, AURA, TALKER, CODE2WAV}
    assert [s.model for s in cfg.stages] == ["Qwen/Qwen3-ASR-1.7B", "aurateam/AURA",
                                            "Qwen/Qwen3-TTS-12Hz-1.7B-Base", "Qwen/Qwen3-TTS-12Hz-1.7B-Base"]
    assert [s.gpu_memory_utilization for s in cfg.stages] == [0.1, 0.4, 0.2, 0.2]
    assert {s.devices for s in cfg.stages} == {"0"}
    codec = cfg.codec_streaming()
    assert (codec.codec_chunk_frames, codec.codec_left_context_frames, codec.initial_codec_chunk_frames) == (25, 72, 1)
    assert cfg.stage(TALKER).default_sampling_params.repetition_penalty == 1.05
    assert cfg.stage(TALKER).subtalker_sampling_params.top_k == 50


def test_shipped_tts_config_serves_tts_only():
    cfg = load_deploy_config(CONFIGS / "qwen3_tts.yaml")
    assert cfg.roles == {TALKER, CODE2WAV} and cfg.stage(ASR) is None


def test_gpu_memory_utilization_7_names_field_and_file(tmp_path):
    path = _write(tmp_path, _aura(gpu_memory_utilization=7))
    with pytest.raises(DeployConfigError) as e:
        load_deploy_config(path)
    assert str(e.value) == f"{path}: stages[1].gpu_memory_utilization: must be <= 1 (got 7)"


def test_unknown_key_is_refused_with_its_path(tmp_path):
    path = _write(tmp_path, _aura(max_num_seq=4))
    with pytest.raises(DeployConfigError, match=r"x\.yaml: stages\[1\]\.max_num_seq: unknown key"):
        load_deploy_config(path)


def test_unknown_connector_extra_key_is_refused():
    data = _aura()
    data["connectors"] = {"shm": {"name": "SharedMemoryConnector", "extra": {"codec_chunk_frame": 25}}}
    with pytest.raises(DeployConfigError, match=r"f\.yaml: connectors\.shm\.extra\.codec_chunk_frame: unknown key"):
        parse_deploy_config(data, "f.yaml")


def test_unknown_top_level_key_and_bad_sampling_value_are_all_reported():
    data = _aura()
    data["stagez"] = []
    data["stages"][2]["default_sampling_params"] = {"temperature": -1}
    with pytest.raises(DeployConfigError) as e:
        parse_deploy_config(data, "f.yaml")
    assert "f.yaml: stagez: unknown key" in str(e.value)
    assert "f.yaml: stages[2].default_sampling_params.temperature: must be >= 0 (got -1)" in str(e.value)


def test_talker_and_code2wav_must_share_a_checkpoint():
    data = _aura()
    data["stages"][3]["model"] = "other"
    with pytest.raises(DeployConfigError, match="needs a code2wav stage loading the same checkpoint"):
        parse_deploy_config(data, "f.yaml")


def test_one_talker_pair_per_checkpoint_and_each_talker_finds_its_code2wav():
    data = _aura()
    talker, code2wav = data["stages"][2], data["stages"][3]
    pair = [dict(talker, stage_id=4, model="cv", model_stage="qwen3_tts"),
            dict(code2wav, stage_id=5, model="cv", model_stage="code2wav")]
    cfg = parse_deploy_config(dict(data, stages=data["stages"] + pair), "f.yaml")
    assert [cfg.code2wav_of(s).stage_id for s in cfg.stages if cfg.role_of(s) == "qwen3_tts"] == [3, 5]
    with pytest.raises(DeployConfigError, match="more than one qwen3_tts stage loads"):
        same = [dict(s, model=talker["model"]) for s in pair]
        parse_deploy_config(dict(data, stages=data["stages"] + same), "f.yaml")
    with pytest.raises(DeployConfigError, match="more than one stage has role 'aura'"):
        parse_deploy_config(dict(data, stages=data["stages"] + [dict(data["stages"][1], stage_id=6, model_stage="aura")]),
                            "f.yaml")


def test_talker_without_code2wav_is_refused():
    data = {"pipeline": "qwen3_tts", "stages": [{"stage_id": 0, "model": "tts"}]}
    with pytest.raises(DeployConfigError, match="needs a code2wav stage"):
        parse_deploy_config(data, "f.yaml")


def test_tts_stages_alone_under_aura_omni_keep_their_upstream_roles():
    cfg = parse_deploy_config({"pipeline": "aura_omni", "stages": [
        {"stage_id": 2, "model": "tts"}, {"stage_id": 3, "model": "tts"}]})
    assert cfg.roles == {TALKER, CODE2WAV}


def test_explicit_model_stage_overrides_position():
    cfg = parse_deploy_config({"pipeline": "aura_omni", "stages": [
        {"stage_id": 7, "model": "tts", "model_stage": "qwen3_tts"},
        {"stage_id": 8, "model": "tts", "model_stage": "code2wav"}]})
    assert cfg.stage(TALKER).stage_id == 7


def test_stage_id_without_role_is_refused():
    with pytest.raises(DeployConfigError, match=r"stages\[0\]\.model_stage: stage_id 5 has no role"):
        parse_deploy_config({"pipeline": "qwen3_tts", "stages": [{"stage_id": 5, "model": "m"}]}, "f.yaml")


def test_platform_overrides_merge_by_stage_id():
    data = _aura()
    data["platforms"] = {"npu": {"stages": [{"stage_id": 2, "enforce_eager": True, "max_num_seqs": 2}]}}
    cfg = parse_deploy_config(data)
    assert cfg.stage(TALKER).enforce_eager is False
    npu = cfg.for_platform("npu")
    assert npu.stage(TALKER).enforce_eager is True and npu.stage(TALKER).max_num_seqs == 2
    assert npu.stage(AURA).enforce_eager is False and cfg.for_platform("cuda") is cfg


def test_platform_override_of_missing_stage_is_refused():
    data = _aura()
    data["platforms"] = {"npu": {"stages": [{"stage_id": 9, "enforce_eager": True}]}}
    with pytest.raises(DeployConfigError, match=r"platforms\.npu\.stages\[0\]\.stage_id: no stage has id 9"):
        parse_deploy_config(data, "f.yaml")


def test_cli_model_fills_stages_without_model_and_relative_paths_resolve(tmp_path):
    path = _write(tmp_path, {"pipeline": "qwen3_tts", "stages": [
        {"stage_id": 0, "model": "./ckpt"}, {"stage_id": 1, "model": "./ckpt"}]})
    cfg = load_deploy_config(path)
    assert cfg.stages[0].model == str(tmp_path / "ckpt")
    path = _write(tmp_path, {"pipeline": "qwen3_tts", "stages": [{"stage_id": 0}, {"stage_id": 1}]}, "y.yaml")
    assert load_deploy_config(path, default_model="Org/M").stages[1].model == "Org/M"
    with pytest.raises(DeployConfigError, match=r"y\.yaml: stages\[0\]\.model: required key is missing"):
        load_deploy_config(path)


def test_not_yaml_and_missing_file_are_clear(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages: [1, 2\n")
    with pytest.raises(DeployConfigError, match="bad.yaml: not valid YAML"):
        load_deploy_config(bad)
    with pytest.raises(DeployConfigError, match="nope.yaml: cannot read deploy file"):
        load_deploy_config(tmp_path / "nope.yaml")


def test_stage_engine_settings_reach_the_engine_config():
    from aura_omni.stages.deploy_settings import engine_config

    cfg = load_deploy_config(CONFIGS / "aura_omni.yaml")
    aura = engine_config(cfg.stage(AURA))
    assert aura.async_scheduling and aura.enable_prefix_caching == cfg.stage(AURA).enable_prefix_caching
    plain = parse_deploy_config(_aura())
    assert not engine_config(plain.stage(AURA)).async_scheduling  # the deploy field's default: off


# --- every field honoured, or refused with the file and the field ------------------------------------------------

def _tts(talker: dict | None = None, code2wav: dict | None = None, extra: dict | None = None, **top) -> dict:
    return {"pipeline": "qwen3_tts", **top,
            "connectors": {"shm": {"name": "SharedMemoryConnector", "extra": extra or {}}},
            "stages": [{"stage_id": 0, "model": "tts", "output_connectors": {"to_stage_1": "shm"}, **(talker or {})},
                       {"stage_id": 1, "model": "tts", "input_connectors": {"from_stage_0": "shm"}, **(code2wav or {})}]}


def _refused(data: dict, field: str, why: str) -> None:
    with pytest.raises(DeployConfigError) as e:
        parse_deploy_config(data, "d.yaml")
    lines = str(e.value).splitlines()
    assert any(line.startswith(f"d.yaml: {field}: ") and why in line for line in lines), str(e.value)


@pytest.mark.parametrize("key, value, why", [
    ("shm_threshold_bytes", 65536, "no shared-memory transport"),
    ("connector_get_sleep_s", 0.01, "nothing polls"),
    ("connector_get_max_wait_first_chunk", 3000, "nothing polls"),
    ("connector_get_max_wait", 300, "nothing polls"),
    ("decode_cudagraph_capture_sizes", [25, 73], "captures a CUDA graph for each window length"),
    ("ref_code_context_frames", 10, "prime the stateful Code2Wav decoder"),
    ("codec_chunk_ramp", [2, 4], "adaptive codec chunk scheduling is not implemented"),
    ("codec_chunk_adaptive", True, "adaptive"),
    ("codec_chunk_min_frames", 2, "adaptive"),
    ("codec_chunk_safety_margin_ms", 50, "adaptive"),
    ("codec_chunk_ramp_divisor", 15, "adaptive"),
    ("codec_chunk_ramp_delta_min", 2, "adaptive"),
    ("codec_streaming", False, "always streams codec frames"),
    ("codec_left_context_frames", 25, "stateful Code2Wav decoder keeps every frame"),
    ("initial_codec_chunk_frames", 0, "not implemented"),
])
def test_connector_extras_this_build_would_ignore_are_refused(key, value, why):
    _refused(_tts(extra={key: value}), f"connectors.shm.extra.{key}", why)


def test_every_upstream_connector_extra_is_honoured_or_refused():
    from aura_omni.deploy import REFUSED_EXTRAS, ConnectorExtra

    honoured = {"codec_chunk_frames", "initial_codec_chunk_frames", "codec_left_context_frames", "codec_streaming",
                "codec_batch_wait_ms"}  # ours
    assert set(ConnectorExtra.model_fields) == honoured | set(REFUSED_EXTRAS)
    cfg = parse_deploy_config(_tts(extra={"codec_streaming": True, "codec_chunk_frames": 10, "codec_left_context_frames": 72,
                                          "initial_codec_chunk_frames": 3}))
    assert (cfg.codec_streaming().codec_chunk_frames, cfg.codec_streaming().initial_codec_chunk_frames) == (10, 3)


@pytest.mark.parametrize("data, field, why", [
    (_tts(talker={"enable_prefix_caching": True}), "stages[0].enable_prefix_caching", "never cached"),
    (_tts(code2wav={"async_scheduling": False}), "stages[1].async_scheduling", "never waits"),
    (_tts(code2wav={"devices": "1"}), "stages[1].devices", "runs on the Talker's device"),
    (_tts(code2wav={"load_format": "dummy"}), "stages[1].load_format", "Talker's checkpoint"),
    (_tts(code2wav={"max_num_batched_tokens": 100}), "stages[1].max_num_batched_tokens", "needs 400 codes"),
    (_tts(talker={"max_model_len": 4096}, code2wav={"max_model_len": 1000}), "stages[1].max_model_len", "65536 codes"),
    (_tts(code2wav={"default_sampling_params": {"temperature": 0.7}}), "stages[1].default_sampling_params.temperature",
     "does not sample"),
    (_tts(talker={"default_sampling_params": {"min_tokens": 5}}), "stages[0].default_sampling_params.min_tokens",
     "accepted: 2"),
    (_tts(talker={"default_sampling_params": {"stop_token_ids": [7]}}),
     "stages[0].default_sampling_params.stop_token_ids", "accepted: [], [2150]"),
    (_tts(code2wav={"subtalker_sampling_params": {"top_k": 5}}), "stages[1].subtalker_sampling_params", "code predictor"),
    (_tts(talker={"devices": "0,1"}), "stages[0].devices", "one device"),
    (_tts(talker={"kernels": {"stage_stream": True}}), "stages[0].kernels.stage_stream", "only the asr stage"),
    (_tts(talker={"gpu_memory_utilization": 0.7}, code2wav={"gpu_memory_utilization": 0.5}), "stages", "add up to 1.2"),
    (_tts(async_chunk=False), "async_chunk", "always streams codec windows"),
    (_tts(session_mode="duplex"), "session_mode", "aura_omni pipeline mode"),
    (dict(_aura(), connectors={"c": {"name": "MooncakeConnector"}}), "connectors.c.name", "only SharedMemoryConnector"),
    (dict(_tts(), connectors={"shm": {}, "spare": {}}), "connectors.spare", "no stage uses it"),
    (dict(_aura(), connectors={"c": {}}, stages=[dict(s, output_connectors={"to_stage_1": "c"}) if s["stage_id"] == 0
                                                 else s for s in _aura()["stages"]]),
     "stages[0].output_connectors", "only the Talker -> Code2Wav edge"),
    (dict(_tts(code2wav={"input_connectors": {"from_stage_0": "other"}}), connectors={"shm": {}, "other": {}}),
     "stages[1].input_connectors", "must name the Talker's output connector (shm)"),
    (dict(_tts(), platforms={"rocm": {"stages": [{"stage_id": 0, "enforce_eager": True}]}}), "platforms.rocm",
     "cuda, cpu, npu"),
])
def test_stage_and_top_level_fields_this_build_would_ignore_are_refused(data, field, why):
    _refused(data, field, why)


@pytest.mark.parametrize("role_index, key, value", [
    (0, "top_p", 0.8), (0, "temperature", 0.7), (0, "stop", ["x"]), (1, "logprobs", 5), (1, "n", 2),
    (1, "skip_special_tokens", True),
])
def test_sampling_defaults_a_text_stage_would_ignore_are_refused(role_index, key, value):
    _refused(_aura() | {"stages": [dict(s, default_sampling_params={key: value}) if i == role_index else s
                                  for i, s in enumerate(_aura()["stages"])]},
             f"stages[{role_index}].default_sampling_params.{key}", "got")


def test_a_platform_override_is_checked_as_merged():
    data = _tts()
    data["platforms"] = {"npu": {"stages": [{"stage_id": 1, "devices": "1"}]}}
    _refused(data, "stages[1].devices", "(platforms.npu merged)")


def test_duplex_session_settings_are_recorded_for_the_realtime_endpoint():
    cfg = parse_deploy_config(dict(_aura(), session_mode="duplex", duplex_session={"max_sessions": 2}))
    assert cfg.session_mode == "duplex" and cfg.duplex_session.max_sessions == 2


def test_talker_engine_gets_the_deploy_lengths_over_its_defaults():
    from aura_omni.stages.tts import default_engine_config
    from aura_omni.stages.deploy_settings import engine_config

    cfg = load_deploy_config(CONFIGS / "aura_omni.yaml")
    talker = engine_config(cfg.stage(TALKER), default_engine_config("cpu"))
    assert (talker.max_model_len, talker.max_num_batched_tokens, talker.max_num_seqs) == (4096, 512, 8)
    assert talker.cuda_graph_max_seq_len == 2048 and not talker.enable_prefix_caching  # the rest: TTS defaults
    bare = engine_config(parse_deploy_config(_tts()).stage(TALKER), default_engine_config("cpu"))
    assert (bare.max_model_len, bare.max_num_batched_tokens) == (8192, 8192)
    wide = engine_config(load_deploy_config(CONFIGS / "qwen3_tts.yaml").stage(TALKER), default_engine_config("cpu"))
    assert wide.max_num_seqs == 64 and wide.graph_batch_sizes[-3:] == [32, 48, 64]  # no eager full batches


def test_a_full_batch_always_has_a_decode_graph():
    from aura_omni.engine.engine_config import EngineConfig

    assert EngineConfig(max_num_seqs=40).graph_batch_sizes == [1, 2, 4, 8, 16, 24, 32, 40]
    assert EngineConfig(max_num_seqs=4).graph_batch_sizes == [1, 2, 4]


def test_code2wav_engine_fields_bound_its_batched_decode():
    from aura_omni.models.qwen3_tts.code2wav_batch import Code2WavBatch
    from aura_omni.stages.deploy_settings import code2wav_settings

    cfg = load_deploy_config(CONFIGS / "aura_omni.yaml")
    got = code2wav_settings(cfg.stage(CODE2WAV), cfg.codec_streaming())
    assert (got["max_batch"], got["max_frames"]) == (8, 4096)  # max_num_seqs; 65536 codes / 16 is more
    small = parse_deploy_config(_tts(code2wav={"max_num_seqs": 64, "max_num_batched_tokens": 1200}))
    got = code2wav_settings(small.stage(CODE2WAV), small.codec_streaming())
    batch = Code2WavBatch(got["max_batch"], got["max_frames"])
    assert batch.streams(25) == 3  # 1200 codes = 75 frames: three steady windows
    assert batch.streams(2) == 37 and batch.streams(1) == 64  # new streams' short first windows: many more a step
    assert Code2WavBatch(8).streams(25) == 8 and Code2WavBatch(4, 10).streams(25) == 1  # a window always fits


def test_code2wav_batch_wait_comes_from_the_connector_and_is_on_by_default():
    from aura_omni.stages.deploy_settings import code2wav_settings

    shipped = parse_deploy_config(_tts())
    assert code2wav_settings(shipped.stage(CODE2WAV), shipped.codec_streaming())["batch_wait_s"] == 0.25
    off = parse_deploy_config(_tts(extra={"codec_batch_wait_ms": 0}))
    assert code2wav_settings(off.stage(CODE2WAV), off.codec_streaming())["batch_wait_s"] == 0.0
    _refused(_tts(extra={"codec_batch_wait_ms": -1}), "connectors.shm.extra.codec_batch_wait_ms", "must be >= 0")


def test_kernel_switches_reach_the_stage_engine_config(monkeypatch):
    from aura_omni.stages.deploy_settings import engine_config

    from aura_omni import env

    monkeypatch.setattr(env, "_current", env.read({env.GEMV: "0"}))  # a process default for A/B runs: a stage's own wins
    cfg = parse_deploy_config(_aura() | {"stages": [dict(s, kernels={"gemv": True, "pdl": False, "prefill_graphs": False})
                                                    if s["stage_id"] == 1 else s for s in _aura()["stages"]]})
    aura, asr = engine_config(cfg.stage(AURA)), engine_config(cfg.stage(ASR))
    assert aura.kernels.gemv and not aura.kernels.pdl and not aura.use_prefill_graphs
    assert not asr.kernels.gemv and asr.kernels.pdl and asr.use_prefill_graphs


def test_code2wav_on_the_talkers_gpu_spelled_either_way_is_accepted():
    cfg = parse_deploy_config(_tts(talker={"devices": "0", "gpu_memory_utilization": 0.3},
                                   code2wav={"devices": "cuda:0", "gpu_memory_utilization": 0.2, "enforce_eager": True,
                                             "default_sampling_params": {"temperature": 0.0, "seed": 42}}))
    assert cfg.stage(CODE2WAV).devices == "cuda:0"


def test_stages_sharing_a_gpu_without_shares_split_the_default_instead_of_each_taking_it():
    from aura_omni.pipeline.runtime import split_gpu_shares

    cpu = parse_deploy_config(_aura(), "d.yaml")  # written for CPU: no gpu_memory_utilization anywhere
    shares = {s.stage_id: s.gpu_memory_utilization for s in split_gpu_shares(cpu, "cuda").stages}
    assert shares[0] == shares[1] == shares[2] == pytest.approx(0.3) and shares[3] == 0.9  # Code2Wav keeps no KV
    assert split_gpu_shares(cpu, "cpu") is cpu
    data = _aura()
    data["stages"][1]["gpu_memory_utilization"] = 0.5
    given = {s.stage_id: s.gpu_memory_utilization for s in split_gpu_shares(parse_deploy_config(data), "cuda:1").stages}
    assert given[1] == 0.5 and given[0] == given[2] == pytest.approx(0.2)
    data["stages"][1]["gpu_memory_utilization"] = 0.88
    with pytest.raises(DeployConfigError, match="leave 0.02 of the GPU"):
        split_gpu_shares(parse_deploy_config(data), "cuda")
