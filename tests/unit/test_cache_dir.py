"""The cache directory: where it defaults to, which flag or deploy key wins, and the compile caches set under it."""

from pathlib import Path

import yaml

from aura_omni.cli import build_parser, serve_dirs
from aura_omni.deploy import load_deploy_config, parse_deploy_config
from aura_omni.layers.cache_dir import default_cache_dir, resolve_cache_dir, use_compile_caches

TTS_STAGES = [{"stage_id": 0, "model": "t"}, {"stage_id": 1, "model": "t"}]


def test_default_honours_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "aura-omni"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # the XDG spec: a relative value is ignored
    assert default_cache_dir() == Path.home() / ".cache" / "aura-omni"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "aura-omni"
    assert resolve_cache_dir("~/c") == Path.home() / "c"


def test_compile_caches_go_under_the_directory_unless_the_environment_names_one(tmp_path):
    env = {"TRITON_CACHE_DIR": "/mine/triton"}
    caches = use_compile_caches(tmp_path / "cache", env)
    assert caches == {"TRITON_CACHE_DIR": "/mine/triton", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache/inductor")}
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache/inductor")
    assert (tmp_path / "cache/inductor").is_dir() and not (tmp_path / "cache/triton").exists()


def test_flags_win_over_deploy_keys_over_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    plain = parse_deploy_config({"pipeline": "qwen3_tts", "stages": TTS_STAGES})
    args = build_parser().parse_args(["serve"])
    assert serve_dirs(args, plain) == (tmp_path / "xdg/aura-omni", tmp_path / "xdg/aura-omni/voices")
    keyed = parse_deploy_config({"pipeline": "qwen3_tts", "stages": TTS_STAGES, "cache_dir": str(tmp_path / "c")})
    assert serve_dirs(args, keyed) == (tmp_path / "c", tmp_path / "c/voices")
    flags = build_parser().parse_args(["serve", "--cache-dir", str(tmp_path / "f"), "--voice-dir", str(tmp_path / "v")])
    assert serve_dirs(flags, keyed) == (tmp_path / "f", tmp_path / "v")


def test_relative_directories_in_a_deploy_file_are_its_neighbours(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump({"pipeline": "qwen3_tts", "stages": TTS_STAGES, "cache_dir": "cache",
                                    "voice_dir": "/srv/voices"}))
    cfg = load_deploy_config(path)
    assert (cfg.cache_dir, cfg.voice_dir) == (str(tmp_path / "cache"), "/srv/voices")
