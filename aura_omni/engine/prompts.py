"""Stage prompts -> engine requests: what the AURA (Qwen3-VL) wrapper builds, as a `MultimodalPrompt`.

AURA runs under `CausalLMAdapter` (engine/model_api.py); only its prompts need translating. Content hashes
let the prefix cache reuse blocks across requests that show the same image or video (and never across
different ones); an item's hash is attached at the offset of its first placeholder. (ASR prompts carry no
hash: each clip is new audio, so `AsrService.engine_prompts` builds them directly.)
"""

import numpy as np
import torch

from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.media.vision_preprocess import content_hash


def vision_key(item) -> str:
    """An image/video's content key (the prefix cache and the vision-embedding cache both key on it): set by
    preprocessing (`pixels_key`), else the content_hash of its pixels and grid, computed once per item."""
    if item.content_key is None:
        item.content_key = content_hash(item.pixel_values, torch.tensor(item.grid_thw))
    return item.content_key


def placeholder_runs(token_ids, placeholder_ids: set[int], sizes: list[int]) -> list[int]:
    """Offset of the first placeholder of each media item, item k owning the next `sizes[k]` placeholder tokens.

    Placeholders are counted, not spanned: a video's temporal groups are separated by timestamp and
    vision start/end tokens, so its placeholders are not one contiguous run.
    """
    where = np.flatnonzero(np.isin(np.asarray(token_ids, dtype=np.int64), list(placeholder_ids)))
    firsts = np.cumsum([0, *sizes], dtype=np.int64)[:-1]  # each item's first placeholder, counted among all
    if len(where) > sum(sizes):
        raise ValueError(f"prompt has more placeholder tokens than its {len(sizes)} media items need")
    if len(where) < sum(sizes):
        started = int((firsts < len(where)).sum())
        raise ValueError(f"prompt has placeholders for {started} media items, {len(sizes)} given")
    return where[firsts].tolist()


def vl_request(prompt, vision_inputs: list | None = None, image_token_id: int = 151655,
               video_token_id: int = 151656) -> tuple[list[int], MultimodalPrompt]:
    """A `VLPrompt` (models/qwen3_vl.py `build_prompt`) -> (token ids, MultimodalPrompt) for `add_request`.

    Pass the same `vision_inputs` to make the prompt prefix-cacheable; without them an image prompt is
    computed every time (text-only prompts are always cacheable).
    """
    hashes: list[tuple[int, str]] | None = []
    if prompt.num_vision_tokens:
        if vision_inputs is None:
            hashes = None
        else:
            starts = placeholder_runs(prompt.token_ids, {image_token_id, video_token_id},
                                      [v.num_tokens for v in vision_inputs])
            hashes = [(s, vision_key(v)) for s, v in zip(starts, vision_inputs)]
    ds = prompt.deepstack
    mm = MultimodalPrompt(
        embeds=prompt.inputs_embeds, positions=prompt.positions, rope_delta=prompt.rope_delta,
        deepstack_positions=ds.positions if ds is not None else None,
        deepstack_features=ds.features if ds is not None else None, content_hashes=hashes)
    return list(prompt.token_ids), mm
