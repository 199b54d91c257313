#!/usr/bin/env python
"""Write tests/fixtures/qwen3_vl_video_golden.npz: transformers' torchvision-backed Qwen3-VL video processor
(and Qwen2-VL image processor) outputs for a few small deterministic clips, for the parity test of
aura_omni/media/vision_preprocess.py (which must not need torchvision).

Needs an environment with transformers 5.24 + torchvision (not the project venv, whose CPU torch has no
matching torchvision). On this machine the one used was made with:
    python -m venv /tmp/vl_golden_venv
    /tmp/vl_golden_venv/bin/pip install torch==2.14.1 torchvision==0.29.1 transformers==5.24.0 pillow numpy
    /tmp/vl_golden_venv/bin/python scripts/make_video_golden.py
Processing runs on CPU (torchvision resizes uint8 frames with torch's native antialiased bicubic there).
Real Qwen3-VL-8B preprocessor settings: video budget 4096..25165824 px over t*h*w, image 65536..16777216 px.
"""

import argparse
from pathlib import Path

import numpy as np
import torch
import torchvision
import transformers
from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "qwen3_vl_video_golden.npz"
VIDEO_CASES = {  # name: (frames, height, width, fps)
    "four_frames_64": (4, 64, 64, 2.0),  # no resize: AURA's realtime shape in miniature
    "odd_frames_downscale": (5, 45, 70, 2.0),  # odd count (last frame repeated), both axes shrink to 32x64
    "tiny_upscale": (3, 20, 30, 1.0),  # smaller than one 32-px block: scaled up first
    "wide_clip": (6, 40, 100, 30.0),  # source-rate frame indices -> fractional timestamps
}
IMAGE_CASES = {"photo_70x90": (70, 90)}


def frames(n: int, height: int, width: int, seed: int) -> np.ndarray:
    """Gradients, a white square moving on a dark one (edges make bicubic overshoot and clamp), mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    out = np.empty((n, height, width, 3), dtype=np.uint8)
    for i in range(n):
        img = np.stack([x * 200 / width, y * 200 / height, (x + y + 10 * i) % 256], -1)
        img[height // 4: height // 2, width // 5: width // 2] = 10
        img[height // 3: height // 2, width // 4 + i: width // 3 + i] = 255
        out[i] = np.clip(img + rng.integers(-2, 3, img.shape), 0, 255).astype(np.uint8)
    return out


def codes(pixel_values: torch.Tensor) -> np.ndarray:
    """Lossless uint8 form of normalised pixels; refuses anything that is not exactly a code."""
    u = ((pixel_values.double() * 0.5 + 0.5) * 255).round()
    assert torch.allclose((u / 255 - 0.5) / 0.5, pixel_values.double(), atol=1e-6), "not (u/255-0.5)/0.5 codes"
    return u.to(torch.uint8).numpy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    common = dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    vp = Qwen3VLVideoProcessor(size={"shortest_edge": 4096, "longest_edge": 25165824}, fps=2, min_frames=4,
                               max_frames=768, **common)
    ip = Qwen2VLImageProcessor(size={"shortest_edge": 65536, "longest_edge": 16777216}, **common)
    data = {"transformers_version": np.array(transformers.__version__),
            "torchvision_version": np.array(torchvision.__version__), "torch_version": np.array(torch.__version__)}
    for i, (name, (n, h, w, fps)) in enumerate(VIDEO_CASES.items()):
        clip = frames(n, h, w, seed=i)
        meta = {"fps": fps, "total_num_frames": n, "frames_indices": list(range(n)), "duration": n / fps}
        out = vp(videos=[clip], video_metadata=[meta], do_sample_frames=False, cap_pixels_per_frame=False,
                 return_metadata=True, return_tensors="pt", device="cpu")
        md = out["video_metadata"][0]
        # the processor's own timestamp rule (an instance method that does not use the instance)
        stamps = Qwen3VLProcessor._calculate_timestamps(None, list(md.frames_indices), md.fps, 2)
        data.update({f"{name}_frames": clip, f"{name}_fps": np.array(fps),
                     f"{name}_pixel_codes": codes(out["pixel_values_videos"]),
                     f"{name}_grid_thw": out["video_grid_thw"][0].numpy(),
                     f"{name}_timestamps": np.array(stamps)})
    for i, (name, (h, w)) in enumerate(IMAGE_CASES.items()):
        image = frames(1, h, w, seed=100 + i)[0]
        out = ip(images=[image], return_tensors="pt", device="cpu")
        data.update({f"image_{name}_rgb": image, f"image_{name}_pixel_codes": codes(out["pixel_values"]),
                     f"image_{name}_grid_thw": out["image_grid_thw"][0].numpy()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **data)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes) with transformers {transformers.__version__}, "
          f"torchvision {torchvision.__version__}")


if __name__ == "__main__":
    main()
