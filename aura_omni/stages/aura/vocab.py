"""AURA's token ids and texts (values from the Qwen vocabulary and vLLM-Omni's aura_omni)."""

SILENT_TEXT = "<|silent|>"
AURA_SILENT_TOKEN_ID = 151669  # <|silent|> in AURA's tokenizer (151669 is <|audio_start|> in Qwen3-ASR's)
QWEN_IM_START_ID = 151644
QWEN_IM_END_ID = 151645
QWEN_ASSISTANT_ID = 77091
QWEN_NEWLINE_ID = 198
AURA_STOP_TOKEN_IDS = (AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID)
