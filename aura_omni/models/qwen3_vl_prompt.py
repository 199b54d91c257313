"""Qwen3-VL prompt markers, and how a video's temporal groups are announced in the prompt.

Layout of an AURA prompt (what vllm-omni's asr2aura and the Qwen3-VL chat template produce; the ids are built by
stages/aura/prompt_tokens.py):
  <|im_start|>system\n{system}<|im_end|>\n
  {history turns, same form}
  <|im_start|>user\n{vision items}{text}<|im_end|>\n<|im_start|>assistant\n
An image expands to <|vision_start|><|image_pad|>*n<|vision_end|>; a video to one
`<{t:.1f} seconds><|vision_start|><|video_pad|>*n<|vision_end|>` per temporal group (the
transformers 4.57 Qwen3VLProcessor expansion that AURA was served with).
"""

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"
IMAGE_PAD, VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"


def timestamp_text(seconds: float) -> str:
    """The text before a video temporal group's vision tokens (Qwen3VLProcessor.replace_video_token)."""
    return f"<{seconds:.1f} seconds>"
