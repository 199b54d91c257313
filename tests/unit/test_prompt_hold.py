"""The ASR stage's prompt hold (stages/asr/prompt_hold.py): clips added while others decode wait to share a prompt
step only while the delay they would add to the decoding clips outweighs their wait, never past the limit, never
while nothing decodes, nor when no other clip is likely to come meanwhile, nor when clips come faster than steps end,
and the transcripts are those of clips taken at once."""

import dataclasses

import numpy as np
import pytest

from aura_omni.deploy import DeployConfigError, parse_deploy_config
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.stages.asr.prompt_hold import PromptHold
from aura_omni.stages.asr.service import AsrJob, AsrService, AsrStageEngine
from aura_omni.stages.deploy_settings import engine_config
from aura_omni.testing.tiny_asr import write_tiny_asr

SR = 16000


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def measured(factor=0.5, max_hold_s=0.1, prompt=0.027, decode=0.0046, gap=0.005) -> PromptHold:
    hold = PromptHold(factor, max_hold_s, clock=Clock())
    hold.stepped(prompt, took_prompts=True)
    hold.stepped(decode, took_prompts=False)
    for _ in range(2):  # two clips `gap` apart
        hold.arrived()
        hold.clock.now += gap
    return hold


def test_clips_wait_while_the_delay_they_would_add_outweighs_their_wait():
    hold = measured()  # admitting now delays each of 6 decoding clips 22.4 ms: 67 ms of waits summed outweigh it
    t = hold.clock.now
    assert not hold.admit([t - 0.010], decoding=6)
    assert not hold.admit([t - 0.040, t - 0.010], decoding=6)
    assert hold.admit([t - 0.040, t - 0.030], decoding=6)
    assert hold.admit([t - 0.010], decoding=1) is False and hold.admit([t - 0.012], decoding=1)  # 11.2 ms for one
    assert hold.admit([t - 0.11], decoding=32)  # never longer than max_hold_s


def test_clips_go_at_once_when_off_when_nothing_decodes_or_before_any_step_time():
    t = 100.0
    assert PromptHold(0.0).admit([t], decoding=8)
    assert measured().admit([measured().clock.now], decoding=0)
    fresh = PromptHold(0.5, clock=Clock())
    assert fresh.admit([fresh.clock.now], decoding=8)  # nothing measured yet to weigh a wait against
    fresh.stepped(0.027, took_prompts=True)  # every step so far took clips: a decode step's time counts as nothing
    fresh.arrived()
    fresh.clock.now += 0.005
    fresh.arrived()
    assert not fresh.admit([fresh.clock.now - 0.05], decoding=8)  # 0.5 x 8 x 27 ms: 108 ms of waits
    assert fresh.admit([fresh.clock.now - 0.06, fresh.clock.now - 0.05], decoding=8)
    cheap = measured(prompt=0.004, decode=0.005)  # a prompt step no slower than a decode step: nothing to save
    assert cheap.admit([cheap.clock.now], decoding=8)


def test_clips_arriving_further_apart_than_the_wait_budget_go_at_once():
    hold = measured(gap=0.080)  # the budget at 6 decoding: 67 ms of waiting; the next clip is ~80 ms away
    assert hold.admit([hold.clock.now - 0.001], decoding=6)
    assert not hold.admit([hold.clock.now - 0.001], decoding=32)  # at 32 decoding the budget is 358 ms


def test_clips_coming_faster_than_a_decode_step_go_at_once():
    hold = measured(gap=0.002)  # a burst's commits, 2 ms apart: the next step takes those that came meanwhile
    assert hold.admit([hold.clock.now - 0.001], decoding=6)
    slower = measured(gap=0.006)  # slower than a 4.6 ms decode step: held as before
    assert not slower.admit([slower.clock.now - 0.001], decoding=6)


def test_step_times_are_running_means_and_the_gap_a_median_the_pause_between_bursts_does_not_sway():
    hold = measured(prompt=0.030, decode=0.005, gap=0.010)
    hold.stepped(0.010, took_prompts=True)
    assert hold.prompt_step == pytest.approx(0.030 + 0.2 * (0.010 - 0.030)) and hold.decode_step == 0.005
    hold.clock.now += 1.490  # a pause of 1.5 s since the last clip, then a burst 2 ms apart
    for _ in range(4):
        hold.arrived()
        hold.clock.now += 0.002
    assert hold.gap == pytest.approx(0.002)  # gaps 10 ms, 1.5 s, 2, 2, 2 ms (a running mean: ~0.16 s)
    assert hold.admit([hold.clock.now - 0.001], decoding=6)


def test_the_asr_stage_holds_a_clip_added_while_another_decodes_and_transcribes_it_the_same(tmp_path):
    svc = AsrService.from_pretrained(write_tiny_asr(tmp_path, size="1.7b"))
    t = np.arange(2 * SR) / SR
    clips = [(0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32) for f in (220.0, 330.0)]
    params = SamplingParams(temperature=0.0, max_tokens=6)
    alone = [svc.transcribe([(c, SR)], max_new_tokens=6)[0] for c in clips]  # through the stage's own loop

    svc.engine_config = dataclasses.replace(svc.engine_config, prompt_hold_factor=1e6, prompt_max_hold_s=5.0)
    stage = AsrStageEngine(svc)  # driven by hand here; the service's loop is idle
    clock = stage.hold.clock = Clock()
    outputs = {}

    def step():
        for out in stage.step():
            outputs[out.request_id] = out.item

    stage.add("a", AsrJob([(clips[0], SR)], None, None, params))
    step()  # nothing decodes: taken at once
    step()
    assert "a" not in stage._unencoded and svc.engine.stats()["running"] == 1
    clock.now += 1.0  # a second after "a": not a burst, which steps take in without a hold
    stage.add("b", AsrJob([(clips[1], SR)], None, None, params))
    step()
    assert "b" in stage._unencoded  # held: admitting it would delay "a" far more than it has waited
    clock.now += 5.0
    step()
    assert "b" not in stage._unencoded  # past the longest hold
    while stage.has_work():
        step()
    assert [outputs["a"][0], outputs["b"][0]] == alone


def test_the_hold_is_a_deploy_key_of_the_asr_stage_only():
    def deploy(role, admission):
        return {"pipeline": "aura_omni", "stages": [{"stage_id": 0, "model": "m", "model_stage": role,
                                                      "admission": admission}]}
    stage = parse_deploy_config(deploy("asr", {"hold_factor": 0.5, "max_hold_ms": 80}), "d.yaml").stages[0]
    config = engine_config(stage)
    assert (config.prompt_hold_factor, config.prompt_max_hold_s) == (0.5, 0.08)
    assert engine_config(parse_deploy_config(deploy("asr", {}), "d.yaml").stages[0]).prompt_hold_factor == 0.0
    with pytest.raises(DeployConfigError, match=r"stages\[0\]\.admission\.hold_factor: only the asr stage"):
        parse_deploy_config(deploy("aura", {"hold_factor": 0.5}), "d.yaml")
    for bad in ({"hold_factor": -1}, {"max_hold_ms": 0}, {"hold_ms": 5}):  # negative, empty, unknown: refused
        with pytest.raises(DeployConfigError, match="admission"):
            parse_deploy_config(deploy("asr", bad), "d.yaml")


def test_in_a_model_of_the_stages_steps_the_hold_cuts_a_fast_stream_of_commits_and_costs_a_slow_one_nothing():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "asr_admission_model.py"
    spec = importlib.util.spec_from_file_location("asr_admission_model", path)
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    costs = dict(prompt_ms=22.0, per_clip_ms=1.0, decode_ms=4.6, tokens=12, max_hold_ms=100.0)

    def p95(gap_ms, factor):
        arrivals = [k * gap_ms for k in range(int(3000 / gap_ms))]
        return float(np.percentile(model.transcript_ms(arrivals, factor, **costs), 95))

    assert p95(10, 1.0) < 0.6 * p95(10, 0.0)  # commits faster than the steps: prompt steps shared
    assert p95(31, 1.0) < p95(31, 0.0)
    assert p95(60, 1.0) == p95(60, 0.0)  # commits further apart than the wait budget: taken at once, as without
