"""AURA prompt ids built from prompt turns: equal to tokenising upstream's rendered ChatML (vision expanded), each
text span tokenised once per session."""

import numpy as np
import pytest

from aura_omni.media.vision_preprocess import preprocess_image, preprocess_video
from aura_omni.models.tokenizer import load_tokenizer
from aura_omni.pipeline.processors import asr2aura
from aura_omni.models.qwen_vocab import write_qwen_tokenizer
from aura_omni.stages.aura.prompt_tokens import AuraPrompt, PromptTokenizer, PromptTurn

# Qwen vocabulary ids (aura_omni_pipeline.md §3.1, §5): ChatML markers and the vision markers.
IM_START, IM_END, NEWLINE, ASSISTANT = 151644, 151645, 198, 77091
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 151652, 151653, 151655, 151656


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    out = tmp_path_factory.mktemp("aura_tokenizer")
    write_qwen_tokenizer(out, ["<|silent|>"])  # the tiny AURA checkpoint's tokenizer
    return load_tokenizer(out)


def rendered(prompt: AuraPrompt, vision) -> str:
    """Upstream's form: the ChatML string with each vision item expanded as Qwen3VLProcessor does (test oracle)."""
    items, out = iter(vision), ""
    for turn in prompt.turns:
        body = ""
        for _ in turn.vision:
            v = next(items)
            if v.kind == "image":
                body += "<|vision_start|>" + "<|image_pad|>" * v.num_tokens + "<|vision_end|>"
            else:
                body += "".join(f"<{t:.1f} seconds><|vision_start|>" + "<|video_pad|>" * v.tokens_per_group
                                + "<|vision_end|>" for t in v.timestamps)
        out += f"<|im_start|>{turn.role}\n{body}{turn.text}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def session(turns: int) -> AuraPrompt:
    """Turn N+1 of a live session: every turn brought a video and words, and got its own reply."""
    said = [f"look  <here> {k}?" for k in range(turns + 1)]
    history = [t for k in range(turns) for t in (("user", said[k], ["video"]), ("assistant", f" ok {k}"))]
    return asr2aura(None, vision_items=["video"], text_parts=[said[turns]], history=history, system_prompt="System <s>")


def whole(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def videos(n: int):
    rng = np.random.RandomState(0)
    return [preprocess_video(rng.randint(0, 256, (4, 64, 96, 3), dtype=np.uint8), video_fps=2.0) for _ in range(n)]


def test_prompt_ids_of_a_session_equal_the_rendered_prompt_tokenised(tokenizer):
    tokens, vids = PromptTokenizer(tokenizer), videos(4)
    for turns in range(4):
        prompt = session(turns)
        ids = tokens(prompt, vids[:turns + 1])
        assert ids == whole(tokenizer, rendered(prompt, vids[:turns + 1]))
        assert ids[:3] == [IM_START, 8948, NEWLINE] and ids[-3:] == [IM_START, ASSISTANT, NEWLINE]
        assert ids.count(VIDEO_PAD) == (turns + 1) * vids[0].num_tokens


def test_text_touching_markers_and_vision_tokenises_as_upstream(tokenizer):
    rng = np.random.RandomState(1)
    image = preprocess_image(rng.randint(0, 256, (64, 64, 3), dtype=np.uint8))
    prompt = AuraPrompt((PromptTurn("system", "S <"), PromptTurn("user", "\n a <b ", ("video",)),
                         PromptTurn("assistant", "<|silent|>"), PromptTurn("user", " x<y \n\n", ("video", "image")),
                         PromptTurn("user", "")))
    vision = videos(2) + [image]
    ids = PromptTokenizer(tokenizer)(prompt, vision)
    assert ids == whole(tokenizer, rendered(prompt, vision))
    assert 151669 in ids  # <|silent|> in the history stays AURA's special token
    start = ids.index(IMAGE_PAD) - 1
    assert ids[start:start + image.num_tokens + 2] == [VISION_START] + [IMAGE_PAD] * image.num_tokens + [VISION_END]


def test_a_session_turn_tokenises_only_its_new_text(tokenizer):
    tokens, vids = PromptTokenizer(tokenizer), videos(4)
    encoded = []
    encode = tokens.encode
    tokens.encode = lambda text: encoded.append(text) or encode(text)
    for turns in range(4):
        encoded.clear()
        tokens(session(turns), vids[:turns + 1])
        if turns:  # the previous reply and this user message (its timestamps and "\n" were seen before)
            assert encoded == [f"assistant\n ok {turns - 1}", f"look  <here> {turns}?"]


def test_vision_inputs_must_match_the_placeholders(tokenizer):
    tokens, vids = PromptTokenizer(tokenizer), videos(2)
    image = preprocess_image(np.zeros((64, 64, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="fewer"):
        tokens(session(0), vids[:1] + [image])
    with pytest.raises(ValueError, match="more"):
        tokens(session(1), vids[:1])
    with pytest.raises(ValueError, match="'video' but vision input 0 is 'image'"):
        tokens(session(0), [image])


def test_the_span_cache_is_bounded_and_keeps_ids_packed(tokenizer):
    tokens = PromptTokenizer(tokenizer, max_texts=8)
    for k in range(20):
        ids = tokens(asr2aura(None, text_parts=[f"turn number {k} says something new"]), [])
        assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
        assert ids == whole(tokenizer, rendered(asr2aura(None, text_parts=[f"turn number {k} says something new"]), []))
    assert len(tokens._texts) == 8  # oldest spans dropped
    assert all(v.itemsize == 4 and v.typecode == "i" for v in tokens._texts.values())  # 4 bytes an id, no int objects
