"""AURA prompt ids: ChatML turns tokenised once and remembered, equal to tokenising the whole prompt."""

import numpy as np
import pytest

from aura_omni.media.vision_preprocess import preprocess_image, preprocess_video
from aura_omni.models.tokenizer import load_tokenizer
from aura_omni.pipeline.processors import asr2aura
from aura_omni.pipeline.prompt_tokens import ChatMLTokens, expand_vision_placeholders, prompt_token_ids
from aura_omni.models.qwen_vocab import write_qwen_tokenizer

PADS = (151655, 151656)  # image pad, video pad


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    out = tmp_path_factory.mktemp("aura_tokenizer")
    write_qwen_tokenizer(out, ["<|silent|>"])  # the tiny AURA checkpoint's tokenizer
    return load_tokenizer(out)


def session(turns: int) -> str:
    """Turn N+1 of a live session: every turn brought a video and words, and got its own reply."""
    said = [f"look  <here> {k}?" for k in range(turns + 1)]
    history = [t for k in range(turns) for t in (("user", said[k], ["video"]), ("assistant", f" ok {k}"))]
    return asr2aura("", vision_items=["video"], text_parts=[said[turns]], history=history, system_prompt="System <s>")


def whole(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", [
    "lead-in text<|im_start|>user\n a  <|im_start|><|im_start|>assistant\n  trailing ",  # before the first turn, empty turns
    "no turns at all  ",
    "",
])
def test_turn_by_turn_ids_equal_the_whole_text_tokenised(tokenizer, text):
    tokens = ChatMLTokens(tokenizer)
    assert tokens(text) == whole(tokenizer, text)
    assert tokens(text) == whole(tokenizer, text)  # the second time from the remembered turns


def test_a_session_turn_tokenises_only_its_new_turns(tokenizer):
    tokens = ChatMLTokens(tokenizer)
    encoded = []
    encode = tokens.encode
    tokens.encode = lambda text: encoded.append(text) or encode(text)
    for turns in range(4):
        encoded.clear()
        assert tokens(session(turns)) == whole(tokenizer, session(turns))
        if turns:
            assert len(encoded) == 2  # the previous turn's reply and this turn's user message
    assert len(tokens._turns) == 2 + 2 * 3 + 1  # system, opener, three exchanges, the last user message


def test_prompt_ids_of_a_session_equal_the_expanded_prompt_tokenised(tokenizer):
    rng = np.random.RandomState(0)
    videos = [preprocess_video(rng.randint(0, 256, (4, 64, 96, 3), dtype=np.uint8), video_fps=2.0) for _ in range(4)]
    tokens = ChatMLTokens(tokenizer)
    for turns in range(4):
        prompt = session(turns)
        got = prompt_token_ids(tokens, prompt, videos[:turns + 1], PADS)
        assert got == whole(tokenizer, expand_vision_placeholders(prompt, videos[:turns + 1]))
    image = preprocess_image(rng.randint(0, 256, (64, 64, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="fewer"):
        prompt_token_ids(tokens, session(0), videos[:1] + [image], PADS)
    with pytest.raises(ValueError, match="more vision placeholder"):
        prompt_token_ids(tokens, session(0) + "<|video_pad|>", videos[:1], PADS)


def test_a_tokenizer_without_the_chatml_special_token_tokenises_whole_texts():
    class Chars:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    tokens = ChatMLTokens(Chars())
    assert not tokens.by_turn and tokens("<|im_start|>user\nhi") == [ord(c) for c in "<|im_start|>user\nhi"]
