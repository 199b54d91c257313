"""Where the Triton kernel tests run: compiled on a GPU, or on the CPU under Triton's interpreter (`TRITON_INTERPRET=1`
set before the run, e.g. `TRITON_INTERPRET=1 python -m pytest -q tests/unit/test_triton_gemv.py`); elsewhere they
are skipped. A test module sets `pytestmark = needs_triton` and runs on `DEVICE`; `fused_layer_model` is the small
backbone the fused-layer tests share."""

import importlib.util
import os

import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cpu" if INTERPRET or not torch.cuda.is_available() else "cuda")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None
                                  or not (INTERPRET or torch.cuda.is_available()),
                                  reason="needs Triton with CUDA, or TRITON_INTERPRET=1")


def fused_layer_model():
    """A 2-layer Qwen3 backbone on DEVICE with random weights and non-trivial norm weights (a plain init's all-ones
    norms would hide a norm applied twice or not at all)."""
    from aura_omni.models.qwen3 import Qwen3Config, Qwen3Model

    cfg = Qwen3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      intermediate_size=96)
    torch.manual_seed(0)
    model = Qwen3Model(cfg).to(DEVICE)
    for p in model.parameters():
        p.data.normal_(1.0 if p.dim() == 1 else 0.0, 0.5 if p.dim() == 1 else 0.1)
    return model
