"""configs/qwen3_tts_128.yaml is configs/qwen3_tts.yaml sized for 128 streams, with Code2Wav in float16: nothing else
differs, so what the TTS deploy is tested for holds for it."""

from pathlib import Path

from aura_omni.deploy import load_deploy_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_the_128_stream_tts_deploy_differs_only_in_its_bounds_and_code2wavs_dtype():
    base = load_deploy_config(CONFIGS / "qwen3_tts.yaml")
    wide = load_deploy_config(CONFIGS / "qwen3_tts_128.yaml")
    assert [s.max_num_seqs for s in wide.stages] == [128, 128]
    assert [s.dtype for s in base.stages] == ["auto", "auto"] and [s.dtype for s in wide.stages] == ["auto", "float16"]
    assert wide.limits == {"max_concurrent_requests": 256}
    bounds = ("max_num_seqs", "dtype")
    for a, b in zip(base.stages, wide.stages):
        assert {k: v for k, v in a.model_dump().items() if k not in bounds} == \
            {k: v for k, v in b.model_dump().items() if k not in bounds}, a.stage_id
    assert base.codec_streaming() == wide.codec_streaming()
    assert (base.pipeline, base.async_chunk) == (wide.pipeline, wide.async_chunk)
