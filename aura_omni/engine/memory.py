"""How many KV blocks a stage gets, from its memory budget.

CUDA: `gpu_memory_utilization` is this stage's share of the device's *total* memory; the stage's
weights and its measured activation peak come out of that share and the rest is KV cache, so
several stages with shares summing to <= 1 coexist on one GPU (configs/aura_omni.yaml splits it).
CPU (or whenever `kv_cache_bytes` is set): the KV cache gets exactly `kv_cache_bytes`.
A budget that cannot hold one `max_model_len` sequence is refused with the numbers.
"""

import logging
from dataclasses import dataclass

import torch
from torch import nn

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.models.qwen3 import Qwen3Model

log = logging.getLogger(__name__)

GiB = 1 << 30
CPU_DEFAULT_KV_BYTES = 1 * GiB  # CPU default when kv_cache_bytes is not set (also capped by what max_num_seqs can use)


class KVBudgetError(ValueError):
    """The KV budget cannot hold one max_model_len sequence: the message has the numbers and the fix."""


def module_bytes(module: nn.Module) -> int:
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def kv_bytes_per_block(backbone: Qwen3Model, block_size: int, dtype: torch.dtype) -> int:
    cfg = backbone.config
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * block_size * elem


@dataclass
class KVPlan:
    num_blocks: int
    block_size: int
    weight_bytes: int
    activation_bytes: int
    kv_bytes: int

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def describe(self, config: EngineConfig) -> str:
        return (f"weights {self.weight_bytes / GiB:.2f} GiB, activations {self.activation_bytes / GiB:.2f} GiB, "
                f"KV cache {self.kv_bytes / GiB:.2f} GiB = {self.num_blocks} blocks x {self.block_size} = "
                f"{self.capacity_tokens} tokens, max concurrency {self.capacity_tokens / config.max_model_len:.2f}x "
                f"at max_model_len {config.max_model_len}")


def plan_kv_cache(config: EngineConfig, backbone: Qwen3Model, weights: nn.Module, dtype: torch.dtype,
                  device: torch.device, activation_bytes: int = 0, name: str = "stage") -> KVPlan:
    per_block = kv_bytes_per_block(backbone, config.block_size, dtype)
    weight_bytes = module_bytes(weights)
    if config.num_kv_blocks is not None:
        budget, source = config.num_kv_blocks * per_block, "num_kv_blocks"
    elif config.kv_cache_bytes is not None:
        budget, source = config.kv_cache_bytes, "kv_cache_bytes"
    elif device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        share = int(total * config.gpu_memory_utilization)
        budget = share - weight_bytes - activation_bytes
        source = (f"gpu_memory_utilization {config.gpu_memory_utilization} x {total / GiB:.1f} GiB "
                  f"- weights {weight_bytes / GiB:.2f} GiB - activations {activation_bytes / GiB:.2f} GiB")
        free, _ = torch.cuda.mem_get_info(device)
        if budget > free:
            log.warning("%s: KV budget %.2f GiB exceeds free device memory %.2f GiB (other stages?); using what is free",
                        name, budget / GiB, free / GiB)
            budget = int(free * 0.95)
    else:
        useful = config.max_num_seqs * -(-config.max_model_len // config.block_size) * per_block
        budget, source = min(CPU_DEFAULT_KV_BYTES, useful), "CPU default"
    num_blocks = max(0, budget // per_block)
    need = -(-config.max_model_len // config.block_size)
    if num_blocks < need:
        raise KVBudgetError(
            f"{name}: the KV cache budget ({source}: {max(budget, 0) / GiB:.3f} GiB = {num_blocks} blocks of "
            f"{config.block_size} tokens, {per_block} bytes each) cannot hold one max_model_len={config.max_model_len} "
            f"sequence ({need} blocks = {need * per_block / GiB:.3f} GiB). Raise the budget or lower max_model_len.")
    plan = KVPlan(num_blocks, config.block_size, weight_bytes, activation_bytes, num_blocks * per_block)
    log.info("%s: %s", name, plan.describe(config))
    return plan
