import numpy as np
import torch

from aura_omni.media.vision_preprocess import preprocess_image, preprocess_video
from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM
from aura_omni.stages.aura.vision_cache import VisionEmbeddingCache
from aura_omni.testing.tiny_vl import write_tiny_aura


def test_cached_items_equal_fresh_encoding_and_skip_the_encoder(tmp_path):
    model = Qwen3VLForCausalLM.from_pretrained(write_tiny_aura(tmp_path / "aura"))
    rng = np.random.RandomState(0)
    a = preprocess_image(rng.randint(0, 256, (64, 96, 3), dtype=np.uint8))
    b = preprocess_video(rng.randint(0, 256, (4, 64, 64, 3), dtype=np.uint8), video_fps=2.0)
    calls = []
    cache = VisionEmbeddingCache(lambda items: calls.append(len(items)) or model.encode_vision(items))
    with torch.inference_mode():
        fresh = model.encode_vision([a, b])
        first = cache([a])
        both = cache([a, b])  # a from the cache, b encoded
        again = cache([b, a])
    assert calls == [1, 1]
    assert torch.allclose(both[0], fresh[0], atol=1e-5)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(both[1], fresh[1]))
    assert torch.equal(again[0][: b.num_tokens], both[0][a.num_tokens:]) and torch.equal(first[0], both[0][: a.num_tokens])
    assert (cache.hits, cache.misses) == (3, 2)


def test_entries_own_their_memory():
    """An entry must not pin the batch it was encoded with (views would keep evicted siblings alive)."""
    def encode(items):
        rows = sum(v.num_tokens for v in items)
        return torch.ones(rows, 8), [torch.ones(rows, 8)]

    class Item:
        def __init__(self, n, key):
            self.num_tokens, self.content_key = n, key

    cache = VisionEmbeddingCache(encode, max_items=1)
    cache([Item(1000, "big"), Item(4, "small")])  # "big" is evicted, "small" stays
    embeds, deepstack = cache._items["small"]
    assert embeds.untyped_storage().nbytes() == 4 * 8 * 4 and deepstack[0].untyped_storage().nbytes() == 4 * 8 * 4
