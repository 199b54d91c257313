"""Inputs for transformers' Qwen3ASRForConditionalGeneration built from our prepared pieces (parity tests and
the ASR benchmark drive the reference with the same features our engine sees)."""

import torch

PAD_ID = 151643  # <|endoftext|>, the processor's pad token


def hf_asr_inputs(pieces) -> dict[str, torch.Tensor]:
    """Left-padded ids and zero-padded features (to a multiple of 100 frames, the encoder's chunk) of
    `AsrService.prepare` pieces, as `generate` takes them."""
    width = max(len(p.input_ids) for p in pieces)
    frames = -(-max(p.features.shape[1] for p in pieces) // 100) * 100
    ids = torch.full((len(pieces), width), PAD_ID)
    mask = torch.zeros(len(pieces), width, dtype=torch.long)
    feats = torch.zeros(len(pieces), pieces[0].features.shape[0], frames)
    fmask = torch.zeros(len(pieces), frames, dtype=torch.long)
    for i, p in enumerate(pieces):
        ids[i, width - len(p.input_ids):] = torch.tensor(p.input_ids)
        mask[i, width - len(p.input_ids):] = 1
        feats[i, :, :p.features.shape[1]] = p.features
        fmask[i, :p.features.shape[1]] = 1
    return dict(input_ids=ids, attention_mask=mask, input_features=feats, input_features_mask=fmask)
