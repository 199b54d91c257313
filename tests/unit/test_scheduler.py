"""Scheduler and block manager on plain data (no model): budgets, limits, preemption order, prefix blocks."""

from aura_omni.engine.block_manager import BlockManager
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.scheduler import Scheduler
from aura_omni.engine.sequence import Sequence, SequenceStatus


def setup(num_blocks=32, caching=False, **kw):
    cfg = EngineConfig(**{"max_model_len": 64, "block_size": 4, "max_num_batched_tokens": 16, "max_num_seqs": 3, **kw})
    bm = BlockManager(num_blocks, 4, caching)
    return Scheduler(cfg, bm), bm


def seq(n, rid="r", start=0) -> Sequence:
    return Sequence(rid, list(range(start, start + n)), SamplingParams(temperature=0))


def advance(sched_out, token=1):
    """What the engine does after a step: mark tokens computed, append a token where one was sampled."""
    for s in sched_out.scheduled:
        s.seq.num_computed_tokens = s.end
        if s.samples:
            s.seq.output_token_ids.append(token)


def test_token_budget_chunks_prefill_and_max_num_seqs_caps_running():
    sched, _ = setup()
    seqs = [seq(10, str(i)) for i in range(5)]
    for s in seqs:
        sched.add(s)
    out = sched.schedule()
    assert [(s.seq.request_id, s.num_tokens) for s in out.scheduled] == [("0", 10), ("1", 6)]
    assert not out.scheduled[1].samples  # a partial prefill yields no token
    advance(out)
    out = sched.schedule()  # decode of 0, the rest of 1, then 2 starts with what is left
    assert [(s.seq.request_id, s.num_tokens) for s in out.scheduled] == [("0", 1), ("1", 4), ("2", 10)]
    advance(out)
    out = sched.schedule()
    assert len(sched.running) == 3 and [s.seq.request_id for s in out.scheduled] == ["0", "1", "2"]
    assert out.is_decode


def test_out_of_blocks_preempts_the_newest_and_recomputes_it_later():
    sched, bm = setup(num_blocks=6)  # 24 tokens
    a, b = seq(8, "a"), seq(8, "b")
    sched.add(a), sched.add(b)
    advance(sched.schedule())
    for _ in range(5):  # each grows to 13 tokens: 4 blocks each, only 6 exist
        out = sched.schedule()
        advance(out)
    assert b.status == SequenceStatus.WAITING and b.num_preemptions >= 1
    assert b.block_table == [] and b.num_computed_tokens == 0
    assert sched.waiting[0] is b and a.status == SequenceStatus.RUNNING
    sched.finish(a, "stop")
    out = sched.schedule()  # b comes back and recomputes prompt + its outputs
    assert out.scheduled[0].seq is b and out.scheduled[0].num_tokens == b.num_tokens
    assert bm.num_free == 6 - len(b.block_table)


def test_waiting_requests_do_not_jump_the_queue():
    sched, _ = setup(num_blocks=5, max_num_batched_tokens=64)
    big, small = seq(18, "big"), seq(2, "small")
    running = seq(4, "run")
    sched.add(running)
    advance(sched.schedule())
    sched.add(big), sched.add(small)
    out = sched.schedule()  # big needs 5 blocks, 4 free: neither big nor the later small starts
    assert [s.seq.request_id for s in out.scheduled] == ["run"]


def test_prefix_blocks_are_shared_refcounted_and_kept_after_free():
    sched, bm = setup(caching=True)
    a = seq(10, "a")
    sched.add(a)
    advance(sched.schedule())
    bm.commit(a)
    b = seq(10, "b")
    sched.add(b)
    out = sched.schedule()
    mine = next(s for s in out.scheduled if s.seq is b)
    assert b.num_cached_tokens == 8 and mine.start == 8 and mine.num_tokens == 2
    assert b.block_table[:2] == a.block_table[:2] and bm.ref_counts[a.block_table[0]] == 2
    sched.finish(a, "stop"), sched.finish(b, "stop")
    assert bm.num_free == 32 and len(bm.cached) == 2  # freed, still reusable
    c = seq(9, "c")
    sched.add(c)
    sched.schedule()
    assert c.num_cached_tokens == 8


def test_a_hash_collision_never_shares_another_prompts_blocks(monkeypatch):
    from aura_omni.engine import block_manager

    monkeypatch.setattr(block_manager, "block_hash", lambda parent, ids, contents=(): 7)  # every block collides
    sched, bm = setup(caching=True)
    a = seq(10, "a")
    sched.add(a)
    advance(sched.schedule())
    bm.commit(a)
    b = seq(10, "b", start=100)  # other tokens, the same hash
    sched.add(b)
    sched.schedule()
    assert b.num_cached_tokens == 0 and not set(b.block_table) & set(a.block_table)
    c = seq(10, "c")  # a's own tokens are still found
    sched.add(c)
    sched.schedule()
    assert c.num_cached_tokens == 4  # its first block; its second hash is taken by that block


def test_a_registered_block_keeps_its_ids_packed_not_the_prompts_int_objects():
    sched, bm = setup(caching=True)
    a = Sequence("a", [100_000 + i for i in range(10)], SamplingParams(temperature=0))
    sched.add(a)
    advance(sched.schedule())
    bm.commit(a)
    kept = [bm.block_tokens[b] for b in a.block_table[:2]]
    assert all(isinstance(k, bytes) and len(k) == 4 * 4 for k in kept)  # 4 ids of 4 bytes a block


def test_a_waiting_sequence_is_no_work_while_every_seat_holds_a_row_waiting_for_input():
    cfg = EngineConfig(max_model_len=64, block_size=4, max_num_batched_tokens=16, max_num_seqs=2)
    starved: set[str] = set()
    sched = Scheduler(cfg, BlockManager(32, 4), ready=lambda s: s.request_id not in starved)
    a, b, c = seq(4, "a"), seq(4, "b"), seq(4, "c")
    for s in (a, b, c):
        sched.add(s)
    advance(sched.schedule())  # a and b take both seats; c waits
    starved |= {"a", "b"}  # both wait for their next input (the Talker's next text row)
    assert not sched.has_work() and sched.schedule().scheduled == []  # a step would run nothing: the loop sleeps
    starved.discard("a")
    assert sched.has_work()
    starved.add("a")
    sched.finish(b, "stop")  # a seat frees: c can run
    assert sched.has_work() and [s.seq for s in sched.schedule().scheduled] == [c]
