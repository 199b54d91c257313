"""AURA stage (native Qwen3-VL) against transformers' Qwen3VLForConditionalGeneration on the tiny checkpoint, from
request-level input (transcript, frames, typed text, system prompt, history) through the production prompt path
(orchestrator.aura_prompt -> asr2aura -> AuraPipelineStage.prompt_ids and prepare): its ids against upstream's prompt (the
ChatML of vllm-omni asr2aura, vision expanded by transformers' Qwen3VLProcessor, tokenised by transformers) and the
reference id vectors of aura_omni_pipeline.md, its logits and greedy tokens against transformers. Also image
preprocessing against transformers' PIL image processor and video preprocessing against golden values made by
transformers' torchvision processor."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from aura_omni.stages.asr.transcript import Transcript
from aura_omni.deploy import Stage
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.media.vision_preprocess import VisionPreprocessConfig, preprocess_image, preprocess_video
from aura_omni.models.qwen3 import DeepStack
from aura_omni.models.qwen3_vl import AURA_STOP_TOKEN_IDS, Qwen3VLForCausalLM
from aura_omni.models.tokenizer import load_tokenizer
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.stages.aura.stage import AuraPipelineStage, AuraRequest
from aura_omni.pipeline.constants import DEFAULT_AURA_SYSTEM_PROMPT
from aura_omni.pipeline.orchestrator import aura_prompt
from aura_omni.pipeline.turn import TurnRequest
from aura_omni.testing.tiny_vl import write_tiny_aura
from tests.unit.aura_engine import engine_generate

pytestmark = pytest.mark.parity
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_vl_video_golden.npz"  # committed; scripts/make_video_golden.py
NEW_TOKENS = 6

# Upstream id vectors (aura_omni_pipeline.md §3.1 and §5: Qwen vocabulary ids, AURA's added <|silent|>).
IM_START, IM_END, ASSISTANT, NEWLINE, SILENT = 151644, 151645, 77091, 198, 151669
ASSISTANT_HEADER = [IM_START, ASSISTANT, NEWLINE]
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 151652, 151653, 151655, 151656


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
    stage = AuraPipelineStage(ours, load_tokenizer(ckpt), None, Stage(stage_id=1, model=str(ckpt)))
    return ckpt, ours, ref, AutoTokenizer.from_pretrained(ckpt), stage


def _processor_stand_in():
    """Qwen3VLProcessor's placeholder expansion without its torchvision video processor (transformers' own code)."""
    from transformers import Qwen3VLProcessor

    stand_in = SimpleNamespace(image_processor=SimpleNamespace(merge_size=2),
                               video_processor=SimpleNamespace(merge_size=2, temporal_patch_size=2),
                               image_token="<|image_pad|>", video_token="<|video_pad|>",
                               vision_start_token="<|vision_start|>", vision_end_token="<|vision_end|>")
    stand_in._calculate_timestamps = lambda *a: Qwen3VLProcessor._calculate_timestamps(stand_in, *a)
    return stand_in, Qwen3VLProcessor


def upstream_ids(tok, req: TurnRequest, transcript: Transcript | None, fps: dict[int, tuple[int, float]]) -> list[int]:
    """vllm-omni asr2aura's prompt (§3.3: ChatML with newlines; here one placeholder per item), expanded as
    Qwen3VLProcessor expands it and tokenised by transformers. fps: video index -> (frames, fps)."""
    from transformers.video_utils import VideoMetadata

    stand_in, processor = _processor_stand_in()
    placeholder = {"image": "<|vision_start|><|image_pad|><|vision_end|>",
                   "video": "<|vision_start|><|video_pad|><|vision_end|>"}
    kinds = iter(v.kind for v in req.vision)
    chatml = lambda role, body: f"<|im_start|>{role}\n{body}<|im_end|>\n"  # noqa: E731
    said = transcript.text.strip() if transcript is not None else ""
    user = "\n".join(p for p in [said, *(t.strip() for t in req.text_parts)] if p)
    text = (chatml("system", req.system_prompt or DEFAULT_AURA_SYSTEM_PROMPT)
            + "".join(chatml(t[0], "".join(placeholder[next(kinds)] for _ in (t[2] if len(t) > 2 else ())) + t[1])
                      for t in req.history)
            + chatml("user", "".join(placeholder[k] for k in kinds) + user) + "<|im_start|>assistant\n")
    for i, item in enumerate(req.vision):
        if item.kind == "image":
            pads = processor.replace_image_token(stand_in, {"image_grid_thw": torch.tensor([item.grid_thw])}, 0)
            text = text.replace(placeholder["image"], "<|vision_start|>" + pads.replace("<|image_pad|>", "<|x|>")
                                + "<|vision_end|>", 1)
        else:
            n, rate = fps[i]
            inputs = {"video_grid_thw": torch.tensor([item.grid_thw]),
                      "video_metadata": [VideoMetadata(total_num_frames=n, fps=rate, frames_indices=list(range(n)))]}
            text = text.replace(placeholder["video"], processor.replace_video_token(stand_in, inputs, 0)
                                .replace("<|video_pad|>", "<|y|>"), 1)
    text = text.replace("<|x|>", "<|image_pad|>").replace("<|y|>", "<|video_pad|>")  # expanded pads: not matched again
    return tok(text)["input_ids"]


def check_reference_id_vectors(ids: list[int], req: TurnRequest) -> None:
    turns = 2 + len(req.history)  # system, history, the user turn; then the open assistant turn
    assert ids[0] == IM_START and ids[-3:] == ASSISTANT_HEADER
    assert ids.count(IM_START) == turns + 1 and ids.count(IM_END) == turns
    assert all(ids[i + 1] == NEWLINE for i, t in enumerate(ids) if t == IM_END)
    images, videos = [v for v in req.vision if v.kind == "image"], [v for v in req.vision if v.kind == "video"]
    assert ids.count(IMAGE_PAD) == sum(v.num_tokens for v in images)
    assert ids.count(VIDEO_PAD) == sum(v.num_tokens for v in videos)
    assert ids.count(VISION_START) == ids.count(VISION_END) == len(images) + sum(v.grid_thw[0] for v in videos)
    for start in (i for i, t in enumerate(ids) if t == VISION_START):  # each group: start, pads of one kind, end
        end = ids.index(VISION_END, start)
        assert len(set(ids[start + 1:end])) == 1 and ids[start + 1] in (IMAGE_PAD, VIDEO_PAD)


def _hf_inputs(ids: list[int], media):
    ids_t = torch.tensor([ids])
    kw = {"input_ids": ids_t, "attention_mask": torch.ones_like(ids_t),
          "mm_token_type_ids": ((ids_t == IMAGE_PAD) * 1 + (ids_t == VIDEO_PAD) * 2).int()}
    images = [m for m in media if m.kind == "image"]
    videos = [m for m in media if m.kind == "video"]
    if images:
        kw["pixel_values"] = torch.cat([m.pixel_values for m in images])
        kw["image_grid_thw"] = torch.tensor([m.grid_thw for m in images])
    if videos:
        kw["pixel_values_videos"] = torch.cat([m.pixel_values for m in videos])
        kw["video_grid_thw"] = torch.tensor([m.grid_thw for m in videos])
    return kw


def encode(stage: AuraPipelineStage, prompt, vision) -> tuple[list[int], object]:
    """The prompt as the stage's engine takes it: ids from the turns, then the loop's `prepare` (vision encoder,
    embeddings, MRoPE positions, DeepStack), as `AuraPipelineStage.generate` sends it."""
    request = stage.prepare(AuraRequest(stage.prompt_ids(prompt, vision), vision, SamplingParams()))
    return request.ids, request.mm


def _check_turn(tiny, req: TurnRequest, transcript: Transcript | None = None,
                fps: dict[int, tuple[int, float]] | None = None) -> None:
    _, ours, ref, tok, stage = tiny
    with torch.no_grad():
        ids, mm = encode(stage, aura_prompt(req, transcript), req.vision)
    assert ids == upstream_ids(tok, req, transcript, fps or {})
    check_reference_id_vectors(ids, req)
    kw = _hf_inputs(ids, req.vision)
    deepstack = DeepStack(mm.deepstack_positions, mm.deepstack_features) if mm.deepstack_features else None
    with torch.no_grad():
        hidden = ours(mm.embeds, mm.positions, AttentionMetadata.prefill([len(ids)]), deepstack)
        logits = ours.compute_logits(hidden)
        expect = ref(**kw).logits[0]
        assert torch.allclose(logits, expect, atol=1e-4, rtol=0), (logits - expect).abs().max()
        if req.vision:
            ref_pos, ref_delta = ref.model.get_rope_index(
                kw["input_ids"], kw["mm_token_type_ids"], kw.get("image_grid_thw"), kw.get("video_grid_thw"),
                kw["attention_mask"])
            assert torch.equal(mm.positions, ref_pos[:, 0]), "MRoPE position ids differ"
            assert mm.rope_delta == int(ref_delta)
        ref_ids = ref.generate(**kw, max_new_tokens=NEW_TOKENS, do_sample=False,
                               eos_token_id=list(AURA_STOP_TOKEN_IDS), pad_token_id=151643)[0, len(ids):].tolist()
    assert engine_generate(ours, [(ids, mm)], NEW_TOKENS)[0].token_ids == ref_ids


def test_typed_text_turn_matches_transformers(tiny):
    _check_turn(tiny, TurnRequest("t", text_parts=["What is on the table?"]))


def test_spoken_turn_with_history_and_system_prompt_matches_transformers(tiny):
    req = TurnRequest("t", text_parts=["and this?"], system_prompt="You watch a live stream.",
                      history=[("user", "hello"), ("assistant", "<|silent|>"), ("user", "still there?"),
                               ("assistant", "Yes.")])
    _check_turn(tiny, req, Transcript("English", " What is on the table? "))
    ids = encode(tiny[4], aura_prompt(req, Transcript("English", "x")), [])[0]
    assert SILENT in ids  # the silent reply in the history is AURA's special token


def test_one_image_matches_transformers(tiny):
    image = preprocess_image(moving_square_frames(1, 70, 90)[0])
    assert image.grid_thw == (1, 16, 20)  # 70x90 scaled up to the 256*256 minimum budget: 256x320
    _check_turn(tiny, TurnRequest("t", vision=[image]), Transcript("English", "Describe the picture."))


def test_four_frame_video_matches_transformers(tiny):
    video = preprocess_video(moving_square_frames(4, 64, 64), video_fps=2.0)
    assert video.grid_thw == (2, 4, 4) and video.timestamps == [0.25, 1.25]
    _check_turn(tiny, TurnRequest("t", vision=[video], text_parts=["Tell me when the square stops."]),
                fps={0: (4, 2.0)})


def test_video_and_image_with_vision_in_history_match_transformers(tiny):
    earlier = preprocess_video(moving_square_frames(5, 48, 80), video_fps=2.0)
    video = preprocess_video(moving_square_frames(4, 64, 64), video_fps=2.0)
    image = preprocess_image(moving_square_frames(1, 40, 300)[0])
    req = TurnRequest("t", vision=[earlier, video, image], text_parts=["Compare them."],
                      history=[("user", "look", ["video"]), ("assistant", "A square.")])
    _check_turn(tiny, req, Transcript("Chinese", "现在呢"), fps={0: (5, 2.0), 1: (4, 2.0)})


def test_batched_generation_equals_each_prompt_alone(tiny):
    stage = tiny[4]
    turns = [TurnRequest("a", text_parts=["Hello there"]),
             TurnRequest("b", vision=[preprocess_image(moving_square_frames(1, 64, 96)[0])], text_parts=["Look."]),
             TurnRequest("c", vision=[preprocess_video(moving_square_frames(3, 64, 64), video_fps=2.0)],
                         text_parts=["Now?"])]
    with torch.no_grad():
        requests = [encode(stage, aura_prompt(req, None), req.vision) for req in turns]
    batched = [r.token_ids for r in engine_generate(stage.model, requests, NEW_TOKENS)]
    alone = [engine_generate(stage.model, [r], NEW_TOKENS)[0].token_ids for r in requests]
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


def test_image_preprocessing_default_matches_torchvision_golden():
    golden = np.load(GOLDEN)
    for case in [k[len("image_"): -len("_rgb")] for k in golden.files if k.endswith("_rgb")]:
        ours = preprocess_image(golden[f"image_{case}_rgb"])  # default: torch resample, like torchvision
        assert list(ours.grid_thw) == golden[f"image_{case}_grid_thw"].tolist(), case
        assert torch.allclose(ours.pixel_values, _from_codes(golden[f"image_{case}_pixel_codes"]), atol=1e-4, rtol=0)


def test_video_prompt_expansion_matches_transformers_processor(tiny):
    """Our ids of a video equal Qwen3VLProcessor.replace_video_token's text (called on a stand-in) tokenised."""
    from transformers.video_utils import VideoMetadata

    _, _, _, tok, stage = tiny
    stand_in, processor = _processor_stand_in()
    for n, fps in [(4, 2.0), (5, 2.0), (6, 30.0)]:
        video = preprocess_video(moving_square_frames(n, 64, 96), video_fps=fps)
        inputs = {"video_grid_thw": torch.tensor([video.grid_thw]),
                  "video_metadata": [VideoMetadata(total_num_frames=n, fps=fps, frames_indices=list(range(n)))]}
        expect = tok(processor.replace_video_token(stand_in, inputs, 0))["input_ids"]
        assert stage.prompt_tokens.vision_ids(video) == expect
