"""`aura-omni bench serve` against a served tiny four-stage deploy: the speech and chat backends at concurrency 1
and 2 give sane numbers, and a bad model is counted as errors."""

import json

import pytest

from aura_omni.cli import main
from aura_omni.stages.aura.vocab import AURA_SILENT_TOKEN_ID

MODEL = "tiny-tts"  # conftest's --served-model-name
API_KEY = "test-key"  # conftest.API_KEY
FEW = '{"additional_information": {"tts_max_new_tokens": 4}}'  # a short spoken reply per chat turn
# a realtime session's extra_body: a short spoken reply, and AURA never <|silent|> (stage 1 is AURA)
SPEAK_REALTIME = json.dumps({"tts_max_new_tokens": 4,
                             "sampling_params_list": [{}, {"logit_bias": {str(AURA_SILENT_TOKEN_ID): -100}}]})


@pytest.fixture(scope="module")
def ref_wav(tmp_path_factory, ref_wav_bytes):
    path = tmp_path_factory.mktemp("bench") / "ref.wav"
    path.write_bytes(ref_wav_bytes)
    return path


def bench(server, tmp_path, ref_wav, *argv: str) -> tuple[int, dict]:
    result = tmp_path / "result.json"
    rc = main(["bench", "serve", "--base-url", server.url, "--api-key", API_KEY, "--ref-audio", str(ref_wav),
               "--save-result", "--result-filename", str(result), "--disable-tqdm", *argv])
    return rc, json.loads(result.read_text())


@pytest.mark.parametrize("backend, argv", [
    ("speech", ["--max-tokens", "6"]),
    ("chat", ["--max-tokens", "4", "--input-audio-seconds", "1", "--frame-size", "64", "--extra-body", FEW]),
])
def test_backend_at_concurrency_1_and_2_gives_sane_numbers(omni_server, tmp_path, ref_wav, backend, argv):
    plot = tmp_path / "plot.svg"
    rc, report = bench(omni_server, tmp_path, ref_wav, "--backend", backend, "--model", MODEL,
                       "--max-concurrency", "1", "2", "--num-prompts", "3", "--plot", str(plot), *argv)
    assert rc == 0 and report["backend"] == backend and [r["max_concurrency"] for r in report["runs"]] == [1, 2]
    for run in report["runs"]:
        assert run["completed"] == 3 and run["errors"] == 0, run["error_messages"]
        assert 0 < run["p50_ttfa_ms"] <= run["p95_ttfa_ms"] <= run["p99_ttfa_ms"]
        assert run["total_audio_s"] > 0 and run["audio_throughput"] > 0 and run["p50_rtf"] > 0
        stages = run["server_breakdown"]["first_output"]  # the server's own account of this run, from /metrics
        assert stages["talker"]["n"] >= 3 and stages["talker"]["mean_ms"] > 0 and stages["code2wav"]["n"] >= 3
        if backend == "chat":
            assert 0 < run["p50_first_text_ms"]
            assert run["total_audio_s"] <= 3 * 8 * 4 * 0.08  # at most 4 frames per sentence: the extra body held
            phases = run["server_breakdown"]["phase"]
            assert phases["asr"]["n"] == phases["first_audio"]["n"] == 3  # this run's turns only, not the warm-ups'
            assert stages["asr"]["n"] == stages["aura"]["n"] == 3
        else:
            assert run["p50_first_text_ms"] is None
            assert run["total_audio_s"] <= 3 * 6 * 0.08 + 1e-6  # 6 codec frames of 80 ms per request
    assert plot.read_text().startswith("<svg")


def test_a_bad_model_is_counted_as_errors_not_a_crash(omni_server, tmp_path, ref_wav, capsys):
    rc, report = bench(omni_server, tmp_path, ref_wav, "--backend", "speech", "--model", "no-such-model",
                       "--num-prompts", "2", "--max-tokens", "4")
    run = report["runs"][0]
    assert rc == 1 and run["completed"] == 0 and run["errors"] == 2
    [(message, count)] = run["error_messages"].items()
    assert count == 2 and message.startswith("HTTP 404") and "no-such-model" in message
    assert "2 x HTTP 404" in capsys.readouterr().out


def test_realtime_backend_runs_push_to_talk_turns(omni_server, tmp_path, ref_wav):
    """Turns that speak (AURA's <|silent|> banned, so random weights cannot choose silence): timed to first text and
    first audio, with audio counted."""
    rc, report = bench(omni_server, tmp_path, ref_wav, "--backend", "realtime", "--model", MODEL, "--max-tokens", "4",
                       "--input-audio-seconds", "1", "--frame-size", "64", "--extra-body", SPEAK_REALTIME,
                       "--max-concurrency", "1", "--num-prompts", "2")  # the tiny deploy allows one session at a time
    run = report["runs"][0]
    assert rc == 0 and run["completed"] == 2 and run["errors"] == 0, run["error_messages"]
    assert run["silent"] == 0
    assert 0 < run["p50_first_text_ms"] < run["p50_ttfa_ms"] and run["total_audio_s"] > 0
    assert 0 < run["p50_transcript_ms"] < run["p50_ttfa_ms"]  # the user's transcript, before the reply's audio
