from aura_omni.pipeline.processors import strip_assistant_text
from aura_omni.pipeline.sentences import SentenceSplitter, Utterances, sentence_ends


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


# ---------------------------------------------------------------------------------------------- Utterances

def utter(pieces, **kw):
    """(what each cumulative feed gave, what finish gave) for a reply streamed in `pieces`."""
    u, raw, fed = Utterances(**kw), "", []
    for piece in pieces:
        raw += piece
        fed.append(u.feed(raw))
    return fed, u.finish(raw)


def test_an_utterance_starts_once_its_first_word_is_whole():
    fed, rest = utter(["Hel", "lo", " wor", "ld", "!"])
    assert fed == [[], [], ["Hello wor"], ["ld"], ["!"]] and rest == [None]  # the Talker tokenises whole words only


def test_a_comma_or_sentence_end_makes_a_short_first_clause_whole():
    assert utter(["Yes."])[0] == [["Yes."]]
    assert utter(["你好，", "世界。"])[0] == [["你好，"], ["世界。"]]  # CJK has no spaces between words


def test_a_one_word_reply_is_spoken_at_the_end():
    assert utter(["Hi"]) == ([[]], ["Hi", None])


def test_markers_that_may_still_vanish_are_held_back():
    fed, rest = utter(["Hello there", " friend<|im_", "end|>"])
    assert "".join(p for f in fed for p in f if p) == "Hello there friend" and rest == [None]
    pieces = ["Well then ", "<think>hmm", " let me see</think>", " answer is four."]
    fed, rest = utter(pieces)
    assert "".join(p for f in fed + [rest] for p in f if p) == strip_assistant_text("".join(pieces))


def test_nothing_starts_while_the_reply_may_be_silent():
    assert utter(["<|sil", "ent|>"]) == ([[], []], [])
    assert utter([" <|silent", "|>  "]) == ([[], []], [])


def test_start_words_waits_for_more_whole_words():
    fed, _ = utter(["One ", "two ", "three ", "four"], start_words=3)
    assert fed == [[], [], [], ["One two three four"]]


def test_a_less_than_sign_that_starts_no_marker_is_spoken_at_once():
    fed, _ = utter(["If x ", "< 5 then", " go"])
    assert fed == [["If x"], [" < 5 then"], [" go"]]
