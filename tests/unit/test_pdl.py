"""Programmatic dependent launch is only ever requested where it can work (layers/pdl.py)."""

import torch

from aura_omni.layers import pdl


def test_off_the_gpu_kernels_get_a_false_pdl_flag_and_no_launch_option():
    assert pdl.flags(torch.device("cpu")) == {"PDL": False}
    assert not pdl.enabled("cpu")


def test_the_environment_switch_turns_it_off_before_any_device_query(monkeypatch):
    from aura_omni import env

    monkeypatch.setattr(env, "_current", env.read({env.PDL: "0"}))
    assert not pdl.enabled(torch.device("cuda", 0))  # no CUDA query: runs on machines without a GPU
    assert pdl.flags(torch.device("cuda", 0)) == {"PDL": False}
