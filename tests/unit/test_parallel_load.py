"""The stages of one process load on a thread each (`parallel_load`, the default): the same stages as one after
another, and a stage that fails to load takes the others' loops down with it."""

import os
import threading
from pathlib import Path

import pytest

from aura_omni.deploy import ASR, AURA, TALKER
from aura_omni.deploy.loading import load_deploy_config
from aura_omni.pipeline.runtime import Runtime

TINY = os.environ.get("AURA_OMNI_TINY_DIR")
pytestmark = pytest.mark.skipif(not TINY or not (Path(TINY or ".") / "deploy_demo.yaml").exists(),
                                reason="needs `aura-omni make-tiny $AURA_OMNI_TINY_DIR`")


def stage_threads() -> set[str]:
    """The stage loops' threads (the process's one watchdog aside)."""
    return {t.name for t in threading.enumerate() if t.name.startswith("stage-") and t.name != "stage-watchdog"}


def kv_blocks(runtime: Runtime) -> dict[str, int]:
    return {role: m.engine.runner.num_blocks for role, m in runtime.models.items() if hasattr(m, "engine")}


def test_parallel_and_serial_loads_give_the_same_stages():
    deploy = load_deploy_config(Path(TINY) / "deploy_demo.yaml")
    assert deploy.parallel_load
    before = stage_threads()
    parallel = Runtime.load(deploy)
    serial = Runtime.load(deploy.model_copy(update={"parallel_load": False}))
    try:
        assert set(parallel.models) == set(serial.models) == {ASR, AURA, TALKER}
        assert kv_blocks(parallel) == kv_blocks(serial) and kv_blocks(parallel)
    finally:
        for runtime in (parallel, serial):
            for model in runtime.models.values():
                model.close()
    assert stage_threads() <= before


def test_a_stage_that_fails_to_load_closes_the_others():
    deploy = load_deploy_config(Path(TINY) / "deploy_demo.yaml")
    stages = list(deploy.stages)
    stages[1] = stages[1].model_copy(update={"model": str(Path(TINY) / "no_such_checkpoint")})
    deploy = deploy.model_copy(update={"stages": stages})
    before = stage_threads()
    with pytest.raises(Exception, match="no_such_checkpoint"):
        Runtime.load(deploy)
    assert stage_threads() <= before  # the ASR and Talker stages that loaded let go of their loops
