"""server/gc_pauses.py: after the warm start the start-up objects are frozen out of garbage collection, and every
collection's pause is timed by generation; a long one is logged (it stalls every thread at once)."""

import gc
import logging
import weakref

import pytest

from aura_omni.server import gc_pauses


@pytest.fixture
def watched(monkeypatch):
    monkeypatch.setattr(gc_pauses, "_pauses", {g: gc_pauses.LatencyHistogram() for g in range(3)})
    gc_pauses.watch()
    gc_pauses.watch()  # idempotent
    yield
    gc.callbacks.remove(gc_pauses._on_collection)


def test_collections_are_timed_by_generation_and_a_long_one_is_warned(watched, monkeypatch, caplog):
    assert gc.callbacks.count(gc_pauses._on_collection) == 1
    gc.collect(0)
    gc.collect(2)
    got = gc_pauses.snapshot()
    assert got[0].count >= 1 and got[2].count >= 1 and got[2].total > 0
    monkeypatch.setattr(gc_pauses, "LONG_PAUSE_S", 0.0)  # every pause is "long" now
    with caplog.at_level(logging.WARNING, logger="aura_omni.server.gc_pauses"):
        gc.collect(1)
    assert "garbage collection of generation 1 held every thread" in caplog.text


class _Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the collector frees it


def test_freeze_leaves_the_objects_alive_now_out_of_later_collections():
    """Garbage of the start-up is collected first (not frozen with the rest); what is alive then is no longer among
    the objects a collection examines, while objects made later still are."""
    cycle = weakref.ref(_Node())  # unreachable already, freed only by a collection
    try:
        kept = [[] for _ in range(1000)]  # lists are tracked by the collector
        assert gc_pauses.freeze() >= len(kept) and gc.get_freeze_count() >= len(kept)
        assert cycle() is None
        examined = {id(o) for o in gc.get_objects()}
        assert not any(id(k) in examined for k in kept)
        later = []
        assert id(later) in {id(o) for o in gc.get_objects()}
    finally:
        gc.unfreeze()
    assert id(kept[0]) in {id(o) for o in gc.get_objects()}  # unfrozen: examined again


def test_freeze_can_be_turned_off_for_an_a_b_run():
    from aura_omni.deploy import parse_deploy_config

    deploy = parse_deploy_config({"pipeline": "qwen3_tts", "gc_freeze": False,
                                  "stages": [{"stage_id": 0, "model": "m"}, {"stage_id": 1, "model": "m"}]})
    try:
        assert gc_pauses.freeze(deploy.gc_freeze) == 0 and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
