"""The GPU caching allocator's figures for this process: what it holds, and how often it went to the driver.

A step that finds no cached block of its size calls cudaMalloc; when that fails the allocator frees its cached blocks
(cudaFree, which waits for the whole device) and tries again (a retry). Counts that grow during a load are steps that
waited on the driver; a free or a retry holds every stage on the device."""

CALLS = {"malloc": "num_device_alloc", "free": "num_device_free", "retry": "num_alloc_retries"}


def allocator_stats() -> dict[str, dict[str, int]]:
    """device index (as a label) -> {"allocated", "reserved" bytes, and the CALLS counts}; {} where CUDA is unused."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    out = {}
    for device in range(torch.cuda.device_count()):
        stats = torch.cuda.memory_stats(device)
        if not stats.get("num_device_alloc"):  # a device this process never allocated on
            continue
        out[str(device)] = {"allocated": int(stats.get("allocated_bytes.all.current", 0)),
                            "reserved": int(stats.get("reserved_bytes.all.current", 0)),
                            **{call: int(stats.get(key, 0)) for call, key in CALLS.items()}}
    return out
