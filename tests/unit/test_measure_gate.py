"""Stages loading in parallel measure the device one at a time, while no other loading thread allocates."""

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from aura_omni.layers.measure_gate import MeasureGate, measuring


class Device:
    """Counts the threads in an allocating section and the ones measuring; records what a measurement saw."""

    def __init__(self):
        self.lock = threading.Lock()
        self.allocating = 0
        self.measuring = 0
        self.seen: list[tuple[str, int, int]] = []  # (who, others allocating, others measuring)

    def allocate(self, seconds: float) -> None:
        with self.lock:
            self.allocating += 1
        time.sleep(seconds)
        with self.lock:
            self.allocating -= 1

    def measure(self, who: str) -> None:
        with self.lock:
            self.measuring += 1
            snapshot = (self.allocating, self.measuring - 1)
        time.sleep(0.01)  # a measurement takes a while: an overlapping one would be seen
        with self.lock:
            self.measuring -= 1
            self.seen.append((who, *snapshot))


def load(gate: MeasureGate, device: Device, who: str, rng: random.Random, measures: int = 1, fail: bool = False):
    with gate.loading():
        for i in range(measures):
            for _ in range(rng.randint(1, 4)):
                device.allocate(rng.uniform(0, 0.02))  # weights, compiles, captures
            if fail:
                raise RuntimeError(f"{who} failed to load")
            with measuring():
                device.measure(f"{who}#{i}")
        device.allocate(rng.uniform(0, 0.02))
        return who


@pytest.mark.parametrize("seed", range(5))
def test_measurements_take_turns_and_see_no_allocation(seed):
    rng, device, gate = random.Random(seed), Device(), MeasureGate()
    plan = {"asr": 1, "aura": 1, "talker": 2, "code2wav": 0}  # the Talker's stage measures twice, Code2Wav never
    with ThreadPoolExecutor(len(plan)) as pool:
        futures = [pool.submit(load, gate, device, who, random.Random(rng.random()), n) for who, n in plan.items()]
    assert [f.result(timeout=10) for f in futures] == list(plan)
    assert sorted(who for who, _, _ in device.seen) == ["asr#0", "aura#0", "talker#0", "talker#1"]
    assert all((a, m) == (0, 0) for _, a, m in device.seen), device.seen


def test_a_member_that_fails_does_not_hold_the_others():
    device, gate = Device(), MeasureGate()
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(load, gate, device, who, random.Random(i), 1, who == "aura")
                   for i, who in enumerate(["asr", "aura", "talker"])]
    assert futures[0].result(timeout=10) == "asr" and futures[2].result(timeout=10) == "talker"
    with pytest.raises(RuntimeError, match="aura failed"):
        futures[1].result(timeout=10)
    assert all((a, m) == (0, 0) for _, a, m in device.seen)


def test_outside_a_parallel_load_measuring_does_nothing():
    device = Device()
    with measuring():
        device.measure("alone")
    assert device.seen == [("alone", 0, 0)]
