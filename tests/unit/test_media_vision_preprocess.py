"""Qwen3-VL preprocessing pieces: smart_resize budgets, patch order, frame sampling, timestamps, limits."""

import dataclasses
import pickle

import numpy as np
import pytest
import torch

from aura_omni.media.limits import MediaError
from aura_omni.media.vision_preprocess import (VisionPreprocessConfig, group_timestamps, normalize, patchify,
                                               preprocess_image, preprocess_video, resize_bicubic, sample_frame_indices,
                                               smart_resize_image, smart_resize_video)


def test_smart_resize_keeps_sides_multiple_of_32_inside_the_budget():
    assert smart_resize_image(480, 640) == (480, 640)
    h, w = smart_resize_image(10000, 8000)  # over 4096*4096: scaled down
    assert h % 32 == 0 and w % 32 == 0 and h * w <= 16777216
    h, w = smart_resize_image(20, 30)  # under 256*256: scaled up
    assert h * w >= 65536
    assert smart_resize_video(2, 480, 640) == (480, 640)  # AURA's 640x480 camera at 2 fps: 300 tokens/s


def test_extreme_aspect_ratio_is_a_media_error():
    with pytest.raises(MediaError, match="aspect ratio"):
        smart_resize_image(10, 3000)


def test_patch_order_groups_each_2x2_merge_block():
    frames = torch.arange(2 * 3 * 64 * 64, dtype=torch.float32).reshape(2, 3, 64, 64)
    patches, grid = patchify(frames)
    assert grid == (1, 4, 4) and patches.shape == (16, 3 * 2 * 16 * 16)
    first = patches[0].view(3, 2, 16, 16)
    assert torch.equal(first, frames[:, :, :16, :16].transpose(0, 1))  # (C, T, P, P) of the top-left patch
    assert torch.equal(patches[1].view(3, 2, 16, 16)[:, 0], frames[0, :, :16, 16:32])  # right neighbour
    assert torch.equal(patches[2].view(3, 2, 16, 16)[:, 0], frames[0, :, 16:32, :16])  # then the row below


def test_frame_sampling_is_two_per_second_clamped():
    assert sample_frame_indices(300, 30.0) == np.linspace(0, 299, 20).round().astype(int).tolist()
    assert len(sample_frame_indices(3, 30.0)) == 3  # never more than the video has
    assert len(sample_frame_indices(10, 30.0)) == 4  # min 4
    assert len(sample_frame_indices(100000, 30.0)) == 768  # max 768
    with pytest.raises(MediaError):
        sample_frame_indices(0, 30.0)


def test_group_timestamps_average_each_pair():
    assert group_timestamps([0, 1, 2, 3], 2.0) == [0.25, 1.25]
    assert group_timestamps([0, 15, 30], 30.0) == [0.25, 1.0]


def test_resize_methods_agree_closely_and_keep_dtype():
    x = torch.randint(0, 256, (1, 3, 40, 50), dtype=torch.uint8)
    a, b = resize_bicubic(x, 64, 96, "torch"), resize_bicubic(x, 64, 96, "pil")
    assert a.dtype == b.dtype == torch.uint8 and a.shape == (1, 3, 64, 96)
    assert (a.int() - b.int()).abs().max() <= 2
    with pytest.raises(ValueError):
        resize_bicubic(x, 8, 8, "lanczos")


def test_preprocess_outputs_and_errors():
    img = preprocess_image(np.zeros((256, 256, 3), np.uint8))
    assert img.grid_thw == (1, 16, 16) and img.num_tokens == 64 and float(img.pixel_values.min()) == -1.0
    one = preprocess_video(np.zeros((1, 64, 64, 3), np.uint8), video_fps=2.0)
    assert one.grid_thw == (1, 4, 4) and one.timestamps == [0.0]
    with pytest.raises(MediaError):
        preprocess_video(np.zeros((0, 64, 64, 3), np.uint8), video_fps=2.0)
    with pytest.raises(MediaError):
        preprocess_image(np.zeros((64, 64, 3), np.float32))
    with pytest.raises(MediaError, match="over the limit"):
        preprocess_video(np.zeros((5, 32, 32, 3), np.uint8), 2.0, cfg=VisionPreprocessConfig(4096, 25165824, max_frames=4))


def test_config_reads_real_preprocessor_files():
    cfg = VisionPreprocessConfig.from_hf({"size": {"shortest_edge": 4096, "longest_edge": 25165824}, "fps": 2,
                                          "min_frames": 4, "max_frames": 768}, video=True)
    assert (cfg.min_pixels, cfg.max_pixels, cfg.fps, cfg.max_frames) == (4096, 25165824, 2.0, 768)


def test_content_key_changes_with_any_pixel_and_with_the_normalisation():
    frames = np.random.RandomState(0).randint(0, 256, (2, 50, 70, 3), dtype=np.uint8)  # resized to 64x64
    video = preprocess_video(frames, video_fps=2.0)
    again = preprocess_video(frames.copy(), video_fps=2.0)
    assert video.content_key == again.content_key and torch.equal(video.pixel_values, again.pixel_values)
    changed = frames.copy()
    changed[1, 20, 30, 2] ^= 1
    assert preprocess_video(changed, video_fps=2.0).content_key != video.content_key
    other = dataclasses.replace(VisionPreprocessConfig.video_default(), mean=(0.4, 0.5, 0.5))
    assert preprocess_video(frames, video_fps=2.0, cfg=other).content_key != video.content_key
    image = preprocess_image(frames[0])
    assert image.content_key == preprocess_image(frames[0].copy()).content_key != video.content_key


def test_patches_made_on_demand_equal_normalising_and_flattening_the_frames():
    """Items keep uint8 frames and make patches where they are needed: the grid is known up front and the patches
    are steps 3-5 of the reference, for an image (two identical frames) and an odd-length video."""
    rng = np.random.RandomState(3)
    image = preprocess_image(rng.randint(0, 256, (70, 90, 3), dtype=np.uint8))
    video = preprocess_video(rng.randint(0, 256, (5, 64, 96, 3), dtype=np.uint8), video_fps=2.0)
    for item, repeat in ((image, 2), (video, 1)):
        cfg = item.preprocess
        x = normalize(item.frames, cfg.mean, cfg.std)
        want, grid = patchify(x.expand(repeat, -1, -1, -1) if repeat > 1 else x, cfg.patch_size, cfg.merge_size,
                              cfg.temporal_patch_size)
        assert item.grid_thw == grid and item.frames.dtype == torch.uint8
        assert torch.equal(item.patches(torch.device("cpu")), want) and torch.equal(item.pixel_values, want)
    assert video.grid_thw[0] == 3  # 5 frames: the last one repeated into a third temporal group


def test_a_vision_input_crosses_a_pickle_with_its_tensors_intact():
    """A stage in a process of its own gets the turn's frames pickled: as numpy arrays (torch's own pickling took ~5
    ms each way for two camera frames), tensors again on arrival."""
    item = preprocess_image(np.random.RandomState(0).randint(0, 256, (48, 64, 3), dtype=np.uint8))
    item.pixel_values  # the patches too, as a host that computed them has them
    back = pickle.loads(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
    assert isinstance(back.frames, torch.Tensor) and torch.equal(back.frames, item.frames)
    assert isinstance(back.pixel_values, torch.Tensor) and torch.equal(back.pixel_values, item.pixel_values)
    assert (back.kind, back.grid_thw, back.content_key) == (item.kind, item.grid_thw, item.content_key)
