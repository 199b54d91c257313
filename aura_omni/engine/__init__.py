"""The engine that drives every autoregressive stage: sequences, scheduler, paged KV cache, runner."""
