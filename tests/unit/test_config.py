"""Deploy YAML validation: the shipped configs load, and mistakes name the field and the file."""

from pathlib import Path

import pytest
import yaml

from aura_omni.config import (ASR, AURA, CODE2WAV, TALKER, DeployConfigError, load_deploy_config,
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
    with pytest.raises(DeployConfigError, match="must load the same checkpoint"):
        parse_deploy_config(data, "f.yaml")


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
    from aura_omni.stages.engine_config import engine_config

    cfg = load_deploy_config(CONFIGS / "aura_omni.yaml")
    aura = engine_config(cfg.stage(AURA))
    assert aura.async_scheduling and aura.enable_prefix_caching == cfg.stage(AURA).enable_prefix_caching
    plain = parse_deploy_config(_aura())
    assert not engine_config(plain.stage(AURA)).async_scheduling  # the deploy field's default: off
