"""Stage prompts -> engine requests: what the AURA (Qwen3-VL) and ASR wrappers build, as `MultimodalPrompt`.

Both LMs run under `CausalLMAdapter` (engine/model_api.py); only their prompts need translating.
Content hashes let the prefix cache reuse blocks across requests that show the same image or audio
(and never across different ones); an item's hash is attached at the offset of its first placeholder.
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
    """Start offsets of consecutive media items of `sizes` tokens each inside the placeholder runs."""
    starts, i, k = [], 0, 0
    while k < len(sizes) and i < len(token_ids):
        if token_ids[i] in placeholder_ids:
            starts.append(i)
            i += sizes[k]
            k += 1
        else:
            i += 1
    if k != len(sizes):
        raise ValueError(f"prompt has placeholders for {k} media items, {len(sizes)} given")
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


def asr_request(token_ids: list[int], embeds: torch.Tensor, audio_features: list[torch.Tensor] | None = None,
                audio_token_id: int = 151676, audio_sizes: list[int] | None = None) -> tuple[list[int], MultimodalPrompt]:
    """ASR prompt ids + `Qwen3ASR.prompt_embeds` output -> (token ids, MultimodalPrompt) (1-D positions).

    With `audio_features` (the log-mel input of each clip) and `audio_sizes` (audio tokens per clip) the
    prompt is prefix-cacheable; otherwise it is not.
    """
    hashes = None
    if audio_features is not None and audio_sizes is not None:
        starts = placeholder_runs(token_ids, {audio_token_id}, audio_sizes)
        hashes = [(s, content_hash(f)) for s, f in zip(starts, audio_features)]
    return list(token_ids), MultimodalPrompt(embeds=embeds, content_hashes=hashes)
