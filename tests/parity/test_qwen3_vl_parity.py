"""AURA stage (native Qwen3-VL) against transformers' Qwen3VLForConditionalGeneration on the tiny checkpoint:
text-only, one image, a 4-frame video and a mixed batch; image preprocessing against transformers' PIL
image processor; video preprocessing against golden values made by transformers' torchvision processor."""

from pathlib import Path

import numpy as np
import pytest
import torch

from aura_omni.layers.attention import AttentionMetadata
from aura_omni.media.vision_preprocess import VisionPreprocessConfig, preprocess_image, preprocess_video
from aura_omni.models.qwen3_vl import AURA_STOP_TOKEN_IDS, Qwen3VLForCausalLM
from tests.unit.aura_engine import engine_generate
from aura_omni.models.qwen3_vl_prompt import build_aura_prompt
from aura_omni.testing.tiny_vl import write_tiny_aura

pytestmark = pytest.mark.parity
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_vl_video_golden.npz"
NEW_TOKENS = 6


def moving_square_frames(n: int, height: int, width: int) -> np.ndarray:
    """Flat colour per frame, a gradient, and a white square moving right: deterministic, not constant."""
    rng = np.random.default_rng(0)
    frames = np.zeros((n, height, width, 3), dtype=np.uint8)
    ramp = np.linspace(0, 80, width, dtype=np.float32)[None, :, None]
    for i in range(n):
        frames[i] = np.clip(rng.integers(0, 170, (1, 1, 3)) + ramp, 0, 255).astype(np.uint8)
        frames[i, height // 4: height // 2, width // 4 + 2 * i: width // 2 + 2 * i] = 255
    return frames


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration

    ckpt = write_tiny_aura(tmp_path_factory.mktemp("tiny_aura"))
    ours = Qwen3VLForCausalLM.from_pretrained(ckpt)
    ref = Qwen3VLForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32).eval()
    return ckpt, ours, ref, AutoTokenizer.from_pretrained(ckpt)


def _hf_inputs(ids: list[int], media):
    ids_t = torch.tensor([ids])
    kw = {"input_ids": ids_t, "attention_mask": torch.ones_like(ids_t),
          "mm_token_type_ids": ((ids_t == 151655) * 1 + (ids_t == 151656) * 2).int()}
    images = [m for m in media if m.kind == "image"]
    videos = [m for m in media if m.kind == "video"]
    if images:
        kw["pixel_values"] = torch.cat([m.pixel_values for m in images])
        kw["image_grid_thw"] = torch.tensor([m.grid_thw for m in images])
    if videos:
        kw["pixel_values_videos"] = torch.cat([m.pixel_values for m in videos])
        kw["video_grid_thw"] = torch.tensor([m.grid_thw for m in videos])
    return kw


def _check_against_reference(tiny, user_text: str, media) -> None:
    _, ours, ref, tok = tiny
    text, media = build_aura_prompt(user_text, media)
    ids = tok(text)["input_ids"]
    kw = _hf_inputs(ids, media)
    with torch.no_grad():
        prompt = ours.build_prompt(ids, media)
        hidden = ours(prompt.inputs_embeds, prompt.positions, AttentionMetadata.prefill([len(prompt)]), prompt.deepstack)
        logits = ours.compute_logits(hidden)
        expect = ref(**kw).logits[0]
        assert torch.allclose(logits, expect, atol=1e-4, rtol=0), (logits - expect).abs().max()
        if media:
            ref_pos, ref_delta = ref.model.get_rope_index(
                kw["input_ids"], kw["mm_token_type_ids"], kw.get("image_grid_thw"), kw.get("video_grid_thw"),
                kw["attention_mask"])
            assert torch.equal(prompt.positions, ref_pos[:, 0]), "MRoPE position ids differ"
            assert prompt.rope_delta == int(ref_delta)
        ref_ids = ref.generate(**kw, max_new_tokens=NEW_TOKENS, do_sample=False,
                               eos_token_id=list(AURA_STOP_TOKEN_IDS), pad_token_id=151643)[0, len(ids):].tolist()
    ours_ids = engine_generate(ours, [prompt], NEW_TOKENS)[0].token_ids
    assert ours_ids == ref_ids


def test_text_only_matches_transformers(tiny):
    _check_against_reference(tiny, "What is on the table?", [])


def test_one_image_matches_transformers(tiny):
    image = preprocess_image(moving_square_frames(1, 70, 90)[0])
    assert image.grid_thw == (1, 16, 20)  # 70x90 scaled up to the 256*256 minimum budget: 256x320
    _check_against_reference(tiny, "Describe the picture.", [image])


def test_four_frame_video_matches_transformers(tiny):
    video = preprocess_video(moving_square_frames(4, 64, 64), video_fps=2.0)
    assert video.grid_thw == (2, 4, 4) and video.timestamps == [0.25, 1.25]
    _check_against_reference(tiny, "Tell me when the square stops.", [video])


def test_image_and_video_in_one_prompt_match_transformers(tiny):
    image = preprocess_image(moving_square_frames(1, 40, 300)[0])
    video = preprocess_video(moving_square_frames(5, 48, 80), video_fps=2.0)
    _check_against_reference(tiny, "Compare them.", [video, image])


def test_batched_generation_equals_each_prompt_alone(tiny):
    _, ours, _, tok = tiny
    cases = [("Hello there", []), ("Look.", [preprocess_image(moving_square_frames(1, 64, 96)[0])]),
             ("Now?", [preprocess_video(moving_square_frames(3, 64, 64), video_fps=2.0)])]
    prompts = []
    for text, media in cases:
        t, media = build_aura_prompt(text, media)
        prompts.append(ours.build_prompt(tok(t)["input_ids"], media))
    batched = [r.token_ids for r in engine_generate(ours, prompts, NEW_TOKENS)]
    alone = [engine_generate(ours, [p], NEW_TOKENS)[0].token_ids for p in prompts]
    assert batched == alone


@pytest.mark.parametrize("height,width", [(256, 300), (70, 90), (600, 380)])
def test_image_preprocessing_matches_transformers_pil_processor(tiny, height, width):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    ckpt = tiny[0]
    proc = Qwen2VLImageProcessorPil.from_pretrained(ckpt)
    rgb = moving_square_frames(1, height, width)[0]
    expect = proc(images=[rgb], return_tensors="pt")
    cfg = VisionPreprocessConfig.from_hf(__import__("json").loads((ckpt / "preprocessor_config.json").read_text()),
                                         video=False)
    ours = preprocess_image(rgb, VisionPreprocessConfig(**{**cfg.__dict__, "resample": "pil"}))
    assert list(ours.grid_thw) == expect["image_grid_thw"][0].tolist()
    assert torch.allclose(ours.pixel_values, expect["pixel_values"].float(), atol=1e-4, rtol=0)


def _from_codes(codes: np.ndarray) -> torch.Tensor:
    return (torch.from_numpy(codes).float() / 255 - 0.5) / 0.5


@pytest.mark.skipif(not GOLDEN.exists(), reason="golden file not generated (scripts/make_video_golden.py)")
def test_video_preprocessing_matches_torchvision_golden():
    golden = np.load(GOLDEN)
    cases = [k[: -len("_frames")] for k in golden.files if k.endswith("_frames")]
    assert len(cases) >= 4
    for case in cases:
        frames, fps = golden[f"{case}_frames"], float(golden[f"{case}_fps"])
        ours = preprocess_video(frames, video_fps=fps)
        assert list(ours.grid_thw) == golden[f"{case}_grid_thw"].tolist(), case
        expect = _from_codes(golden[f"{case}_pixel_codes"])
        assert torch.allclose(ours.pixel_values, expect, atol=1e-4, rtol=0), case
        assert np.allclose(ours.timestamps, golden[f"{case}_timestamps"]), case


@pytest.mark.skipif(not GOLDEN.exists(), reason="golden file not generated (scripts/make_video_golden.py)")
def test_image_preprocessing_default_matches_torchvision_golden():
    golden = np.load(GOLDEN)
    for case in [k[len("image_"): -len("_rgb")] for k in golden.files if k.endswith("_rgb")]:
        ours = preprocess_image(golden[f"image_{case}_rgb"])  # default: torch resample, like torchvision
        assert list(ours.grid_thw) == golden[f"image_{case}_grid_thw"].tolist(), case
        assert torch.allclose(ours.pixel_values, _from_codes(golden[f"image_{case}_pixel_codes"]), atol=1e-4, rtol=0)


def test_video_prompt_expansion_matches_transformers_processor():
    """Our placeholder text equals Qwen3VLProcessor.replace_video_token's (called on a stand-in instance)."""
    from types import SimpleNamespace

    from transformers import Qwen3VLProcessor
    from transformers.video_utils import VideoMetadata

    from aura_omni.models.qwen3_vl_prompt import render_vision

    for n, fps in [(4, 2.0), (5, 2.0), (6, 30.0)]:
        video = preprocess_video(moving_square_frames(n, 64, 96), video_fps=fps)
        stand_in = SimpleNamespace(video_processor=SimpleNamespace(merge_size=2, temporal_patch_size=2),
                                   vision_start_token="<|vision_start|>", vision_end_token="<|vision_end|>",
                                   video_token="<|video_pad|>")
        stand_in._calculate_timestamps = lambda *a: Qwen3VLProcessor._calculate_timestamps(stand_in, *a)
        inputs = {"video_grid_thw": torch.tensor([video.grid_thw]),
                  "video_metadata": [VideoMetadata(total_num_frames=n, fps=fps, frames_indices=list(range(n)))]}
        assert render_vision(video) == Qwen3VLProcessor.replace_video_token(stand_in, inputs, 0)
