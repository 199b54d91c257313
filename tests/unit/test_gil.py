"""The server sets the interpreter lock's switch interval from its deploy file (server/gil.py)."""

import sys

import pytest

from aura_omni.deploy import parse_deploy_config
from aura_omni.deploy.schema import DeployConfigError
from aura_omni.pipeline.runtime import Runtime
from aura_omni.server.app import create_app


def test_the_app_takes_its_switch_interval_from_the_deploy():
    before = sys.getswitchinterval()
    try:
        deploy = parse_deploy_config({"pipeline": "aura_omni", "gil_switch_interval_ms": 0.25,
                                      "stages": [{"stage_id": 0, "model": "x"}]})
        create_app(deploy, "served", runtime=Runtime(deploy, {}))
        assert sys.getswitchinterval() == 0.00025
        default = parse_deploy_config({"pipeline": "aura_omni", "stages": [{"stage_id": 0, "model": "x"}]})
        create_app(default, "served", runtime=Runtime(default, {}))
        assert sys.getswitchinterval() == 0.0005
    finally:
        sys.setswitchinterval(before)


def test_a_switch_interval_out_of_bounds_is_refused_with_its_key_named():
    for bad in (0, -1, 1000):
        with pytest.raises(DeployConfigError, match="gil_switch_interval_ms"):
            parse_deploy_config({"pipeline": "aura_omni", "gil_switch_interval_ms": bad,
                                 "stages": [{"stage_id": 0, "model": "x"}]})
