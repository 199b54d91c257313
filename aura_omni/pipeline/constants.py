"""Token ids and texts shared by the pipeline's stage edges (values from the Qwen vocabularies and vLLM-Omni's aura_omni)."""

SILENT_TEXT = "<|silent|>"
AURA_SILENT_TOKEN_ID = 151669  # <|silent|> in AURA's tokenizer (151669 is <|audio_start|> in Qwen3-ASR's)
QWEN_IM_START_ID = 151644
QWEN_IM_END_ID = 151645
QWEN_ASSISTANT_ID = 77091
QWEN_NEWLINE_ID = 198
AURA_STOP_TOKEN_IDS = (AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID)

# Qwen3-TTS assistant template around the spoken text: <|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n
TTS_ASSISTANT_PREFIX_IDS = (QWEN_IM_START_ID, QWEN_ASSISTANT_ID, QWEN_NEWLINE_ID)
TTS_ASSISTANT_SUFFIX_IDS = (QWEN_IM_END_ID, QWEN_NEWLINE_ID, QWEN_IM_START_ID, QWEN_ASSISTANT_ID, QWEN_NEWLINE_ID)

CODEC_EOS_ID = 2150  # Qwen3-TTS talker codec stop id
TTS_SAMPLE_RATE = 24000
ASR_SAMPLE_RATE = 16000

DEFAULT_AURA_SYSTEM_PROMPT = (
    "You are receiving a live video stream where the final frame is the present moment. Respond only when a "
    "response is needed based on the user's message or the visual context. Otherwise, output '<|silent|>' to "
    "signify silence. Respond in Chinese."
)
DEFAULT_CUSTOM_VOICE_SPEAKER = "Vivian"
DEFAULT_TTS_LANGUAGE = "English"  # aura2tts default in vLLM-Omni's merged (G1) path
