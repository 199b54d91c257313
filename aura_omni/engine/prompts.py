"""Stage prompts -> engine requests: what the AURA (Qwen3-VL) wrapper builds, as a `MultimodalPrompt`.

AURA runs under `CausalLMAdapter` (engine/model_api.py); only its prompts need translating. Content hashes
let the prefix cache reuse blocks across requests that show the same image or video (and never across
different ones); an item's hash is attached at the offset of its first placeholder. (ASR prompts carry no
hash: each clip is new audio, so `AsrService.engine_prompts` builds them directly.)
"""

import hashlib

import torch

from aura_omni.engine.sequence import MultimodalPrompt


def content_hash(*tensors: torch.Tensor) -> str:
    """Digest of the exact values (dtype and shape included) of the tensors that define one media item."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().contiguous().cpu()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.view(torch.uint8).numpy())  # the buffer itself: no copy of megabytes of pixels
    return h.hexdigest()


def vision_key(item) -> str:
    """content_hash of an image/video's preprocessed pixels and grid, computed once per item (the prefix cache
    and the vision-embedding cache both key on it)."""
    if item.content_key is None:
        item.content_key = content_hash(item.pixel_values, torch.tensor(item.grid_thw))
    return item.content_key


def placeholder_runs(token_ids: list[int], placeholder_ids: set[int], sizes: list[int]) -> list[int]:
    """Offset of the first placeholder of each media item, item k owning the next `sizes[k]` placeholder tokens.

    Placeholders are counted, not spanned: a video's temporal groups are separated by timestamp and
    vision start/end tokens, so its placeholders are not one contiguous run.
    """
    starts, left = [], 0
    for i, t in enumerate(token_ids):
        if t not in placeholder_ids:
            continue
        if left == 0:
            if len(starts) == len(sizes):
                raise ValueError(f"prompt has more placeholder tokens than its {len(sizes)} media items need")
            starts.append(i)
            left = sizes[len(starts) - 1]
        left -= 1
    if len(starts) != len(sizes) or left:
        raise ValueError(f"prompt has placeholders for {len(starts)} media items, {len(sizes)} given")
    return starts


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
