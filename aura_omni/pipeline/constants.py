"""Token ids and texts shared by the pipeline's stage edges (values from the Qwen vocabularies and vLLM-Omni's aura_omni).
AURA's own ids live with its stage (stages/aura/vocab.py); the edges use them from here too."""

from aura_omni.stages.aura.vocab import (AURA_SILENT_TOKEN_ID, AURA_STOP_TOKEN_IDS, QWEN_ASSISTANT_ID,  # noqa: F401
                                         QWEN_IM_END_ID, QWEN_IM_START_ID, QWEN_NEWLINE_ID, SILENT_TEXT)

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
