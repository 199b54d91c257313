"""`aura-omni` argument parsing, deploy selection and make-tiny's deploy files."""

from pathlib import Path

import pytest
import yaml

from aura_omni.cli import build_parser, load_serve_config, main, serve_limits
from aura_omni.deploy import CODE2WAV, TALKER, load_deploy_config, parse_deploy_config
from aura_omni.testing.make_tiny import CHECKPOINTS, deploy_files

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_serve_accepts_vllm_spellings():
    args = build_parser().parse_args([
        "serve", "aurateam/AURA", "--omni", "--deploy-config", "configs/aura_omni.yaml",
        "--served-model-name", "aurateam/AURA", "--trust-remote-code", "--host", "127.0.0.1", "--port", "8091",
        "--api-key", "k", "--device", "cpu", "--dtype", "float32", "--load-format", "dummy"])
    assert (args.command, args.model, args.deploy_config, args.served_model_name) == (
        "serve", "aurateam/AURA", "configs/aura_omni.yaml", ["aurateam/AURA"])
    assert args.omni and args.trust_remote_code and args.port == 8091 and args.api_key == "k"
    assert (args.device, args.dtype, args.load_format) == ("cpu", "float32", "dummy")


def test_serve_defaults_and_bad_choices():
    args = build_parser().parse_args(["serve", "--deploy-config", "d.yaml"])
    assert args.model is None and args.port == 8000 and args.load_format is None and not args.omni
    assert args.allowed_media_domains is None and args.allowed_local_media_path is None and args.request_timeout == 300
    opened = build_parser().parse_args(["serve", "--allowed-media-domains", "cdn.example.com", "img.example.org"])
    assert opened.allowed_media_domains == ["cdn.example.com", "img.example.org"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--load-format", "pt"])


def test_version_is_the_package_version(capsys):
    from aura_omni import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"aura-omni {__version__}"
    pyproject = (CONFIGS.parent / "pyproject.toml").read_text()
    assert f'version = "{__version__}"' in pyproject  # one version: the package's and the distribution's


def test_serve_help_shows_what_host_port_and_dtype_mean(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: 0.0.0.0, every interface" in text and "(default: 8000)" in text
    assert "weights and activations of every stage" in text


def test_limits_come_from_defaults_then_the_deploy_file_then_flags():
    deploy = parse_deploy_config({"stages": [{"stage_id": 0, "model": "asr", "model_stage": "asr"}],
                                  "limits": {"max_body_bytes": 1000, "max_text_chars": 10}})
    args = build_parser().parse_args(["serve", "--max-text-chars", "20", "--max-audio-seconds", "2.5"])
    limits = serve_limits(args, deploy)
    assert (limits.max_body_bytes, limits.max_text_chars, limits.max_audio_seconds) == (1000, 20, 2.5)
    assert limits.max_concurrent_requests == 64  # untouched: the built-in default
    with pytest.raises(ValueError, match="max_body_bytes must be a positive number"):
        serve_limits(build_parser().parse_args(["serve", "--max-body-bytes", "0"]), deploy)


def test_stage_model_wins_over_cli_model():
    args = build_parser().parse_args(["serve", "some/Other", "--deploy-config", str(CONFIGS / "aura_omni.yaml")])
    cfg = load_serve_config(args)
    assert cfg.stages[1].model == "aurateam/AURA"


def test_model_alone_serves_tts_only():
    cfg = load_serve_config(build_parser().parse_args(["serve", "Qwen/Qwen3-TTS-12Hz-1.7B-Base"]))
    assert cfg.roles == {TALKER, CODE2WAV} and cfg.stage(TALKER).model == "Qwen/Qwen3-TTS-12Hz-1.7B-Base"


def test_invalid_deploy_file_stops_serve_with_field_and_file(tmp_path, capsys):
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump({"pipeline": "qwen3_tts", "stages": [
        {"stage_id": 0, "model": "m", "gpu_memory_utilization": 7}, {"stage_id": 1, "model": "m"}]}))
    assert main(["serve", "--deploy-config", str(path)]) == 2
    assert f"{path}: stages[0].gpu_memory_utilization: must be <= 1 (got 7)" in capsys.readouterr().err


def test_make_tiny_deploy_files_validate_and_point_at_the_checkpoints(tmp_path):
    for name, data in deploy_files(tmp_path).items():
        (tmp_path / name).write_text(yaml.safe_dump(data))
    full = load_deploy_config(tmp_path / "deploy.yaml")
    assert len(full.stages) == 4 and {s.devices for s in full.stages} == {"cpu"}
    assert full.stage(TALKER).model == str(tmp_path / CHECKPOINTS["tts_base"][2])
    tts = load_deploy_config(tmp_path / "deploy_tts.yaml")
    assert tts.roles == {TALKER, CODE2WAV} and tts.stage(CODE2WAV).model.endswith("qwen3_tts_base")
    cv = load_deploy_config(tmp_path / "deploy_tts_customvoice.yaml")
    assert cv.stage(TALKER).model.endswith("qwen3_tts_custom_voice")
    assert cv.codec_streaming().initial_codec_chunk_frames == 1
