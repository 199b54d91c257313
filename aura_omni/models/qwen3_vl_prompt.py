"""AURA prompts in Qwen3-VL ChatML, with each image/video placeholder expanded to its vision tokens.

Layout (what vllm-omni's asr2aura and the Qwen3-VL chat template produce):
  <|im_start|>system\n{system}<|im_end|>\n
  {history turns, same form}
  <|im_start|>user\n{vision items}{text}<|im_end|>\n<|im_start|>assistant\n
An image expands to <|vision_start|><|image_pad|>*n<|vision_end|>; a video to one
`<{t:.1f} seconds><|vision_start|><|video_pad|>*n<|vision_end|>` per temporal group (the
transformers 4.57 Qwen3VLProcessor expansion that AURA was served with).
"""

from dataclasses import dataclass, field

from aura_omni.media.vision_preprocess import VisionInput

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"
IMAGE_PAD, VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"
SILENT = "<|silent|>"  # AURA's "no reply" token, id 151669
# AURA demo / vllm-omni system prompt (aura_omni_pipeline.md); deployments may append a language line.
AURA_SYSTEM_PROMPT = (
    "You are receiving a live video stream where the final frame is the present moment. "
    "Respond only when a response is needed based on the user's message or the visual context. "
    "Otherwise, output '<|silent|>' to signify silence."
)


@dataclass
class ChatTurn:
    role: str  # "system" | "user" | "assistant"
    text: str = ""
    media: list[VisionInput] = field(default_factory=list)  # rendered before the text, in order


def render_vision(item: VisionInput, compact: bool = False) -> str:
    """The item's prompt text; `compact`: one pad token per image / temporal group (see `pad_runs`)."""
    if item.kind == "image":
        return VISION_START + IMAGE_PAD * (1 if compact else item.num_tokens) + VISION_END
    if item.kind == "video":
        if len(item.timestamps) != item.grid_thw[0]:
            raise ValueError(f"video has {item.grid_thw[0]} temporal groups but {len(item.timestamps)} timestamps")
        per = 1 if compact else item.tokens_per_group
        return "".join(f"<{t:.1f} seconds>" + VISION_START + VIDEO_PAD * per + VISION_END for t in item.timestamps)
    raise ValueError(f"unknown vision input kind {item.kind!r}")


def pad_runs(items: list[VisionInput]) -> list[int]:
    """Pad tokens of each image / temporal group in prompt order: what each compact pad expands to."""
    return [n for v in items for n in ([v.num_tokens] if v.kind == "image" else [v.tokens_per_group] * v.grid_thw[0])]


def render_turn(turn: ChatTurn) -> str:
    if turn.role not in ("system", "user", "assistant"):
        raise ValueError(f"unknown chat role {turn.role!r}")
    body = "".join(render_vision(m) for m in turn.media) + turn.text
    return f"{IM_START}{turn.role}\n{body}{IM_END}\n"


def build_chat_prompt(turns: list[ChatTurn], add_generation_prompt: bool = True) -> tuple[str, list[VisionInput]]:
    """Prompt text with expanded vision placeholders, and the vision inputs in the order they appear."""
    text = "".join(render_turn(t) for t in turns)
    if add_generation_prompt:
        text += f"{IM_START}assistant\n"
    return text, [m for t in turns for m in t.media]


def build_aura_prompt(user_text: str = "", media: list[VisionInput] | None = None, *,
                      system: str | None = AURA_SYSTEM_PROMPT,
                      history: list[ChatTurn] | None = None) -> tuple[str, list[VisionInput]]:
    """System, history, then one user turn of (vision items, text), then an open assistant turn."""
    turns = [ChatTurn("system", system)] if system is not None else []
    turns += list(history or [])
    turns.append(ChatTurn("user", user_text, list(media or [])))
    return build_chat_prompt(turns)
