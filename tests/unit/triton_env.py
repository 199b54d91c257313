"""Where the Triton kernel tests run: compiled on a GPU, or on the CPU under Triton's interpreter (`TRITON_INTERPRET=1`
set before the run, e.g. `TRITON_INTERPRET=1 python -m pytest -q tests/unit/test_triton_gemv.py`); elsewhere they
are skipped. A test module sets `pytestmark = needs_triton` and runs on `DEVICE`."""

import importlib.util
import os

import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cpu" if INTERPRET or not torch.cuda.is_available() else "cuda")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None
                                  or not (INTERPRET or torch.cuda.is_available()),
                                  reason="needs Triton with CUDA, or TRITON_INTERPRET=1")
