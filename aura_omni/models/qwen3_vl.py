"""AURA stage model = Qwen3-VL: vision encoder + the shared Qwen3 backbone with interleaved MRoPE and DeepStack.

What the engine drives (docs/architecture.md):
  - `build_prompt(token_ids, vision_inputs) -> VLPrompt`: inputs_embeds [L, H] with visual embeddings
    scattered into the <|image_pad|>/<|video_pad|> slots, MRoPE positions [3, L], DeepStack features
    for those slots, and the decode `rope_delta`.
  - `decode_positions(seq_lens, rope_deltas)` -> [3, B] for the next token of each sequence.
  - `embed_tokens(ids)`, `backbone(...)`, `compute_logits(hidden)`.
Checkpoint keys: `model.visual.*`, `model.language_model.{embed_tokens,layers,norm}.*`, `lm_head.weight`.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from aura_omni.layers.attention import AttentionMetadata
from aura_omni.layers.device import upload_async
from aura_omni.layers.rotary import RotaryEmbedding
from aura_omni.media.vision_preprocess import VisionInput
from aura_omni.models.loader import dummy_config_dir, init_dummy, iter_tensors, load_into, read_json, resolve_checkpoint
from aura_omni.models.qwen3 import DeepStack, Qwen3Config, Qwen3Model
from aura_omni.models.qwen3_vl_vision import Qwen3VLVisionConfig, Qwen3VLVisionEncoder

SILENT_TOKEN_ID = 151669  # AURA <|silent|>
IM_END_TOKEN_ID = 151645  # <|im_end|>
AURA_STOP_TOKEN_IDS = (SILENT_TOKEN_ID, IM_END_TOKEN_ID)  # vllm-omni stage-1 stop ids; both stay visible


@dataclass
class Qwen3VLConfig:
    text: Qwen3Config
    vision: Qwen3VLVisionConfig
    vocab_size: int = 151936
    tie_word_embeddings: bool = False
    image_token_id: int = 151655  # <|image_pad|>
    video_token_id: int = 151656  # <|video_pad|>
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653

    @classmethod
    def from_hf(cls, cfg: dict) -> "Qwen3VLConfig":
        if cfg.get("model_type") != "qwen3_vl" or "text_config" not in cfg or "vision_config" not in cfg:
            raise ValueError("not a Qwen3-VL config (needs model_type 'qwen3_vl' with text_config and vision_config)")
        text = cfg["text_config"]
        tc = Qwen3Config.from_hf(text)
        if tc.mrope_section is None:
            tc.mrope_section = [24, 20, 20]  # transformers' Qwen3-VL default when rope_scaling omits it
        return cls(
            text=tc,
            vision=Qwen3VLVisionConfig.from_hf(cfg["vision_config"]),
            vocab_size=text.get("vocab_size", 151936),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            image_token_id=cfg.get("image_token_id", 151655),
            video_token_id=cfg.get("video_token_id", 151656),
            vision_start_token_id=cfg.get("vision_start_token_id", 151652),
            vision_end_token_id=cfg.get("vision_end_token_id", 151653),
        )


@dataclass
class VLPrompt:
    """A prefill-ready prompt. DeepStack positions index into this prompt (0..L-1)."""

    token_ids: list[int]
    inputs_embeds: torch.Tensor  # [L, H] on the model's device
    positions: torch.Tensor  # [3, L] long, on the host (the engine uploads a step's share without waiting)
    rope_delta: int  # decode position of sequence index n is n + rope_delta on all three axes
    deepstack: DeepStack | None = None  # its positions on the host, its features on the device
    num_vision_tokens: int = 0

    def __len__(self) -> int:
        return len(self.token_ids)


def mrope_positions(token_ids, vision_inputs: list[VisionInput], image_token_id: int = 151655,
                    video_token_id: int = 151656) -> tuple[torch.Tensor, int]:
    """[3, L] (t, h, w) positions and the decode rope delta, by Qwen3-VL's get_rope_index rules.

    Text advances all three by 1. A vision group (an image, or one temporal group of a video) starting at
    s puts token (row, col) of its merged grid at (s, s + row, s + col); the next token starts at
    s + max(rows, cols). Videos are one group per temporal pair; their time lives in the text timestamps.
    Computed for all tokens at once in numpy: a long session's prompt is recomputed every turn.
    """
    groups = []  # (pad token id, rows, cols) in prompt order
    for vi in vision_inputs:
        t, h, w = vi.grid_thw
        rows, cols = h // vi.merge_size, w // vi.merge_size
        if vi.kind == "image":
            if t != 1:
                raise ValueError(f"an image has one temporal group, got grid {vi.grid_thw}")
            groups.append((image_token_id, rows, cols))
        else:
            groups.extend([(video_token_id, rows, cols)] * t)
    ids = np.asarray(token_ids, dtype=np.int64)
    pad, rows, cols = np.array(groups, dtype=np.int64).reshape(-1, 3).T
    sizes = rows * cols
    slots = np.flatnonzero((ids == image_token_id) | (ids == video_token_id))
    if len(slots) > sizes.sum():
        raise ValueError("the prompt has more vision placeholder tokens than the vision inputs provide")
    if len(slots) < sizes.sum():
        raise ValueError(f"the prompt has placeholders for {int((np.cumsum(sizes) <= len(slots)).sum())} vision "
                         f"groups but the inputs provide {len(groups)}")
    firsts = np.cumsum(sizes) - sizes  # each group's first slot, counted among the slots
    starts_group = np.zeros(len(slots), dtype=bool)
    starts_group[firsts] = True
    bad = ids[slots] != np.repeat(pad, sizes)  # a group on pads of the other kind
    bad[1:] |= (np.diff(slots) != 1) & ~starts_group[1:]  # or split by other tokens
    if bad.any():
        g = int(np.searchsorted(firsts, np.argmax(bad), side="right")) - 1
        raise ValueError(f"vision placeholder run at token {int(slots[firsts[g]])} does not match vision input {g} "
                         f"({'image' if pad[g] == image_token_id else 'video'} group of {int(sizes[g])} tokens)")
    step = np.ones(len(ids), dtype=np.int64)  # how far each token moves the next start
    step[slots] = 0
    step[slots[firsts + sizes - 1]] = np.maximum(rows, cols)
    start = np.cumsum(step) - step  # a text token's position; a group's start for each of its tokens
    within = np.arange(len(slots)) - np.repeat(firsts, sizes)  # index inside its group, row-major
    width = np.repeat(cols, sizes)
    pos = np.stack([start, start, start])
    pos[1, slots] += within // width
    pos[2, slots] += within % width
    delta = int(pos.max()) + 1 - len(ids) if len(ids) else 0
    return torch.from_numpy(pos), delta


class Qwen3VLForCausalLM(nn.Module):
    def __init__(self, cfg: Qwen3VLConfig):
        super().__init__()
        self.config = cfg
        self.visual = Qwen3VLVisionEncoder(cfg.vision)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.text.hidden_size)
        self.backbone = Qwen3Model(cfg.text)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.text.hidden_size, cfg.vocab_size, bias=False)
        self.vision_graphs = None  # models/vision_graphs.py VisionGraphs, set by the stage on CUDA

    # ---- loading -------------------------------------------------------------------------------
    @staticmethod
    def _rename(name: str) -> str | None:
        if name.startswith("model.visual."):
            return "visual." + name[len("model.visual."):]
        if name.startswith("model.language_model.embed_tokens."):
            return "embed." + name[len("model.language_model.embed_tokens."):]
        if name.startswith("model.language_model."):
            return "backbone." + name[len("model.language_model."):]
        if name.startswith("lm_head."):
            return name
        return None

    def load_checkpoint(self, ckpt: Path) -> None:
        renamed = ((new, t) for name, t in iter_tensors(ckpt) if (new := self._rename(name)) is not None)
        if self.lm_head is None:
            renamed = ((n, t) for n, t in renamed if not n.startswith("lm_head."))
        load_into(self, renamed, where=f"Qwen3-VL checkpoint {ckpt}")

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu", load_format: str = "auto") -> "Qwen3VLForCausalLM":
        """`load_format="dummy"`: random weights on the architecture of `model`'s config (a local dir, or the
        shipped preset of a repo id such as aurateam/AURA)."""
        ckpt = resolve_checkpoint(model) if load_format != "dummy" else dummy_config_dir(model)
        cfg = Qwen3VLConfig.from_hf(read_json(ckpt / "config.json"))
        with torch.device("meta"):  # no full-size fp32 allocation before the real weights arrive
            net = cls(cfg)
        net = net.to_empty(device=device).to(dtype)
        net._reset_rotary_buffers()
        if load_format == "dummy":
            init_dummy(net)
        else:
            net.load_checkpoint(ckpt)
        return net.eval()

    def _reset_rotary_buffers(self) -> None:
        """Recompute the non-persistent rotary tables (left uninitialised by meta-device construction)."""
        device = self.embed.weight.device
        v = self.config.vision
        spatial = v.hidden_size // v.num_heads // 2
        self.visual.rotary_inv_freq = 1.0 / (v.rope_theta ** (torch.arange(0, spatial, 2, dtype=torch.float, device=device) / spatial))
        t = self.config.text
        self.backbone.rotary = RotaryEmbedding(t.head_dim, t.rope_theta, t.mrope_section).to(device)

    # ---- pieces the engine drives ----------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids.to(self.device))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.backbone.logits(hidden, self.embed.weight if self.lm_head is None else self.lm_head.weight)

    def encode_vision(self, vision_inputs: list[VisionInput]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """All items in one encoder pass -> (embeds [sum tokens, H], DeepStack features) in input order."""
        # each item's patches are made on the model's device from its uint8 frames
        pixels = [v.patches(self.device) for v in vision_inputs]
        pixels = pixels[0] if len(pixels) == 1 else torch.cat(pixels)
        return (self.vision_graphs or self.visual)(pixels, [v.grid_thw for v in vision_inputs])

    def build_prompt(self, token_ids: list[int], vision_inputs: list[VisionInput] | None = None,
                     vision_embeds: tuple[torch.Tensor, list[torch.Tensor]] | None = None) -> VLPrompt:
        """`vision_embeds`: `encode_vision(vision_inputs)` computed earlier (e.g. cached per media item)."""
        cfg = self.config
        vision_inputs = list(vision_inputs or [])
        ids = np.asarray(token_ids, dtype=np.int64)  # one conversion of a long session's ids, not one per use
        positions, delta = mrope_positions(ids, vision_inputs, cfg.image_token_id, cfg.video_token_id)
        embeds = self.embed(upload_async(torch.from_numpy(ids), self.device))
        token_ids = ids.tolist()
        if not vision_inputs:
            return VLPrompt(token_ids, embeds, positions, delta)
        slots = torch.from_numpy(np.flatnonzero(np.isin(ids, (cfg.image_token_id, cfg.video_token_id))))
        visual, deepstack = vision_embeds if vision_embeds is not None else self.encode_vision(vision_inputs)
        if visual.shape[0] != slots.numel():  # mrope_positions already matched groups; this guards the count
            raise ValueError(f"{slots.numel()} vision placeholder tokens but {visual.shape[0]} visual embeddings")
        embeds = embeds.index_copy(0, upload_async(slots, self.device), visual.to(embeds.dtype))
        return VLPrompt(token_ids, embeds, positions, delta, DeepStack(slots, deepstack), int(slots.numel()))

    def forward(self, inputs_embeds: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                deepstack: DeepStack | None = None) -> torch.Tensor:
        return self.backbone(inputs_embeds, positions, meta, deepstack)
