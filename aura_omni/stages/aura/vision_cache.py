"""Vision-encoder outputs kept per media item, so a conversation's earlier frames are not re-encoded.

The engine's prefix cache already skips the LM prefill of a repeated history; without this cache the
vision encoder would still run on every image/video of that history each turn. Keys are content hashes
of the exact preprocessed pixels, so two different images never share an entry.
"""

import threading
from collections import OrderedDict

import torch

from aura_omni.engine.prompts import vision_key
from aura_omni.media.vision_preprocess import VisionInput


class VisionEmbeddingCache:
    def __init__(self, encode, max_items: int = 64):
        self.encode = encode  # list[VisionInput] -> (embeds [sum tokens, H], [deepstack [sum tokens, H], ...])
        self.max_items = max_items
        self._items: OrderedDict[str, tuple[torch.Tensor, list[torch.Tensor]]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __call__(self, items: list[VisionInput]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        keys = [vision_key(v) for v in items]
        with self._lock:
            found = {k: self._items[k] for k in keys if k in self._items}
            for k in found:
                self._items.move_to_end(k)
        missing = [(k, v) for k, v in zip(keys, items) if k not in found]
        self.hits += len(items) - len(missing)
        self.misses += len(missing)
        if missing:
            embeds, deepstack = self.encode([v for _, v in missing])
            offset = 0
            for k, v in missing:
                n = v.num_tokens
                # copies, not views: a view would keep the whole batch's tensors alive after its siblings' eviction
                found[k] = (embeds[offset:offset + n].clone(), [d[offset:offset + n].clone() for d in deepstack])
                offset += n
            with self._lock:
                for k, _ in missing:
                    self._items[k] = found[k]
                while len(self._items) > self.max_items:
                    self._items.popitem(last=False)
        parts = [found[k] for k in keys]
        return (torch.cat([p[0] for p in parts]),
                [torch.cat([p[1][i] for p in parts]) for i in range(len(parts[0][1]))])
