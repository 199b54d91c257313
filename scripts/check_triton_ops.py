"""Check the fused Triton kernels (aura_omni/layers/triton_ops.py, triton_gemv.py, triton_prefill.py,
triton_short_attention.py) against their torch references,
and the Talker's sampling kernel (aura_omni/models/qwen3_tts/triton_sampling.py) against `sampling.choose_batched`.

    TRITON_INTERPRET=1 python scripts/check_triton_ops.py --device cpu     # no GPU: Triton's interpreter
    python scripts/check_triton_ops.py                                     # CUDA: fp32 and bf16
"""

import argparse

import torch

from aura_omni.layers import triton_gemv, triton_ops, triton_prefill, triton_short_attention
from aura_omni.models.qwen3_tts import triton_sampling

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = ap.parse_args()
bad = False
for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 2e-2)):
    for shape in (dict(head_dim=64, hq=8, hkv=2, hidden=256), dict(head_dim=128, hq=32, hkv=8, hidden=4096)):
        err = triton_ops.self_check(torch.device(args.device), dtype, **shape)
        print(str(dtype), shape, {k: f"{v:.2e}" for k, v in err.items()})
        bad |= any(not v <= tol for v in err.values())
# small-M GEMVs (layers/triton_gemv.py): the one-row FMA and the tensor-core paths; 8B-like sizes on CUDA only (slow
# in the interpreter, whose bf16 tl.dot is wrong: bf16 rows > 1 fail there only, like paged_decode)
gemv_shapes = [dict(hidden=272, out=208, rows=(1, 7))]
if args.device != "cpu":
    gemv_shapes.append(dict(hidden=4096, out=4096, rows=(1, 16)))
for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 2e-2)):
    for shape in gemv_shapes:
        err = triton_gemv.self_check(torch.device(args.device), dtype, **shape)
        print("gemv", str(dtype), shape, {k: f"{v:.2e}" for k, v in err.items()})
        bad |= any(not v <= tol for v in err.values())
# paged prefill: the 8B's GQA (32/8 heads of 128) and the Talker's (16/8); bf16 not in the interpreter (its tl.dot)
for dtype, tol in ((torch.float32, 1e-4),) + (((torch.bfloat16, 2e-2),) if args.device != "cpu" else ()):
    for hq, hkv, d in ((32, 8, 128), (16, 8, 128)):
        err = triton_prefill.self_check(torch.device(args.device), dtype, head_dim=d, hq=hq, hkv=hkv)
        print("paged_prefill", str(dtype), dict(hq=hq, hkv=hkv, head_dim=d), f"{err:.2e}")
        bad |= not err <= tol
        err = triton_short_attention.self_check(torch.device(args.device), dtype, head_dim=d, hq=hq, hkv=hkv)
        print("short_attention", str(dtype), dict(hq=hq, hkv=hkv, head_dim=d), f"{err:.2e}")
        bad |= not err <= tol
stats = triton_sampling.self_check(torch.device(args.device))
print("sampling ids vs choose_batched", stats)  # differ: near-ties of race scores only; bad must be 0
bad |= stats["bad"] > 0
print("FAIL" if bad else "ok")
raise SystemExit(int(bad))
