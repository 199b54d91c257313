"""The stage loop: one thread steps the engine; adds and aborts are queued between steps; outputs reach each
request's queue; a failed step fails its requests, not the loop; counters are read without waiting for a step."""

import asyncio
import threading
import time

import pytest
import torch
from engine_tiny_lm import prompts, tiny_lm

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.stages.llm import EngineRequest, LLMStageEngine
from aura_omni.stages.stage_engine import StageError, StageUnavailable
from aura_omni.stages.loop import StageLoop

CFG = dict(max_model_len=48, block_size=4, num_kv_blocks=64, max_num_batched_tokens=64, max_num_seqs=8)
PROMPT = prompts([6])[0]


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=n)


@pytest.fixture
def stage():
    eng = LLMEngine(tiny_lm(), EngineConfig(**CFG))
    loop = StageLoop(LLMStageEngine(eng, lambda r: EngineRequest(*r)), name="lm")
    yield eng, loop
    loop.close()


@pytest.fixture(scope="module")
def free_run() -> list[int]:
    return LLMEngine(tiny_lm(), EngineConfig(**CFG)).generate([PROMPT], greedy(12))[0]


async def tokens(loop: StageLoop, rid: str, prompt, n: int) -> list[int]:
    got = []
    async for out in loop.submit(rid, (prompt, greedy(n))):
        assert len(out.new_token_ids) == 1  # streamed token by token
        got += out.new_token_ids
    return got


def test_concurrent_requests_stream_and_leaving_early_frees_blocks(stage, free_run):
    eng, loop = stage
    start_free = eng.blocks.num_free

    async def leave_midway():
        async for out in loop.submit("c", (prompts([20])[0], greedy(40))):
            if out.num_output_tokens == 2:
                break  # the client went away

    async def main():
        return await asyncio.gather(tokens(loop, "a", PROMPT, 12), tokens(loop, "b", prompts([9])[0], 5),
                                    leave_midway())

    a, b, _ = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert a == free_run and len(b) == 5
    deadline = time.monotonic() + 5
    while (eng.blocks.num_free != start_free or eng.has_unfinished()) and time.monotonic() < deadline:
        time.sleep(0.01)  # the abort is applied by the loop before its next step
    assert eng.blocks.num_free == start_free and not eng.has_unfinished()


def test_a_bad_request_fails_alone(stage, free_run):
    _, loop = stage

    async def main():
        good = asyncio.ensure_future(tokens(loop, "a", PROMPT, 12))
        with pytest.raises(ValueError):  # longer than max_model_len
            await tokens(loop, "bad", list(range(48)), 4)
        return await good

    assert asyncio.run(asyncio.wait_for(main(), timeout=60)) == free_run


def test_submit_does_not_wait_for_a_running_step(stage):
    eng, loop = stage
    released = threading.Event()
    original_step = eng.step

    def slow_step():
        released.wait(5)  # a long prefill chunk holds the engine
        return original_step()

    eng.step = slow_step

    async def main():
        first = loop.submit("a", (PROMPT, greedy(2)))
        task = asyncio.ensure_future(anext(first))
        await asyncio.sleep(0.05)  # the loop thread is now inside slow_step
        t = time.monotonic()
        second = loop.submit("b", (PROMPT, greedy(2)))
        pending = asyncio.ensure_future(anext(second))
        await asyncio.sleep(0)
        queued_s = time.monotonic() - t
        counters = loop.counters  # read while the step runs
        released.set()
        await task
        await pending
        await first.aclose()
        await second.aclose()
        return queued_s, counters

    queued_s, counters = asyncio.run(asyncio.wait_for(main(), timeout=30))
    assert queued_s < 0.5 and counters.alive


def test_a_failed_step_fails_its_requests_and_the_loop_serves_the_next(stage, free_run):
    eng, loop = stage
    original_step = eng.step
    calls = {"n": 0}

    def failing_once():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected")
        return original_step()

    eng.step = failing_once
    with pytest.raises(StageError, match="injected"):
        list(loop.run("a", (PROMPT, greedy(4))))
    assert list(t for out in loop.run("b", (PROMPT, greedy(12))) for t in out.new_token_ids) == free_run
    assert not eng.has_unfinished() and loop.counters.steps > 0


def test_close_fails_waiting_requests_and_refuses_new_ones(stage):
    eng, loop = stage
    eng.step = lambda: time.sleep(0.05) or []  # never finishes anything
    it = loop.run("a", (PROMPT, greedy(4)))
    t = threading.Thread(target=lambda: (time.sleep(0.2), loop.close()))
    t.start()
    with pytest.raises(StageError, match="shut down"):
        list(it)
    t.join()
    with pytest.raises(StageError):
        list(loop.run("b", (PROMPT, greedy(4))))
    assert not loop.counters.alive


def test_an_injected_step_fault_fails_the_requests_in_that_step_only(stage, free_run):
    eng, loop = stage
    eng_step = eng.step
    eng.step = lambda: time.sleep(0.02) or eng_step()  # slow enough to inject while "a" runs
    it = loop.run("a", (PROMPT, greedy(40)))
    next(it)
    loop.inject_fault("step")
    with pytest.raises(StageError, match="injected step fault"):
        list(it)
    eng.step = eng_step
    assert list(t for out in loop.run("b", (PROMPT, greedy(12))) for t in out.new_token_ids) == free_run
    assert loop.settle() and loop.counters.alive and loop.counters.engine["free_blocks"] == CFG["num_kv_blocks"]


def _running(eng, loop):
    """Request "a" running on slowed steps (a fault can be injected while it runs), and an event set when the loop
    dies -> (its outputs, the event, the engine's own step to put back)."""
    died = threading.Event()
    loop.on_death = lambda lp, cause: died.set()
    eng_step = eng.step
    eng.step = lambda: time.sleep(0.02) or eng_step()
    it = loop.run("a", (PROMPT, greedy(40)))
    next(it)
    return it, died, eng_step


def test_a_killed_loop_fails_its_requests_at_once_is_down_and_restarts(stage, free_run):
    eng, loop = stage
    it, died, eng_step = _running(eng, loop)
    start = time.monotonic()
    loop.inject_fault("kill")
    with pytest.raises(StageUnavailable, match="down"):
        list(it)
    assert time.monotonic() - start < 0.5 and died.wait(1)
    assert not loop.counters.alive and loop.counters.in_flight == 0
    assert loop.counters.engine["free_blocks"] == CFG["num_kv_blocks"]  # the killed request's blocks came back
    with pytest.raises(StageUnavailable):  # refused at once while down, not queued behind a dead thread
        list(loop.run("b", (PROMPT, greedy(4))))
    eng.step = eng_step
    assert loop.restart() and not loop.restart()
    assert list(t for out in loop.run("c", (PROMPT, greedy(12))) for t in out.new_token_ids) == free_run
    assert loop.counters.alive and loop.counters.restarts == 1


def test_a_gpu_failure_in_a_step_takes_the_loop_down_for_good(stage):
    """A CUDA error that poisons the GPU context (a device-side assert) cannot be retried: the loop goes down as
    from a kill, says `device_lost`, and is never restarted."""
    eng, loop = stage
    it, died, _ = _running(eng, loop)
    loop.inject_fault("device")
    with pytest.raises(StageUnavailable, match="GPU failed"):
        list(it)
    assert died.wait(1) and loop.device_lost is not None
    stats = loop.stats()
    assert stats["device_lost"] and not stats["alive"] and stats["free_blocks"] == CFG["num_kv_blocks"]
    assert not loop.restart() and not loop.counters.alive
    with pytest.raises(StageUnavailable):
        list(loop.run("b", (PROMPT, greedy(4))))


def test_a_gpu_failure_reported_by_an_add_takes_the_loop_down_too():
    """A CUDA error surfacing while a request is taken takes the loop down too; a bad request's own error still
    fails that request alone."""
    class _Engine(_RecordingEngine):
        def add(self, request_id, request):
            if request == "assert":  # a CUDA error surfaces at the next call, whichever request made it
                raise torch.AcceleratorError("CUDA error: device-side assert triggered")
            if request == "bad":
                raise ValueError("bad request")
            super().add(request_id, request)

    loop = StageLoop(_Engine(), name="rec")
    try:
        with pytest.raises(ValueError):
            list(loop.run("x", "bad"))
        assert loop.counters.alive and loop.device_lost is None
        with pytest.raises(StageUnavailable, match="GPU failed"):
            list(loop.run("y", "assert"))
        assert loop.device_lost is not None and not loop.restart()
    finally:
        loop.close()


@pytest.mark.parametrize("error, lost", [
    (RuntimeError("CUDA error: an illegal memory access was encountered"), True),
    (torch.AcceleratorError("CUDA error: device-side assert triggered"), True),
    (StageError("stage talker failed: AcceleratorError: CUDA error: unspecified launch failure"), True),
    (RuntimeError("CUDA error: out of memory"), False),  # the allocator recovers: that request fails alone
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
    (ValueError("device-side assert triggered"), False),  # not an error torch raised
])
def test_which_errors_lose_the_device(error, lost):
    from aura_omni.layers.device_loss import is_device_lost

    wrapped = StageError("stage failed")
    wrapped.__cause__ = error
    assert is_device_lost(error) is lost and is_device_lost(wrapped) is lost


def test_call_runs_on_the_loop_thread_between_steps_and_returns_or_raises(stage):
    eng, loop = stage
    where = loop.call(lambda: (threading.current_thread().name, eng.stats()["running"])).result(5)
    assert where == ("stage-lm", 0)
    with pytest.raises(ZeroDivisionError):
        loop.call(lambda: 1 / 0).result(5)
    loop.close()
    with pytest.raises(StageUnavailable):
        loop.call(lambda: None)


def test_a_call_whose_caller_stopped_waiting_still_runs_and_the_loop_goes_on(stage):
    eng, loop = stage
    gate, ran = threading.Event(), []
    blocker = loop.call(lambda: gate.wait(5))
    for fn in (lambda: ran.append(1), lambda: 1 / 0):  # a result and an error nobody waits for
        loop.call(fn).cancel()
    gate.set()
    blocker.result(5)
    assert loop.call(lambda: "alive").result(5) == "alive" and ran == [1]


class _Countdown:
    """Each request gets one output per step for its `n` steps."""

    def __init__(self):
        self.left: dict[str, int] = {}

    def add(self, rid, n):
        self.left[rid] = n

    def abort(self, rid):
        self.left.pop(rid, None)

    def has_work(self):
        return bool(self.left)

    def step(self):
        from aura_omni.stages.stage_engine import StageOutput

        outs = []
        for rid in list(self.left):
            self.left[rid] -= 1
            outs.append(StageOutput(rid, self.left[rid], self.left[rid] == 0))
            if not self.left[rid]:
                del self.left[rid]
        return outs

    def stats(self):
        return {}


def test_a_step_wakes_the_callers_event_loop_once_for_all_its_requests():
    loop = StageLoop(_Countdown(), name="countdown")

    async def main():
        ev = asyncio.get_running_loop()
        wakes, post = [], ev.call_soon_threadsafe
        ev.call_soon_threadsafe = lambda *a: wakes.append(1) or post(*a)
        busy = loop.call(lambda: time.sleep(0.1))  # the 8 requests are taken in one drain

        async def collect(rid):
            return [item async for item in loop.submit(rid, 3)]

        got = await asyncio.gather(*(collect(f"r{i}") for i in range(8)))
        busy.result()
        return got, len(wakes)

    try:
        got, wakes = asyncio.run(main())
    finally:
        loop.close()
    assert got == [[2, 1, 0]] * 8
    assert wakes <= 4  # one per step (3), not one per output (24)


def test_work_that_runs_past_the_stall_limit_is_reported_with_its_stack(stage, caplog):
    _, loop = stage
    loop.stall_s = 0.3
    release = threading.Event()

    def blocked_in_the_engine():
        release.wait(10)

    future = loop.call(blocked_in_the_engine)
    deadline = time.monotonic() + 5
    while "stalled_s" not in loop.stats() and time.monotonic() < deadline:
        time.sleep(0.02)
    stats = loop.stats()
    assert stats["stalled_in"] == "call" and stats["stalled_s"] >= 0.3
    deadline = time.monotonic() + 5  # the watchdog looks once a second
    while "blocked_in_the_engine" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "stage lm: stalled" in caplog.text and "blocked_in_the_engine" in caplog.text
    release.set()
    future.result(5)
    assert "stalled_s" not in loop.stats() and loop.busy_for() is None


def test_queue_and_first_output_latencies_are_observed_and_nothing_is_kept_per_request(stage, free_run):
    _, loop = stage
    release = threading.Event()
    busy = loop.call(lambda: release.wait(10))  # the loop is busy: the next request waits in its inbox

    async def main():
        later = asyncio.ensure_future(tokens(loop, "a", PROMPT, 12))
        await asyncio.sleep(0.2)
        release.set()
        return await later

    assert asyncio.run(asyncio.wait_for(main(), timeout=60)) == free_run
    busy.result(5)
    got = loop.latencies()
    assert got["queue"].count == 1 and got["queue"].total >= 0.2
    assert got["first_output"].count == 1 and got["first_output"].total >= got["queue"].total
    assert got["queue"].buckets[-1] == (float("inf"), 1)
    assert got["add"].count == 1 and got["add"].total < got["queue"].total  # the loop's own time, apart
    assert got["step"].count >= 12 and got["step"].total <= got["first_output"].total + 60  # one per step

    async def bad_then_left():
        with pytest.raises(ValueError):  # refused by the engine: no output, nothing kept
            await tokens(loop, "bad", list(range(48)), 4)
        async for _ in loop.submit("gone", (PROMPT, greedy(8))):
            break  # left at its first output

    asyncio.run(asyncio.wait_for(bad_then_left(), timeout=60))
    loop.settle()
    assert loop.latency.submitted == {} and loop.latencies()["first_output"].count == 2


class _StuckOnce(_Countdown):
    """A step that hangs the first time (a kernel that never ends) until `release`."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def step(self):
        self.release.wait(20)
        return super().step()


def test_a_stalled_loop_fails_its_requests_refuses_new_ones_and_recovers():
    engine = _StuckOnce()
    loop = StageLoop(engine, name="stuck", stall_s=0.3)
    try:
        async def main():
            t0 = time.monotonic()
            with pytest.raises(StageUnavailable, match="stalled"):
                async for _ in loop.submit("a", 3):
                    pass
            waited = time.monotonic() - t0
            with pytest.raises(StageUnavailable, match="stalled"):  # refused at once while stalled
                async for _ in loop.submit("b", 1):
                    pass
            return waited

        waited = asyncio.run(asyncio.wait_for(main(), timeout=20))
        assert 0.3 <= waited < 2.5  # the watchdog looks once a second
        assert "stalled_s" in loop.stats()
        engine.release.set()
        deadline = time.monotonic() + 5
        while (loop.stats().get("stalled_s") or engine.left) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "stalled_s" not in loop.stats() and engine.left == {}  # the failed request was aborted in the engine

        async def again():
            return [item async for item in loop.submit("c", 2)]

        assert asyncio.run(asyncio.wait_for(again(), timeout=10)) == [1, 0]
    finally:
        engine.release.set()
        loop.close()


def test_a_slow_step_or_add_is_logged_and_serving_tightens_the_limit_on_a_gpu(stage, caplog):
    """During the warm start (compiles, captures) a slow step is information; once serving, a warning."""
    import logging

    from aura_omni.stages import loop as loop_module

    eng, loop = stage
    assert loop.slow_s == loop_module.SLOW_S
    loop.slow_s = 0.05
    inner_add, inner_step = loop.engine.add, loop.engine.step
    loop.engine.add = lambda *a: time.sleep(0.1) or inner_add(*a)
    loop.engine.step = lambda: time.sleep(0.1) or inner_step()
    with caplog.at_level(logging.INFO, logger="aura_omni.stages.loop"):
        assert len(list(loop.run("a", (PROMPT, greedy(2))))) == 2
    assert {r.levelno for r in caplog.records if "took" in r.getMessage()} == {logging.INFO}
    caplog.clear()
    loop.serving()
    assert loop.slow_s == 0.05  # the CPU keeps its limit: a real model's step takes seconds there
    with caplog.at_level(logging.WARNING, logger="aura_omni.stages.loop"):
        assert len(list(loop.run("b", (PROMPT, greedy(2))))) == 2
    assert "stage lm: taking request b took" in caplog.text and "stage lm: a step took" in caplog.text


class _RecordingEngine:
    """Each request takes 10 ms to add and one step to finish; the loop's calls are recorded in order."""

    def __init__(self):
        self.log, self.running = [], []

    def add(self, request_id, request):
        time.sleep(0.01)
        self.log.append(("add", request_id))
        self.running.append(request_id)

    def abort(self, request_id):
        self.log.append(("abort", request_id))
        if request_id in self.running:
            self.running.remove(request_id)

    def has_work(self):
        return bool(self.running)

    def step(self):
        from aura_omni.stages.stage_engine import StageOutput

        self.log.append(("step", tuple(self.running)))
        done, self.running = self.running, []
        return [StageOutput(rid, None, True) for rid in done]

    def stats(self):
        return {}


def test_a_burst_of_adds_is_taken_whole_before_the_next_step():
    """A burst is taken whole before the next step (a budget that stepped between its adds cost the H200 throughput
    under load, session 14), in order: an abort queued after the burst comes after its adds."""
    engine, release = _RecordingEngine(), threading.Event()
    loop = StageLoop(engine, name="burst")
    try:
        held = loop.call(release.wait)  # the loop thread waits here while the burst queues
        for i in range(6):
            loop.add(f"r{i}", None, lambda out: None)
        loop.abort("r5")
        release.set()
        held.result(timeout=5)
        assert loop.settle()
    finally:
        loop.close()
    adds = [rid for op, rid in engine.log if op == "add"]
    steps = [rids for op, rids in engine.log if op == "step"]
    assert adds == [f"r{i}" for i in range(6)]
    assert engine.log.index(("abort", "r5")) > engine.log.index(("add", "r5"))
    assert steps == [tuple(f"r{i}" for i in range(5))]  # one step, r5 aborted before it


def test_an_engine_that_would_rather_wait_is_stepped_after_its_wait_or_when_a_request_comes():
    """`ready_in`: the loop holds the step that long (settle still returns: what was queued is applied); a request
    arriving meanwhile wakes the loop, which asks again."""

    class Waiting(_RecordingEngine):
        hold_s = 0.3

        def add(self, request_id, request):
            super().add(request_id, request)
            self.since = time.monotonic()

        def ready_in(self):  # two requests fill a step; one waits hold_s from its arrival
            return 0.0 if len(self.running) >= 2 else max(0.0, self.since + self.hold_s - time.monotonic())

    engine = Waiting()
    loop = StageLoop(engine, name="waiting")
    try:
        t0 = time.monotonic()
        loop.add("a", None, lambda out: None)
        assert loop.settle() and engine.log == [("add", "a")]  # applied, not yet stepped
        time.sleep(0.05)
        loop.add("b", None, lambda out: None)  # a second request: the engine is ready at once
        assert loop.settle() and engine.log[-1] == ("step", ("a", "b"))
        assert time.monotonic() - t0 < Waiting.hold_s
        engine.hold_s = 0.1
        loop.add("c", None, lambda out: None)
        time.sleep(0.4)
        assert engine.log[-1] == ("step", ("c",))  # stepped after its wait, alone
    finally:
        loop.close()


def test_each_steps_wait_for_the_device_is_observed_apart_from_its_host_time():
    """What a step's thread waited in `wait_event` (a GPU result) is the step's `device_wait`; a loop whose steps
    never wait (a CPU stage) observes none."""
    from aura_omni.layers.device import device_wait_s, wait_event

    class Result:  # stands for a CUDA event: its synchronize is the device's time still to run
        def synchronize(self):
            time.sleep(0.03)

    class Waiting(_RecordingEngine):
        def step(self):
            time.sleep(0.01)  # the host's part
            wait_event(Result())
            return super().step()

    mine = device_wait_s()
    for engine, waits in ((Waiting(), True), (_RecordingEngine(), False)):
        loop = StageLoop(engine, name="waits")
        try:
            for i in range(3):
                assert list(loop.run(f"r{i}", None)) == [None]
        finally:
            loop.close()
        got = loop.latencies()
        assert got["step"].count == 3
        if waits:
            assert got["device_wait"].count == 3 and 0.09 <= got["device_wait"].total < got["step"].total - 0.025
        else:
            assert got["device_wait"].count == 0
    assert device_wait_s() == mine  # the waits were the loop thread's, not this one's
