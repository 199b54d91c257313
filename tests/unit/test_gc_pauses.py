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


def test_what_the_background_warm_start_made_is_frozen_too(monkeypatch):
    """The graphs and grammar machinery made after ready live as long as the server: once they are made, they join
    the start-up objects out of later collections."""
    import time

    from fastapi.testclient import TestClient

    from aura_omni.deploy import parse_deploy_config
    from aura_omni.pipeline.runtime import Runtime
    from aura_omni.server.app import create_app

    deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [{"stage_id": 0, "model": "x"}]})
    made = []

    async def warm_up(self):
        return {}

    async def warm_after_ready(self):
        made.extend([] for _ in range(1000))  # lists are tracked by the collector

    monkeypatch.setattr(Runtime, "load", classmethod(lambda cls, deploy, **_: cls(deploy, {})))
    monkeypatch.setattr(Runtime, "warm_up", warm_up)
    monkeypatch.setattr(Runtime, "warm_after_ready", warm_after_ready)
    try:
        with TestClient(create_app(deploy, "served")):
            deadline = time.monotonic() + 5
            while not (made and gc.get_freeze_count() and id(made[0]) not in {id(o) for o in gc.get_objects()}):
                assert time.monotonic() < deadline, "the background warm start's objects were not frozen"
                time.sleep(0.05)
    finally:
        gc.unfreeze()
        if gc_pauses._on_collection in gc.callbacks:
            gc.callbacks.remove(gc_pauses._on_collection)
