from aura_omni.pipeline.sentences import SentenceSplitter, sentence_ends


def _stream(text, step=3, min_chars=30):
    splitter, out = SentenceSplitter(min_chars), []
    for i in range(step, len(text) + step, step):
        out += splitter.feed(text[:i])
    return out + splitter.finish(text)


def test_sentence_ends_and_comma_rule():
    assert sentence_ends("Hi, there. Ok") == [10]  # comma at position 3 does not split
    assert sentence_ends("A long clause here, then more") == [19]
    assert sentence_ends("你好。再见！") == [3, 6]


def test_emits_whole_sentences_once_long_enough_and_flushes_rest():
    text = "The weather is sunny today in the park. Birds are singing loudly! And that is all"
    pieces = _stream(text)
    assert pieces == ["The weather is sunny today in the park.", "Birds are singing loudly! And that is all"]
    assert " ".join(pieces) == text


def test_short_sentences_are_merged_until_minimum():
    pieces = _stream("Yes. No. Maybe so. I think we should go now, friends.", min_chars=20)
    assert pieces[0] == "Yes. No. Maybe so. I think we should go now,"


def test_silent_reply_never_emits_and_prefix_is_held():
    splitter = SentenceSplitter(1)
    assert splitter.feed("<|sil") == []
    assert splitter.feed("<|silent|>") == []
    assert splitter.finish("<|silent|>") == []
    held = SentenceSplitter(1)
    assert held.feed("<|") == []
    assert held.feed("<|hello there.") == ["<|hello there."]


def test_open_think_block_holds_output():
    splitter = SentenceSplitter(1)
    assert splitter.feed("<think>Long reasoning. More.") == []
    assert splitter.feed("<think>Long reasoning. More.</think>Answer is yes.") == ["Answer is yes."]
