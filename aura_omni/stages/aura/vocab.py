"""AURA's token ids and texts (values from the Qwen vocabulary and vLLM-Omni's aura_omni; the model's own in
models/qwen3_vl.py)."""

from aura_omni.models.qwen3_vl import AURA_STOP_TOKEN_IDS  # noqa: F401 - <|silent|> and <|im_end|>
from aura_omni.models.qwen3_vl import IM_END_TOKEN_ID as QWEN_IM_END_ID  # noqa: F401
from aura_omni.models.qwen3_vl import SILENT_TOKEN_ID as AURA_SILENT_TOKEN_ID  # noqa: F401

SILENT_TEXT = "<|silent|>"
QWEN_IM_START_ID = 151644
QWEN_ASSISTANT_ID = 77091
QWEN_NEWLINE_ID = 198
