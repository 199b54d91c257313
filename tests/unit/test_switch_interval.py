"""server/app.py: AURA_OMNI_SWITCH_INTERVAL_MS sets the interpreter lock's switch interval (an A/B knob)."""

import sys

from aura_omni.server import app


def test_the_switch_interval_knob_sets_the_interpreters_and_unset_leaves_it(monkeypatch):
    before = sys.getswitchinterval()
    try:
        monkeypatch.delenv(app.SWITCH_INTERVAL_ENV, raising=False)
        app.set_switch_interval()
        assert sys.getswitchinterval() == before
        monkeypatch.setenv(app.SWITCH_INTERVAL_ENV, "0.5")
        app.set_switch_interval()
        assert abs(sys.getswitchinterval() - 0.0005) < 1e-9
    finally:
        sys.setswitchinterval(before)
