"""MRoPE position ids and prompt plumbing of the AURA (Qwen3-VL) wrapper, without model weights."""

import pytest
import torch

from aura_omni.media.vision_preprocess import VisionInput
from aura_omni.models.qwen3 import DeepStack
from aura_omni.models.qwen3_vl import VLPrompt, concat_prompts, decode_positions, mrope_positions

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


def test_decode_positions_add_the_rope_delta():
    assert decode_positions([10, 4], [-3, 0]).tolist() == [[7, 4]] * 3


def _prompt(n: int, vis: list[int], width: int = 2) -> VLPrompt:
    ds = DeepStack(torch.tensor(vis), [torch.full((len(vis), width), float(k)) for k in range(2)]) if vis else None
    return VLPrompt(list(range(n)), torch.randn(n, width), torch.arange(n).expand(3, n), -1, ds, len(vis))


def test_concat_prompts_offsets_deepstack_indices():
    embeds, positions, ds = concat_prompts([_prompt(3, [1]), _prompt(2, []), _prompt(4, [0, 2])])
    assert embeds.shape == (9, 2) and positions.shape == (3, 9)
    assert ds.positions.tolist() == [1, 5, 7] and len(ds.features) == 2


def test_slice_keeps_deepstack_rows_inside_the_range():
    part = _prompt(6, [1, 2, 4]).slice(2, 5)
    assert len(part) == 3 and part.deepstack.positions.tolist() == [0, 2]
    assert part.positions[0].tolist() == [2, 3, 4] and part.rope_delta == -1
    assert _prompt(6, [1]).slice(2).deepstack is None
