"""The page at `/` in headless Chromium (the Debian package, driven by Playwright for Python; never
`playwright install`): the fake microphone plays a spoken wav and the fake camera is on; the page connects to
/v1/realtime, a push-to-talk turn is transcribed and answered, and the reply's audio is played and acknowledged.

Runs on the tiny ASR -> AURA -> CustomVoice Talker deployment. AURA's reply is steered from the page's own
extra_body field, as a user would: `<|silent|>` and `<|im_end|>` are banned so the random tiny AURA speaks.
Skipped only when chromium is not installed, unless AURA_OMNI_REQUIRE_BROWSER=1 (scripts/test.sh sets it).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import API_KEY, Server

CHROMIUM = shutil.which("chromium")
if CHROMIUM is None and os.environ.get("AURA_OMNI_REQUIRE_BROWSER") != "1":
    pytest.skip("Debian chromium is not installed (apt-get install -y chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")

AURA_SILENT_ID, QWEN_IM_END_ID = 151669, 151645  # AURA's <|silent|> and Qwen's <|im_end|> token ids
SAY = "Hello AURA. What can you see on my camera right now?"
TURN_TIMEOUT_MS = 90_000  # 2 shared CPU cores: ASR + AURA + Talker + Code2Wav on tiny weights
EXTRA_BODY = {"tts_language": "English", "sampling_params_list": [
    {}, {"logit_bias": {str(AURA_SILENT_ID): -100, str(QWEN_IM_END_ID): -100}, "max_tokens": 6},
    {"max_tokens": 6}]}  # a short reply and a short utterance keep the turn fast


def _spoken_wav(path: Path) -> Path:
    """The fake microphone's input: espeak-ng's sentence at 16 kHz, or a voiced pulse train without it."""
    espeak, sox = shutil.which("espeak-ng"), shutil.which("sox")
    if espeak and sox:
        raw = path.with_suffix(".raw.wav")
        subprocess.run([espeak, "-v", "en-us", "-s", "150", "-w", str(raw), SAY], check=True, timeout=30)
        subprocess.run([sox, str(raw), "-r", "16000", "-c", "1", "-b", "16", str(path)], check=True, timeout=30)
        return path
    sr = 16000
    t = np.arange(3 * sr) / sr
    phase = 2 * np.pi * np.cumsum(140 + 10 * np.sin(2 * np.pi * 3 * t)) / sr
    wav = sum(np.sin(k * phase) / k for k in range(1, 8)) * 0.2
    buf = io.BytesIO()
    sf.write(buf, wav.astype(np.float32), sr, format="WAV", subtype="PCM_16")
    path.write_bytes(buf.getvalue())
    return path


@pytest.fixture(scope="module")
def omni_server(tiny_dir, tmp_path_factory):
    """ASR + AURA + the CustomVoice Talker (preset voices for the page's selector)."""
    folder = tmp_path_factory.mktemp("web")
    deploy = (tiny_dir / "deploy.yaml").read_text().replace("./qwen3_tts_base", "./qwen3_tts_custom_voice")
    deploy = deploy.replace("./", f"{tiny_dir}/")
    (folder / "deploy.yaml").write_text(deploy)
    server = Server(folder / "deploy.yaml", folder / "server.log")
    try:
        yield server.wait_ready()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    wav = _spoken_wav(tmp_path_factory.mktemp("mic") / "speech16k.wav")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}"])
        yield browser
        browser.close()


def test_push_to_talk_turn_is_transcribed_answered_and_played(omni_server, browser, tmp_path):
    page = browser.new_page()
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    shot = Path(os.environ.get("AURA_OMNI_SCREENSHOT_DIR") or tmp_path) / "web_page.png"
    try:
        page.goto(omni_server.url + "/")
        page.fill("#api-key", API_KEY)
        page.dispatch_event("#api-key", "change")  # loads the voices with the key
        page.wait_for_function("document.querySelectorAll('#voice option').length > 1")
        voices = page.eval_on_selector_all("#voice option", "os => os.map(o => o.value)")
        assert "vivian" in [v.lower() for v in voices]
        page.select_option("#voice", next(v for v in voices if v.lower() == "vivian"))
        page.check("#camera")
        page.click("summary")
        page.fill("#extra-body", json.dumps(EXTRA_BODY))
        page.click("#connect")
        page.wait_for_selector("body[data-state=ready]", timeout=30_000)
        page.wait_for_function("window.auraPage.newestFrame !== null", timeout=10_000)  # the fake camera runs

        page.hover("#talk")
        page.mouse.down()
        page.wait_for_timeout(2500)  # ~12 appends of the fake microphone
        page.mouse.up()

        page.wait_for_selector("#conversation li.user:not(.pending)", timeout=TURN_TIMEOUT_MS)
        page.wait_for_selector("#conversation li.assistant:not(.pending)", timeout=TURN_TIMEOUT_MS)
        page.wait_for_function("Number(document.getElementById('played').dataset.ms) > 0", timeout=TURN_TIMEOUT_MS)
        page.wait_for_function("document.getElementById('log').textContent.includes('→ {\"type\":\"playback.ack\"')",
                               timeout=TURN_TIMEOUT_MS)

        stats = page.evaluate("window.auraPage.stats")
        assert stats["appends"] >= 5 and stats["frames"] >= 1  # 200 ms appends, camera frames riding on them
        user = page.inner_text("#conversation li.user")
        assert user.strip() and user != "…"
        assistant = page.locator("#conversation li.assistant").first
        assert "silent" not in (assistant.get_attribute("class") or "") and assistant.inner_text().strip()
        log = page.text_content("#log")
        assert '"type":"input_audio_buffer.commit","create_response":true' in log
        ack = json.loads(next(line for line in log.splitlines() if '"type":"playback.ack"' in line).split("→ ", 1)[1])
        assert ack["played_ms"] > 0 and ack["committed_ms"] == ack["played_ms"]
        unauthorized = "status of 401"  # the page's first look at /v1/models and the voices, before the key was typed
        assert not [c for c in console if c.startswith(("error", "pageerror")) and unauthorized not in c], console
    finally:
        page.click("summary >> text=Events")  # the event log is in the picture when a step failed
        page.screenshot(path=str(shot), full_page=True)
        page.close()
