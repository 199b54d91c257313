"""configs/aura_omni_duplex.yaml parses and carries vLLM-Omni's current (full-duplex) AURA deploy values."""

from pathlib import Path

from aura_omni.deploy import ASR, AURA, CODE2WAV, TALKER, load_deploy_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CUSTOM_VOICE = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"


def test_shipped_duplex_config_is_a_live_session_deploy():
    cfg = load_deploy_config(CONFIGS / "aura_omni_duplex.yaml")
    assert cfg.pipeline == "aura_omni" and cfg.roles == {ASR, AURA, TALKER, CODE2WAV}
    assert (cfg.session_mode, cfg.async_chunk, cfg.duplex_session.max_sessions) == ("duplex", True, 1)
    assert [s.model for s in cfg.stages] == ["Qwen/Qwen3-ASR-1.7B", "aurateam/AURA", CUSTOM_VOICE, CUSTOM_VOICE]
    codec = cfg.codec_streaming()
    assert (codec.codec_chunk_frames, codec.codec_left_context_frames, codec.initial_codec_chunk_frames) == (25, 72, 8)


def test_duplex_config_differs_from_the_seed_only_where_upstream_does():
    seed = load_deploy_config(CONFIGS / "aura_omni.yaml")
    duplex = load_deploy_config(CONFIGS / "aura_omni_duplex.yaml")
    assert seed.session_mode == "turn" and seed.codec_streaming().initial_codec_chunk_frames == 1
    for a, b in zip(seed.stages, duplex.stages):
        same = {k: v for k, v in a.model_dump().items() if k != "model"}
        assert same == {k: v for k, v in b.model_dump().items() if k != "model"}, a.stage_id
    assert duplex.platforms == seed.platforms


def test_the_sized_duplex_deploys_differ_from_each_other_only_in_their_bounds_code2wav_dtype_and_processes():
    eight = load_deploy_config(CONFIGS / "aura_omni_duplex_8.yaml")
    wide = load_deploy_config(CONFIGS / "aura_omni_duplex_32.yaml")
    assert (eight.duplex_session.max_sessions, wide.duplex_session.max_sessions) == (8, 64)
    # the wide one's stage groups each in a process of its own (Code2Wav in its Talker's), the small one's in process
    assert (eight.process_stages, wide.process_stages) == ([], [ASR, AURA, TALKER])
    assert all(wide.in_own_process(s) for s in wide.stages) and not any(eight.in_own_process(s) for s in eight.stages)
    assert [s.max_num_seqs for s in wide.stages] == [32, 64, 64, 32]  # AURA and the Talker: a seat per live session
    # and the prefill graphs of ASR and AURA, long enough for a burst of 32 clips and of 32 turns' words
    assert [s.kernels.prefill_graph_tokens for s in wide.stages] == [2048, 1024, None, None]
    # and Code2Wav in float16, its steps the ones that wait for the GPU at 32 sessions
    assert wide.stages[3].dtype == "float16" and eight.stages[3].dtype != "float16"
    bounds = ("max_num_seqs", "kernels", "dtype")
    for a, b in zip(eight.stages, wide.stages):
        assert {k: v for k, v in a.model_dump().items() if k not in bounds} == \
            {k: v for k, v in b.model_dump().items() if k not in bounds}, a.stage_id
        assert a.dtype == b.dtype or a.stage_id == 3
        assert a.kernels.model_copy(update={"prefill_graph_tokens": None}) == \
            b.kernels.model_copy(update={"prefill_graph_tokens": None}), a.stage_id
    assert eight.codec_streaming() == wide.codec_streaming()
