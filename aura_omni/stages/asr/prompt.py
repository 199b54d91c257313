"""Qwen3-ASR prompt ids, rendered like the released chat template (system context + one audio turn):

<|im_start|>system\n{context}<|im_end|>\n<|im_start|>user\n<|audio_start|><|audio_pad|>×N<|audio_end|><|im_end|>\n<|im_start|>assistant\n

A forced language appends `language {Name}<asr_text>`, so the model writes only the transcript.
The text around the pads is tokenized in two pieces; both cut at special tokens, which the tokenizer
splits on anyway, so the ids equal tokenizing the whole string.
"""

AUDIO_PAD = "<|audio_pad|>"
ASR_TEXT = "<asr_text>"
ASR_TEXT_ID = 151704  # <asr_text>: separates "language X" from the transcript


class AsrPromptBuilder:
    def __init__(self, tokenizer, audio_token_id: int = 151676):
        self.tokenizer = tokenizer
        self.audio_token_id = audio_token_id
        if tokenizer.convert_tokens_to_ids(AUDIO_PAD) != audio_token_id:
            raise ValueError(f"tokenizer maps {AUDIO_PAD} to {tokenizer.convert_tokens_to_ids(AUDIO_PAD)}, config says {audio_token_id}")

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def build(self, num_audio_tokens: int, context: str = "", language: str | None = None) -> list[int]:
        head = f"<|im_start|>system\n{context or ''}<|im_end|>\n<|im_start|>user\n<|audio_start|>"
        tail = "<|audio_end|><|im_end|>\n<|im_start|>assistant\n"
        if language:
            tail += f"language {language}{ASR_TEXT}"
        return self._encode(head) + [self.audio_token_id] * num_audio_tokens + self._encode(tail)
