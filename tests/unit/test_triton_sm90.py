"""Every Triton kernel compiles for the H200 (sm_90) on a machine without a GPU, and the compiled code keeps the
properties the speed work relies on (layers/pdl.py, layers/triton_prefill.py).

Triton compiles to a cubin with its bundled ptxas, so CI catches what the interpreter accepts but the compiler
rejects (loop-carried types, constexpr misuse, shared-memory overflow) before a device session does. Runs where
Triton is importable and not in interpreter mode, e.g. `PYTHONPATH=.triton-site python -m pytest -q
tests/unit/test_triton_sm90.py` (scripts/test_triton.sh). The compile-time specialisations a launch would apply are
given explicitly: 16-byte divisible pointers and strides.
"""

import importlib.util
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None or os.environ.get("TRITON_INTERPRET") == "1",
                                reason="needs Triton, compiling (not TRITON_INTERPRET=1)")

BF16, F32, I32, I64 = "*bf16", "*fp32", "*i32", "*i64"
CPU = torch.device("cpu")  # no tuned tiles: the shape rule


def compile_sm90(kernel, pointers: dict[str, str], constexprs: dict, num_warps: int = 4, num_stages: int = 3,
                 floats: tuple[str, ...] = ("scale", "eps")):
    """The kernel compiled for sm_90: pointer arguments typed by `pointers`, `floats` fp32, other arguments i32."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = kernel.arg_names
    signature = {n: pointers.get(n) or ("constexpr" if n in constexprs else "fp32" if n in floats else "i32")
                 for n in names}
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n in pointers or n.startswith("stride")}
    source = ASTSource(kernel, signature, constexprs={(names.index(n),): v for n, v in constexprs.items()},
                       attrs=aligned)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def ptx_lines(compiled, *needles: str) -> list[tuple[int, str]]:
    return [(i, line.strip()) for i, line in enumerate(compiled.asm["ptx"].splitlines())
            if any(n in line for n in needles)]


def _one_row_tiles() -> dict[str, tuple[int, int, tuple]]:
    """id -> (N, K, tile): every tuned H200 tile (layers/gemv_tiles.json) and the untuned rule's for the 8B gate/up."""
    from aura_omni.layers import triton_gemv

    tiles = {f"h200-{n}x{k}": (n, k, tile) for (n, k), tile in triton_gemv.tuned_tiles("NVIDIA H200").items()}
    return tiles | {"untuned-24576x4096": (24576, 4096, triton_gemv._config(1, 24576, 4096, 2, CPU)[2:])}


ONE_ROW_TILES = _one_row_tiles()


@pytest.mark.parametrize("pdl", [True, False])
@pytest.mark.parametrize("tile", ONE_ROW_TILES.values(), ids=ONE_ROW_TILES.keys())
def test_one_row_gemv_loads_its_first_weight_tile_before_waiting_for_the_previous_kernel(tile, pdl):
    from aura_omni.layers import triton_gemv

    n, k, (bn, bk, warps, stages) = tile
    compiled = compile_sm90(triton_gemv._gemv_kernel, dict(a_ptr=BF16, nw_ptr=BF16, w_ptr=BF16, res_ptr=BF16,
                                                           out_ptr=BF16),
                            dict(K=k, NORM=True, SILU=False, HAS_RES=False, DOT=False, IEEE=False, M_PAD=1,
                                 BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, PDL=pdl), warps, stages)
    assert compiled.metadata.shared <= 227 * 1024
    marks = ptx_lines(compiled, "griddepcontrol", "ld.global.v4")
    kinds = [text.split()[0] if "griddepcontrol" in text else "load" for _, text in marks]
    if not pdl:
        assert "griddepcontrol.wait;" not in kinds
        return
    assert kinds[0] == "griddepcontrol.launch_dependents;"  # the next kernel may launch at once
    wait = kinds.index("griddepcontrol.wait;")
    assert kinds.count("griddepcontrol.wait;") == 1
    assert kinds[1:wait] and set(kinds[1:wait]) == {"load"}  # the weight tile is in flight while waiting
    if stages > 1 and k > bk * 2:  # two or more steps after the first: the weights stream through cp.async
        assert "cp.async" in compiled.asm["ptx"]


def test_the_tensor_core_gemv_and_the_elementwise_kernels_compile_with_pdl():
    from aura_omni.layers import triton_gemv, triton_ops

    dot, m_pad, bn, bk, warps, stages = triton_gemv._config(8, 6144, 4096, 2, CPU)
    kernels = [
        (triton_gemv._gemv_kernel, dict(a_ptr=BF16, nw_ptr=BF16, w_ptr=BF16, res_ptr=BF16, out_ptr=BF16),
         dict(K=4096, NORM=False, SILU=True, HAS_RES=True, DOT=dot, IEEE=False, M_PAD=m_pad, BLOCK_N=bn, BLOCK_K=bk,
              STAGES=stages),
         warps, stages),
        (triton_ops._rmsnorm_kernel, dict(x_ptr=BF16, r_ptr=BF16, w_ptr=BF16, out_ptr=BF16, res_ptr=BF16),
         dict(HAS_RES=True, BLOCK=4096), 8, 3),
        (triton_ops._qk_norm_rope_kernel, dict(qkv_ptr=BF16, cos_ptr=F32, sin_ptr=F32, qw_ptr=BF16, kw_ptr=BF16,
                                               q_out=BF16, k_out=BF16, v_out=BF16, kc_ptr=BF16, vc_ptr=BF16,
                                               slot_ptr=I64),
         dict(HQ=32, HKV=8, D=128, HAS_CACHE=True), 1, 3),
        (triton_ops._silu_mul_kernel, dict(gu_ptr=BF16, out_ptr=BF16), dict(BLOCK=1024), 4, 3),
        (triton_ops._paged_decode_reduce_kernel, dict(m_ptr=F32, l_ptr=F32, acc_ptr=F32, out_ptr=BF16),
         dict(HQ=32, D=128, PARTS_PAD=8), 1, 3),
    ]
    for kernel, pointers, constexprs, warps, stages in kernels:
        compiled = compile_sm90(kernel, pointers, {**constexprs, "PDL": True}, warps, stages)
        kinds = [text.split()[0] for _, text in ptx_lines(compiled, "griddepcontrol")]
        assert kinds == ["griddepcontrol.launch_dependents;", "griddepcontrol.wait;"], kernel


def test_the_attention_kernels_compile_and_the_prefill_key_loop_is_pipelined():
    from aura_omni.layers import triton_ops, triton_prefill, triton_short_attention

    decode = compile_sm90(triton_ops._paged_decode_part_kernel,
                          dict(q_ptr=BF16, kc_ptr=BF16, vc_ptr=BF16, bt_ptr=I32, sl_ptr=I32, m_ptr=F32, l_ptr=F32,
                               acc_ptr=F32, out_ptr=BF16),
                          dict(HQ=32, GROUP=4, GROUP_PAD=16, D=128, BS=16, BLOCK_N=64, IEEE=False, SINGLE=False,
                               PDL=True))
    short = compile_sm90(triton_short_attention._short_attention_kernel,
                         dict(qkv_ptr=BF16, cos_ptr=F32, sin_ptr=F32, qw_ptr=BF16, kw_ptr=BF16, kc_ptr=BF16,
                              vc_ptr=BF16, slot_ptr=I64, bt_ptr=I32, sl_ptr=I32, out_ptr=BF16),
                         dict(HQ=16, HKV=8, GROUP=2, GROUP_PAD=16, D=128, BS=16, BLOCK_N=64, IEEE=False, PDL=True))
    prefill = {}
    for pipeline in (True, False):
        prefill[pipeline] = compile_sm90(
            triton_prefill._paged_prefill_kernel,
            dict(q_ptr=BF16, kc_ptr=BF16, vc_ptr=BF16, m_ptr=F32, l_ptr=F32, acc_ptr=F32, cu_ptr=I32, sl_ptr=I32,
                 bt_ptr=I32, tiles_ptr=I32),
            dict(HQ=32, GROUP=4, GROUP_PAD=4, BLOCK_M=triton_prefill.block_m(32, 8), D=128, BS=16,
                 BLOCK_N=triton_prefill._BLOCK_N, SPLIT=triton_prefill._SPLIT, MIN_PART=triton_prefill._MIN_PART,
                 IEEE=False, PIPELINE=pipeline, PDL=True), num_warps=8)
    for compiled in (decode, short, *prefill.values()):
        assert compiled.metadata.shared <= 227 * 1024  # an H200 SM's shared memory per block
    assert ptx_lines(prefill[True], "cp.async") and not ptx_lines(prefill[False], "cp.async")


def test_the_sampling_kernel_compiles_for_the_talker_vocabularies():
    from aura_omni.models.qwen3_tts import triton_sampling

    for vocab in (3072, 2048):  # the Talker's codec head, the code predictor's
        compile_sm90(triton_sampling._choose_kernel,
                     dict(logits_ptr=BF16, greedy_ptr=F32, temp_ptr=F32, top_k_ptr=I32, top_p_ptr=F32, keys_ptr=I64,
                          steps_ptr=I64, out_ptr=I64),
                     dict(BLOCK=1 << (vocab - 1).bit_length(), PDL=True), num_warps=8)
