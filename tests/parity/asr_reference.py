"""Inputs for transformers' Qwen3ASRForConditionalGeneration built from our prepared pieces (parity tests and
the ASR benchmark drive the reference with the same features our engine sees)."""

import torch

PAD_ID = 151643  # <|endoftext|>, the processor's pad token


def hf_asr_inputs(pieces, features) -> dict[str, torch.Tensor]:
    """Left-padded ids and zero-padded features (to a multiple of 100 frames, the encoder's chunk) of
    `AsrService.prepare` pieces and their `AsrService.features`, as `generate` takes them."""
    width = max(len(p.input_ids) for p in pieces)
    features = [f.cpu() for f in features]
    frames = -(-max(f.shape[1] for f in features) // 100) * 100
    ids = torch.full((len(pieces), width), PAD_ID)
    mask = torch.zeros(len(pieces), width, dtype=torch.long)
    feats = torch.zeros(len(pieces), features[0].shape[0], frames)
    fmask = torch.zeros(len(pieces), frames, dtype=torch.long)
    for i, (p, f) in enumerate(zip(pieces, features)):
        ids[i, width - len(p.input_ids):] = torch.tensor(p.input_ids)
        mask[i, width - len(p.input_ids):] = 1
        feats[i, :, :f.shape[1]] = f
        fmask[i, :f.shape[1]] = 1
    return dict(input_ids=ids, attention_mask=mask, input_features=feats, input_features_mask=fmask)
