"""Kernel switches are per stage: each engine runs with its own, and no stage's start-up turns another's kernels off."""

import threading
from types import SimpleNamespace

import pytest
import torch

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.layers import attention_backend, kernel_switches, pdl
from aura_omni.layers.kernel_switches import KernelSwitches
from tests.unit.engine_tiny_lm import prompts, tiny_lm

CUDA0 = torch.device("cuda", 0)


def test_each_thread_keeps_the_switches_it_entered():
    seen, ready = {}, threading.Barrier(2)

    def stage(name, switches):
        with kernel_switches.using(switches):
            ready.wait()  # both stages are inside their own switches at once
            seen[name] = kernel_switches.current()

    threads = [threading.Thread(target=stage, args=("a", KernelSwitches(gemv=False))),
               threading.Thread(target=stage, args=("b", KernelSwitches(pdl=False)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": KernelSwitches(gemv=False), "b": KernelSwitches(pdl=False)}
    assert kernel_switches.current() == KernelSwitches.resolve()  # outside any stage: the process default


def test_the_environment_is_only_the_default(monkeypatch):
    from aura_omni import env

    monkeypatch.setattr(env, "_current", env.read({env.GEMV: "0", env.PDL: "0"}))
    assert KernelSwitches.resolve() == KernelSwitches(gemv=False, pdl=False)
    assert KernelSwitches.resolve(gemv=True, pdl=True) == KernelSwitches()
    with kernel_switches.using(KernelSwitches(pdl=True)):
        assert kernel_switches.current().pdl
    assert not kernel_switches.current().pdl


def test_two_engines_run_their_steps_with_their_own_switches():
    seen: dict[str, list[KernelSwitches]] = {"fast": [], "plain": []}
    engines = {}
    for name, cfg in (("fast", EngineConfig(max_model_len=64, block_size=4, num_kv_blocks=32)),
                      ("plain", EngineConfig(max_model_len=64, block_size=4, num_kv_blocks=32, fast_attention=False,
                                             gemv=False, pdl=False))):
        model = tiny_lm()
        model.backbone.register_forward_pre_hook(lambda *_, n=name: seen[n].append(kernel_switches.current()))
        engines[name] = LLMEngine(model, cfg, name=name)
        engines[name].add_request("r", prompts([5])[0], SamplingParams(temperature=0, max_tokens=3))
    while any(e.has_unfinished() for e in engines.values()):  # interleaved, as two stages' loops are
        for e in engines.values():
            if e.has_unfinished():
                e.step()
    assert seen["fast"] and set(seen["fast"]) == {KernelSwitches()}
    assert seen["plain"] and set(seen["plain"]) == {KernelSwitches(fast_attention=False, gemv=False, pdl=False)}


@pytest.fixture
def cuda0_checked(monkeypatch):
    """As if every kernel had passed its check on cuda:0 in bf16 (no GPU needed: nothing launches)."""
    monkeypatch.setattr(attention_backend, "_passed",
                        {(CUDA0, torch.bfloat16): dict.fromkeys(attention_backend._KERNELS, True)})
    return SimpleNamespace(is_cuda=True, device=CUDA0, dtype=torch.bfloat16, shape=(1, 64))


def test_a_cpu_stage_or_a_plain_torch_stage_leaves_another_stages_kernels_on(cuda0_checked):
    x = cuda0_checked
    with kernel_switches.using(KernelSwitches(fast_attention=False)):  # a stage that asks for plain torch ...
        assert attention_backend.select_backend(CUDA0, torch.bfloat16, prefer_fast=False) == dict.fromkeys(
            attention_backend._KERNELS, False)
        assert not attention_backend.fused_layers_enabled(x)  # ... gets none
    assert attention_backend.select_backend(torch.device("cpu"), torch.float32) == dict.fromkeys(
        attention_backend._KERNELS, False)  # a CPU stage starting up
    assert attention_backend.fused_layers_enabled(x) and attention_backend.gemv_enabled(x)  # the GPU stage keeps them
    with kernel_switches.using(KernelSwitches(gemv=False)):
        assert attention_backend.fused_layers_enabled(x) and not attention_backend.gemv_enabled(x)
    assert attention_backend.gemv_enabled(x)
    assert not attention_backend.fused_layers_enabled(SimpleNamespace(**{**vars(x), "dtype": torch.float16}))


def test_pdl_follows_the_running_stage():
    with kernel_switches.using(KernelSwitches(pdl=False)):
        assert pdl.flags(CUDA0) == {"PDL": False}  # decided before any device query: runs without a GPU
    assert pdl.flags(torch.device("cpu")) == {"PDL": False}
