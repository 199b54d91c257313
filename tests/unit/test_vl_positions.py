"""MRoPE position ids of the AURA (Qwen3-VL) wrapper, without model weights."""

import pytest
import torch

from aura_omni.media.vision_preprocess import VisionInput
from aura_omni.models.qwen3_vl import mrope_positions

IMG, VID, TXT = 151655, 151656, 100


def vision(kind: str, t: int, h: int, w: int, stamps=None) -> VisionInput:
    return VisionInput(kind, torch.zeros(t * h * w, 1536), (t, h, w), list(stamps or []))


def test_text_only_positions_count_up_on_all_axes():
    pos, delta = mrope_positions([TXT] * 5, [])
    assert torch.equal(pos, torch.arange(5).expand(3, 5)) and delta == 0


def test_image_group_uses_its_merged_grid_and_next_text_starts_after_the_longer_side():
    ids = [TXT, TXT] + [IMG] * 6 + [TXT]  # grid 1x4x6 patches -> 2x3 merged tokens
    pos, delta = mrope_positions(ids, [vision("image", 1, 4, 6)])
    assert pos[:, :2].tolist() == [[0, 1]] * 3
    assert pos[0, 2:8].tolist() == [2] * 6
    assert pos[1, 2:8].tolist() == [2, 2, 2, 3, 3, 3]
    assert pos[2, 2:8].tolist() == [2, 3, 4, 2, 3, 4]
    assert pos[:, 8].tolist() == [5, 5, 5]  # 2 + max(2, 3)
    assert delta == 6 - len(ids)


def test_video_is_one_group_per_temporal_pair_with_text_between():
    ids = [TXT] + [VID] * 4 + [TXT, TXT] + [VID] * 4
    pos, delta = mrope_positions(ids, [vision("video", 2, 4, 4, [0.25, 1.25])])
    assert pos[:, 1:5].tolist() == [[1] * 4, [1, 1, 2, 2], [1, 2, 1, 2]]
    assert pos[:, 5:7].tolist() == [[3, 4]] * 3
    assert pos[0, 7:].tolist() == [5] * 4  # the second group restarts t at its own start
    assert delta == 7 - len(ids)


@pytest.mark.parametrize("ids,media", [
    ([TXT] + [IMG] * 4, []),  # placeholders without media
    ([TXT] + [IMG] * 3, [vision("image", 1, 4, 4)]),  # too few placeholders
    ([TXT] + [VID] * 4, [vision("image", 1, 4, 4)]),  # wrong kind
    ([TXT] * 3, [vision("image", 1, 4, 4)]),  # media without placeholders
])
def test_mismatched_placeholders_are_rejected(ids, media):
    with pytest.raises(ValueError):
        mrope_positions(ids, media)


def _walk(ids: list[int], media: list[VisionInput]) -> tuple[list[list[int]], int]:
    """get_rope_index's rules one token at a time: the straightforward form of mrope_positions."""
    groups = [(IMG if v.kind == "image" else VID, v.grid_thw[1] // 2, v.grid_thw[2] // 2)
              for v in media for _ in range(v.grid_thw[0])]
    pos, cur, i = [[], [], []], 0, 0
    while i < len(ids):
        if ids[i] not in (IMG, VID):
            for axis in pos:
                axis.append(cur)
            cur, i = cur + 1, i + 1
            continue
        pad, rows, cols = groups.pop(0)
        assert ids[i:i + rows * cols] == [pad] * (rows * cols)
        for r in range(rows):
            for c in range(cols):
                pos[0].append(cur), pos[1].append(cur + r), pos[2].append(cur + c)
        cur, i = cur + max(rows, cols), i + rows * cols
    return pos, max(max(axis) for axis in pos) + 1 - len(ids)


def test_session_positions_equal_a_token_by_token_walk():
    """A session prompt: videos of two groups with timestamps between, adjacent groups, images of both shapes."""
    tall, wide, clip = vision("image", 1, 6, 2), vision("image", 1, 2, 8), vision("video", 2, 4, 6, [0.25, 1.25])
    ids, media = [TXT] * 3, []
    for turn in range(5):
        ids += [TXT] * (turn + 2) + [VID] * 6 + [TXT] * 2 + [VID] * 6 + [TXT] * 3  # timestamps and markers between
        ids += [IMG] * 3 + [IMG] * 4 + [TXT]  # two images back to back: one run of pads, two groups
        media += [clip, tall, wide]
    pos, delta = mrope_positions(ids, media)
    want, want_delta = _walk(ids, media)
    assert pos.tolist() == want and delta == want_delta


@pytest.mark.parametrize("ids", [
    [TXT] + [VID] * 2 + [TXT] + [VID] * 2 + [TXT] * 2 + [VID] * 4,  # the first group split by a text token
    [TXT] + [VID] * 3 + [IMG] + [TXT] + [VID] * 4,  # the first group ends on an image pad
])
def test_a_group_must_be_one_run_of_its_own_pads(ids):
    with pytest.raises(ValueError, match="does not match vision input 0"):
        mrope_positions(ids, [vision("video", 2, 4, 4, [0.25, 1.25])])
