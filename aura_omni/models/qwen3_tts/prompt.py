"""Talker prompt assembly for every Qwen3-TTS mode (qwen3_tts.md §2), in two steps.

`plan_prompt` is pure bookkeeping on ids: each prompt position is a text id (through the text
projection) and/or a codec item (a codec-vocabulary id, the speaker x-vector, or one reference
frame), plus the trailing text queue fed one id per decode step. `embed_prompts` turns plans into
embeddings with a Talker, several at once. Keeping them apart lets the layout be tested without a model, and lets the
Talker's stage plan each prompt as it comes and embed all of those that came between two steps together.

Templates (qwen-tts wrapper): target "<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n"
-> ids[:3] role, ids[3:-5] body; instruct "<|im_start|>user\\n{instruct}<|im_end|>\\n" used whole;
ICL reference "<|im_start|>assistant\\n{ref_text}<|im_end|>\\n" -> ids[3:-2].
"""

import itertools
from dataclasses import dataclass, field

import torch

from aura_omni.layers.device import upload_async
from aura_omni.models.qwen3_tts.checkpoint_config import Qwen3TTSConfig

XVECTOR = "xvector"  # codec item: the speaker embedding row (Base models)


@dataclass(frozen=True)
class RefFrame:
    """Codec item: the sum of the 16 codebook embeddings of reference frame `index` (ICL)."""

    index: int


CodecItem = int | str | RefFrame | None


@dataclass
class TalkerPrompt:
    text_ids: list[int | None] = field(default_factory=list)  # per position
    codec: list[CodecItem] = field(default_factory=list)  # per position
    trailing_text_ids: list[int] = field(default_factory=list)  # one per decode step, then <tts_pad>

    def __len__(self) -> int:
        return len(self.text_ids)

    def add(self, text_ids: list, codec: list) -> None:
        assert len(text_ids) == len(codec)
        self.text_ids += list(text_ids)
        self.codec += list(codec)


def target_template(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_template(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def ref_template(ref_text: str) -> str:
    return f"<|im_start|>assistant\n{ref_text}<|im_end|>\n"


def codec_language(cfg: Qwen3TTSConfig, language: str, speaker: str | None) -> int | None:
    """Codec language id, None for "auto"; dialect speakers replace chinese/auto by their dialect."""
    lang = language.lower()
    lang_id = None if lang == "auto" else cfg.talker.codec_language_id[lang]
    if speaker and lang in ("chinese", "auto"):
        dialect = cfg.talker.spk_is_dialect.get(speaker.lower(), False)
        if dialect:
            lang_id = cfg.talker.codec_language_id[dialect]
    return lang_id


def plan_prompt(
    cfg: Qwen3TTSConfig,
    text_ids: list[int],
    *,
    language: str = "auto",
    speaker: str | None = None,
    instruct_ids: list[int] | None = None,
    xvector: bool = False,
    ref_text_ids: list[int] | None = None,
    num_ref_frames: int = 0,
    non_streaming: bool = False,
    text_open: bool = False,
) -> TalkerPrompt | None:
    """Positions and trailing queue for one request. `text_ids` is the tokenised target template;
    `ref_text_ids` the tokenised ICL reference template (ICL when given with `num_ref_frames`).

    `text_open`: the body is only the part known so far (streaming text, text_stream.py): the trailing queue then
    lacks <tts_text_eod>, which comes with the rest; None while the prompt itself needs more of the body (the first
    token, or for ICL the text under the reference frames)."""
    if text_open and non_streaming:
        raise ValueError("a text that is still arriving needs streaming text mode (non_streaming_mode=False)")
    tc = cfg.talker
    pad, bos, eos = cfg.tts_pad_token_id, cfg.tts_bos_token_id, cfg.tts_eos_token_id
    role, body = list(text_ids[:3]), list(text_ids[3:-5])
    prompt = TalkerPrompt()
    if instruct_ids:
        prompt.add(instruct_ids, [None] * len(instruct_ids))
    prompt.add(role, [None] * 3)

    lang_id = codec_language(cfg, language, speaker)
    codec = ([tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id] if lang_id is None
             else [tc.codec_think_id, tc.codec_think_bos_id, lang_id, tc.codec_think_eos_id])
    if speaker:
        codec.append(tc.spk_id[speaker.lower()])
    elif xvector:
        codec.append(XVECTOR)
    codec += [tc.codec_pad_id, tc.codec_bos_id]
    # Text track under the codec prefix: <tts_pad>... then <tts_text_bos>; the final codec bos waits for the body.
    prompt.add([pad] * (len(codec) - 2) + [bos], codec[:-1])

    end = [] if text_open else [eos]
    if ref_text_ids is not None and num_ref_frames > 0:  # ICL: reference text + codes lead the target
        text = list(ref_text_ids[3:-2]) + body + end
        frames = [tc.codec_bos_id] + [RefFrame(i) for i in range(num_ref_frames)]
        if text_open and len(text) <= len(frames):
            return None  # how the text fits under the frames depends on the rest
        if non_streaming:
            prompt.add(text, [tc.codec_pad_id] * len(text))
            prompt.add([pad] * len(frames), frames)
            prompt.trailing_text_ids = [pad]
        elif len(text) > len(frames):
            prompt.add(text[:len(frames)], frames)
            prompt.trailing_text_ids = text[len(frames):]
        else:
            prompt.add(text + [pad] * (len(frames) - len(text)), frames)
            prompt.trailing_text_ids = [pad]
    elif non_streaming:  # whole text first, then the codec bos
        text = body + [eos]
        prompt.add(text, [tc.codec_pad_id] * len(text))
        prompt.add([pad], [tc.codec_bos_id])
        prompt.trailing_text_ids = [pad]
    else:  # streaming text: first token with the codec bos, the rest one per frame
        if text_open and not body:
            return None
        prompt.add(body[:1], [tc.codec_bos_id])
        prompt.trailing_text_ids = body[1:] + end
    return prompt


@torch.no_grad()
def embed_prompts(talker, prompts: list[TalkerPrompt], xvectors: list[torch.Tensor | None] | None = None,
                  ref_codes: list[torch.Tensor | None] | None = None) -> list[tuple[torch.Tensor, torch.Tensor,
                                                                                    tuple[torch.Tensor, ...]]]:
    """-> per prompt (inputs_embeds [L, H], trailing text embeddings [Q, H], those Q rows as [H] views) on the talker's
    device and dtype: views of one buffer each. Every prompt taken between two Talker steps is embedded in one pass:
    one upload of every id and row index, one pass of each embedding over all of them, four `index_add_`s, whatever
    the number of prompts (a burst of 32 would otherwise make ~20 launches and uploads each on the loop's thread).
    `xvectors[i]` ([H], host) and `ref_codes[i]` ([F, 16] long, host) serve prompt i's XVECTOR and RefFrame rows."""
    weight = talker.model.codec_embedding.weight
    device, dtype, hidden = weight.device, weight.dtype, weight.shape[1]
    n = len(prompts)
    xvectors, ref_codes = xvectors or [None] * n, ref_codes or [None] * n
    text_at, text_ids, codec_at, codec_ids, xvec_at, xvec_of, frame_at, frames = ([] for _ in range(8))
    trailing_ids, lengths, trailing_lengths, voices = [], [], [], []
    at = 0
    for prompt, xvector, codes in zip(prompts, xvectors, ref_codes):
        for i, (t, c) in enumerate(zip(prompt.text_ids, prompt.codec)):
            if t is not None:
                text_at.append(at + i)
                text_ids.append(t)
            if isinstance(c, int):
                codec_at.append(at + i)
                codec_ids.append(c)
            elif c == XVECTOR:
                if xvector is None:
                    raise ValueError("prompt has an x-vector row but no x-vector was given")
                if not voices or voices[-1] is not xvector:  # a prompt's one x-vector, uploaded once
                    voices.append(xvector)
                xvec_at.append(at + i)
                xvec_of.append(len(voices) - 1)
            elif isinstance(c, RefFrame):
                if codes is None:
                    raise ValueError("prompt has reference frames but no reference codes were given")
                frame_at.append(at + i)
                frames.append(codes[c.index])
        trailing_ids += prompt.trailing_text_ids
        lengths.append(len(prompt))
        trailing_lengths.append(len(prompt.trailing_text_ids))
        at += len(prompt)
    # every id and row index in one upload, added with index_add_ (a device index: a Python-list index would copy
    # from pageable memory, and wait for the step queued on the stream)
    parts = [text_at, text_ids + trailing_ids, codec_at, codec_ids, xvec_at, xvec_of, frame_at]
    flat = upload_async(torch.tensor([v for part in parts for v in part], dtype=torch.long), device)
    text_at_d, all_text_d, codec_at_d, codec_ids_d, xvec_at_d, xvec_of_d, frame_at_d = flat.split(
        [len(part) for part in parts])
    out = torch.zeros(at, hidden, device=device, dtype=dtype)
    texts = talker.embed_text(all_text_d).to(dtype).reshape(-1, hidden)  # the prompts' text and trailing rows
    if text_ids:
        out.index_add_(0, text_at_d, texts[:len(text_ids)])
    if codec_ids:
        out.index_add_(0, codec_at_d, talker.embed_codec(codec_ids_d).to(dtype))
    if voices:
        rows = upload_async(torch.stack([v.reshape(-1) for v in voices]), device).to(dtype)
        out.index_add_(0, xvec_at_d, rows.index_select(0, xvec_of_d))
    if frames:
        out.index_add_(0, frame_at_d, talker.embed_frame(upload_async(torch.stack(frames), device)).to(dtype))
    trailing = texts[len(text_ids):]  # [0, H] for an open text with nothing trailing yet
    rows = trailing.unbind(0)  # one [H] view per row, for every prompt in one call (a step stacks its rows' views)
    starts = list(itertools.accumulate(trailing_lengths, initial=0))
    return [(embeds, part, rows[a:b]) for embeds, part, a, b in
            zip(out.split(lengths), trailing.split(trailing_lengths), starts, starts[1:])]
