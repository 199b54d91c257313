"""KV-cache blocks for the scheduler: who owns which block, and the prefix cache.

Prefix caching (only with `enable_prefix_caching`): a full, computed block is registered under a
hash chained from its parent block's hash, its token ids and the content hashes of multimodal items
that start inside it (so two prompts with the same placeholder ids but different images never
share). A new sequence reuses the longest chain of registered blocks. Freed blocks keep their hash
and stay reusable until they are handed out again (least recently freed first), so a repeated system
prompt or a growing conversation is not recomputed.

A registered block's token ids are kept packed, one bytes object a block (~100 bytes for 16 ids), not as a tuple: a
tuple held the prompt's own int objects alive, ~700 bytes a block, so the registry grew the server's memory by ~16
MB on the H200's 22,752 blocks while it filled, over the first ten minutes of load (docs/reliability.md).
"""

from array import array
from collections import OrderedDict

from aura_omni.engine.sequence import Sequence


def packed(token_ids: list[int]) -> bytes:
    """A block's token ids as one bytes object (4 bytes an id)."""
    return array("i", token_ids).tobytes()


def block_hash(parent: int | None, token_ids: bytes, contents: tuple[str, ...] = ()) -> int:
    return hash((parent, token_ids, contents))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # eviction order
        self.block_hash: list[int | None] = [None] * num_blocks
        self.block_tokens: list[bytes | None] = [None] * num_blocks  # packed ids: guards hash collisions
        self.cached: dict[int, int] = {}  # hash -> block
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from the cache / prompt tokens looked up, since start."""
        return self.prefix_hit_tokens / self.prefix_queried_tokens if self.prefix_queried_tokens else 0.0

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- hashing ---------------------------------------------------------------------------------------
    def _hash_of(self, seq: Sequence, k: int, parent: int | None) -> tuple[int, bytes]:
        bs = self.block_size
        ids = packed(seq.token_ids(k * bs, (k + 1) * bs))
        contents = ()
        if seq.mm is not None and seq.mm.content_hashes:
            contents = tuple(h for off, h in seq.mm.content_hashes if k * bs <= off < (k + 1) * bs)
        return block_hash(parent, ids, contents), ids

    def _match_prefix(self, seq: Sequence) -> tuple[list[int], list[int]]:
        """Registered blocks that hold seq's leading tokens (never the last token: it must be computed)."""
        if not self.enable_prefix_caching or not seq.cacheable:
            return [], []
        blocks, hashes, parent = [], [], None
        for k in range((seq.num_tokens - 1) // self.block_size):
            h, ids = self._hash_of(seq, k, parent)
            block = self.cached.get(h)
            if block is None or self.block_tokens[block] != ids:
                break
            blocks.append(block), hashes.append(h)
            parent = h
        return blocks, hashes

    # -- allocation ------------------------------------------------------------------------------------
    def _take_free(self) -> int:
        block, _ = self.free.popitem(last=False)
        h = self.block_hash[block]
        if h is not None:  # evict its prefix-cache entry
            if self.cached.get(h) == block:
                del self.cached[h]
            self.block_hash[block] = self.block_tokens[block] = None
        self.ref_counts[block] = 1
        return block

    def admit(self, seq: Sequence, token_budget: int) -> int:
        """Give a waiting sequence its cached prefix and blocks for its first chunk.

        Returns the number of tokens to compute this step (0 = does not fit; nothing changed).
        """
        hits, hashes = self._match_prefix(seq)
        cached_tokens = len(hits) * self.block_size
        n = min(seq.num_tokens - cached_tokens, token_budget)
        if n <= 0:
            return 0
        hits_free = sum(1 for b in hits if self.ref_counts[b] == 0)
        need = self.blocks_for(cached_tokens + n) - len(hits)
        if need > self.num_free - hits_free:
            return 0
        for b in hits:
            if self.ref_counts[b] == 0:
                del self.free[b]
            self.ref_counts[b] += 1
        seq.block_table = hits + [self._take_free() for _ in range(need)]
        seq.block_hashes = hashes
        seq.num_computed_tokens = seq.num_cached_tokens = cached_tokens
        if self.enable_prefix_caching and seq.cacheable:
            self.prefix_queried_tokens += seq.num_tokens
            self.prefix_hit_tokens += cached_tokens
        return n

    def grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Blocks for `num_new_tokens` more tokens of a running sequence; False (nothing changed) if none left."""
        need = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if need <= 0:  # most decode steps: the last block has room
            return True
        if need > self.num_free:
            return False
        seq.block_table.extend(self._take_free() for _ in range(need))
        return True

    def free_blocks(self, seq: Sequence) -> None:
        """Return a sequence's blocks (abort, finish, preemption). Its registered blocks stay reusable."""
        for b in reversed(seq.block_table):  # tail first, so shared prefixes are evicted last
            self.ref_counts[b] -= 1
            if self.ref_counts[b] == 0:
                self.free[b] = None
        seq.block_table, seq.block_hashes = [], []
        seq.num_computed_tokens = 0

    def forget(self, seq: Sequence) -> None:
        """Unregister the sequence's blocks from the prefix cache (their K/V may hold a numerical fault): no later
        prompt reuses them, and they go back as plain free blocks once no running sequence holds them."""
        for b in seq.block_table:
            h = self.block_hash[b]
            if h is not None and self.cached.get(h) == b:
                del self.cached[h]
            self.block_hash[b] = self.block_tokens[b] = None

    def commit(self, seq: Sequence) -> None:
        """After a step: register the sequence's newly full, computed blocks in the prefix cache (those whose token
        values are all known: a block holding a PENDING output waits for the next commit)."""
        if not self.enable_prefix_caching or not seq.cacheable:
            return
        parent = seq.block_hashes[-1] if seq.block_hashes else None
        for k in range(len(seq.block_hashes), min(seq.num_computed_tokens, seq.num_known_tokens) // self.block_size):
            h, ids = self._hash_of(seq, k, parent)
            block = seq.block_table[k]
            seq.block_hashes.append(h)
            if h not in self.cached and self.block_hash[block] is None:
                self.cached[h], self.block_hash[block], self.block_tokens[block] = block, h, ids
            parent = h
