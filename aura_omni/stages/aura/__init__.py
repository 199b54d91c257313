"""The AURA (Qwen3-VL) stage: prompt turns -> prompt ids, vision embeddings cached per item, the engine under its loop."""
