"""The page at `/` in headless Chromium (the Debian package, driven by Playwright for Python; never
`playwright install`): the fake microphone plays a spoken wav and the fake camera is on; the page connects to
/v1/realtime, a push-to-talk turn is transcribed and answered, and the reply's audio is played and acknowledged.

Runs on the tiny ASR -> AURA -> CustomVoice Talker deployment. AURA's reply is steered from the page's own
extra_body field, as a user would: `<|silent|>` and `<|im_end|>` are banned so the random tiny AURA speaks.
Skipped only when chromium is not installed, unless AURA_OMNI_REQUIRE_BROWSER=1 (scripts/test.sh sets it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from serving import API_KEY, Server

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


def _spoken_wav(path: Path, trailing_silence_s: float = 0.0) -> Path:
    """The fake microphone's input (Chromium loops it): espeak-ng's sentence at 16 kHz, or a voiced pulse train
    without espeak-ng; `trailing_silence_s` of silence after it lets server VAD see the turn end."""
    espeak, sox = shutil.which("espeak-ng"), shutil.which("sox")
    sr = 16000
    if espeak and sox:
        raw = path.with_suffix(".raw.wav")
        subprocess.run([espeak, "-v", "en-us", "-s", "150", "-w", str(raw), SAY], check=True, timeout=30)
        subprocess.run([sox, str(raw), "-r", str(sr), "-c", "1", "-b", "16", str(path)], check=True, timeout=30)
        wav, _ = sf.read(path, dtype="float32")
    else:
        t = np.arange(3 * sr) / sr
        phase = 2 * np.pi * np.cumsum(140 + 10 * np.sin(2 * np.pi * 3 * t)) / sr
        wav = (sum(np.sin(k * phase) / k for k in range(1, 8)) * 0.2).astype(np.float32)
    wav = np.concatenate([wav, np.zeros(int(trailing_silence_s * sr), np.float32)])
    sf.write(path, wav, sr, subtype="PCM_16")
    return path


def _omni_server(tiny_dir: Path, folder: Path, talker: str):
    """ASR + AURA + the given tiny Talker checkpoint, from make-tiny's deploy.yaml."""
    deploy = (tiny_dir / "deploy.yaml").read_text().replace("./qwen3_tts_base", f"./{talker}")
    (folder / "deploy.yaml").write_text(deploy.replace("./", f"{tiny_dir}/"))
    return Server(folder / "deploy.yaml", folder / "server.log")


@pytest.fixture(scope="module")
def omni_server(tiny_dir, tmp_path_factory):
    """The CustomVoice Talker: preset voices for the page's selector."""
    server = _omni_server(tiny_dir, tmp_path_factory.mktemp("web"), "qwen3_tts_custom_voice")
    try:
        yield server.wait_ready()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def base_omni_server(tiny_dir, tmp_path_factory):
    """The Base Talker (the seed's deploy): no preset voices, it speaks in cloned ones."""
    server = _omni_server(tiny_dir, tmp_path_factory.mktemp("web_base"), "qwen3_tts_base")
    try:
        yield server.wait_ready()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """`launch(wav)`: a headless Debian chromium whose fake microphone loops `wav` (fake camera on)."""
    with sync_api.sync_playwright() as p:
        browsers = []

        def start(wav: Path):
            browsers.append(p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
                "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}"]))
            return browsers[-1]

        yield start
        for b in browsers:
            b.close()


@pytest.fixture(scope="module")
def mic_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mic")


class PageUnderTest:
    """The page in a browser tab, with the console watched and a screenshot (event log open) at the end."""

    def __init__(self, browser, url: str, shot: Path):
        self.page, self.url, self.shot, self.console = browser.new_page(), url, shot, []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))

    def open(self) -> None:
        self.page.goto(self.url + "/")
        self.page.fill("#api-key", API_KEY)
        self.page.dispatch_event("#api-key", "change")  # loads the voices with the key

    def connect(self, mode: str = "ptt", extra_body: dict | None = None, voice: str | None = "vivian") -> None:
        page = self.page
        if voice == "vivian":
            self.open()
        page.wait_for_function("document.querySelectorAll('#voice option').length > 1")
        voices = page.eval_on_selector_all("#voice option", "os => os.map(o => o.value)")
        assert voice in [v.lower() for v in voices]
        page.select_option("#voice", next(v for v in voices if v.lower() == voice))
        page.check(f"input[name=mode][value={mode}]")
        page.check("#camera")
        page.click("summary >> text=Advanced")
        page.fill("#extra-body", json.dumps(extra_body or EXTRA_BODY))
        page.click("#connect")
        page.wait_for_selector("body[data-state=ready]", timeout=30_000)
        page.wait_for_function("window.auraPage.newestFrame !== null", timeout=10_000)  # the fake camera runs

    def talk(self, seconds: float) -> None:
        self.page.hover("#talk")
        self.page.mouse.down()
        self.page.wait_for_timeout(int(seconds * 1000))
        self.page.mouse.up()

    def wait_for_answer(self) -> None:
        self.page.wait_for_selector("#conversation li.user:not(.pending)", timeout=TURN_TIMEOUT_MS)
        self.page.wait_for_selector("#conversation li.assistant:not(.pending)", timeout=TURN_TIMEOUT_MS)
        self.page.wait_for_function("Number(document.getElementById('played').dataset.ms) > 0",
                                    timeout=TURN_TIMEOUT_MS)

    def sent(self, event_type: str) -> list[dict]:
        """The client events of `event_type` the page logged (appends are counted, not logged)."""
        lines = self.page.text_content("#log").splitlines()
        return [json.loads(line.split(" → ", 1)[1]) for line in lines
                if " → " in line and f'"type":"{event_type}"' in line]

    def received(self, event_type: str) -> bool:
        return f'← {{"type":"{event_type}"' in self.page.text_content("#log")

    def close(self) -> None:
        self.page.click("summary >> text=Events")
        self.page.screenshot(path=str(self.shot), full_page=True)
        unauthorized = "status of 401"  # the page's first look at /v1/models and the voices, before the key was typed
        errors = [c for c in self.console if c.startswith(("error", "pageerror")) and unauthorized not in c]
        self.page.close()
        assert not errors, errors


def _tab(request, server, launch, mic_dir, tmp_path):
    silence = getattr(request, "param", 0.0)
    wav = _spoken_wav(mic_dir / f"speech_{silence}.wav", silence)
    shots = Path(os.environ.get("AURA_OMNI_SCREENSHOT_DIR") or tmp_path)
    return PageUnderTest(launch(wav), server.url, shots / f"{request.node.name}.png")


@pytest.fixture
def tab(request, omni_server, launch, mic_dir, tmp_path):
    """A tab of a browser whose microphone says SAY (then `request.param` s of silence, for server VAD)."""
    t = _tab(request, omni_server, launch, mic_dir, tmp_path)
    yield t
    t.close()


@pytest.fixture
def base_tab(request, base_omni_server, launch, mic_dir, tmp_path):
    t = _tab(request, base_omni_server, launch, mic_dir, tmp_path)
    yield t
    t.close()


def test_push_to_talk_turn_is_transcribed_answered_and_played(tab):
    tab.connect("ptt")
    tab.talk(2.5)  # ~12 appends of the fake microphone
    tab.wait_for_answer()
    tab.page.wait_for_function("document.getElementById('log').textContent.includes('→ {\"type\":\"playback.ack\"')",
                               timeout=TURN_TIMEOUT_MS)
    stats = tab.page.evaluate("window.auraPage.stats")
    assert stats["appends"] >= 5 and stats["frames"] >= 1  # 200 ms appends, camera frames riding on them
    user = tab.page.inner_text("#conversation li.user")
    assert user.strip() and user != "…"
    assistant = tab.page.locator("#conversation li.assistant").first
    assert "silent" not in (assistant.get_attribute("class") or "") and assistant.inner_text().strip()
    assert tab.sent("input_audio_buffer.commit") == [{"type": "input_audio_buffer.commit", "create_response": True}]
    [update] = tab.sent("session.update")
    assert update["session"]["audio"]["input"] == {"format": {"type": "audio/pcm", "rate": 16000},
                                                   "turn_detection": None}
    [ack] = tab.sent("playback.ack")
    assert ack["played_ms"] > 0 and ack["committed_ms"] == ack["played_ms"] and "truncate" not in ack


def test_stop_cuts_the_reply_and_acknowledges_only_what_was_heard(tab):
    long_reply = {**EXTRA_BODY, "sampling_params_list": [*EXTRA_BODY["sampling_params_list"][:2], {"max_tokens": 60}]}
    tab.connect("ptt", long_reply)  # up to 60 codec frames: 4.8 s of speech
    tab.talk(1.5)
    tab.page.wait_for_function("Number(document.getElementById('played').dataset.ms) >= 300", timeout=TURN_TIMEOUT_MS)
    tab.page.click("#stop")
    tab.page.wait_for_function("document.getElementById('log').textContent.includes('→ {\"type\":\"playback.ack\"')",
                               timeout=10_000)
    [ack] = tab.sent("playback.ack")
    assert ack["truncate"] is True and 0 < ack["played_ms"] < 4800
    played = tab.page.get_attribute("#played", "data-ms")
    tab.page.wait_for_timeout(1000)
    assert tab.page.get_attribute("#played", "data-ms") == played  # nothing more is played
    assert "cancelled" in tab.page.locator("#conversation li.assistant").first.get_attribute("class")
    assert tab.page.evaluate("document.body.dataset.state") == "ready"


def test_a_dropped_connection_is_resumed_and_the_session_goes_on(tab):
    """The page's socket drops mid-reply (closed with a code that is not a normal close, as a network loss reads):
    the page takes its session over from a new connection, the reply goes on to its end, and the next turn is
    answered in the same session."""
    long_reply = {**EXTRA_BODY, "sampling_params_list": [*EXTRA_BODY["sampling_params_list"][:2], {"max_tokens": 30}]}
    tab.connect("ptt", long_reply)
    session_id = tab.page.evaluate("window.auraPage.resume.sessionId")
    tab.talk(1.5)
    tab.page.wait_for_function("Number(document.getElementById('played').dataset.ms) > 0", timeout=TURN_TIMEOUT_MS)
    tab.page.evaluate("window.auraPage.ws.close(4001)")
    tab.page.wait_for_function("window.auraPage.stats.resumed === 1", timeout=30_000)
    assert "reconnected" in tab.page.inner_text("#status")
    [resume] = tab.sent("session.resume")
    assert resume["session_id"] == session_id and resume["last_received_server_event_seq"] > 0
    tab.page.wait_for_function("document.getElementById('log').textContent.includes('\"type\":\"response.done\"')",
                               timeout=TURN_TIMEOUT_MS)  # the reply went on while the page was away
    tab.talk(1.5)
    tab.page.wait_for_function("document.querySelectorAll('#conversation li.assistant:not(.pending)').length >= 2",
                               timeout=TURN_TIMEOUT_MS)
    assert tab.page.evaluate("window.auraPage.resume.sessionId") == session_id
    assert tab.sent("session.event_ack")  # the page lets the server forget what arrived


@pytest.mark.parametrize("tab", [3.0], indirect=True)  # 3 s of silence after the sentence ends each turn
def test_hands_free_turn_is_ended_by_server_vad(tab):
    tab.connect("vad")
    tab.wait_for_answer()
    assert tab.received("input_audio_buffer.speech_started") and tab.received("input_audio_buffer.speech_stopped")
    assert tab.sent("input_audio_buffer.commit") == []  # the server ends the turn, not the page
    [update] = tab.sent("session.update")
    assert update["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert tab.page.is_disabled("#talk")


def test_silent_turn_is_shown_as_listening(tab):
    silent = {**EXTRA_BODY, "sampling_params_list": [{}, {"logit_bias": {str(AURA_SILENT_ID): 100}}, {}]}
    tab.connect("ptt", silent)
    tab.talk(1.0)
    tab.page.wait_for_selector("#conversation li.assistant.silent", timeout=TURN_TIMEOUT_MS)
    assert tab.received("response.listen")
    assert "listening" in tab.page.inner_text("#conversation li.assistant.silent")
    assert tab.page.get_attribute("#played", "data-ms") == "0" and tab.sent("playback.ack") == []
    tab.page.wait_for_selector("body[data-state=ready]")


def test_vision_follow_sends_frame_only_turns_while_aura_speaks(tab):
    long_reply = {**EXTRA_BODY, "sampling_params_list": [*EXTRA_BODY["sampling_params_list"][:2], {"max_tokens": 60}]}
    tab.connect("ptt", long_reply)
    tab.page.check("#follow")
    tab.talk(1.5)
    tab.page.wait_for_selector("#conversation li.user.frame", timeout=TURN_TIMEOUT_MS)  # "(camera frame)"
    assert tab.page.evaluate("window.auraPage.stats.followTurns") >= 1
    # the frame-only turn is answered (aloud or silently) as a reply of its own
    tab.page.wait_for_function("document.querySelectorAll('#conversation li.assistant:not(.pending)').length >= 2",
                               timeout=TURN_TIMEOUT_MS)
    tab.page.uncheck("#follow")
    tab.page.wait_for_selector("body[data-state=ready]", timeout=TURN_TIMEOUT_MS)
    acks = tab.sent("playback.ack")
    assert acks and len({a["response_id"] for a in acks}) == len(acks)  # one ack per reply heard
    assert all(c == {"type": "input_audio_buffer.commit", "create_response": True}
               for c in tab.sent("input_audio_buffer.commit"))


def test_downsampler_of_browsers_that_capture_at_the_device_rate(tab):
    """Firefox cannot capture into a 16 kHz context: the page resamples 48 kHz blocks itself, span-averaged."""
    tab.page.goto(tab.url + "/")
    got = tab.page.evaluate("""() => {
        const down = downsampler(48000, 16000), out = [];
        for (let b = 0; b < 100; b++) {  // 100 blocks of 128 samples of a 440 Hz tone, as a worklet posts them
            const block = new Float32Array(128);
            for (let i = 0; i < 128; i++) block[i] = 0.5 * Math.sin(2 * Math.PI * 440 * (b * 128 + i) / 48000);
            out.push(...down(block));
        }
        return out;
    }""")
    assert abs(len(got) - 100 * 128 // 3) <= 1
    t = np.arange(len(got)) / 16000
    expected = 0.5 * np.sin(2 * np.pi * 440 * (t + 1 / 48000))  # each output is centred one input sample later
    assert np.max(np.abs(np.array(got) - expected)) < 0.01
    assert tab.page.evaluate("downsampler(16000, 16000)(new Float32Array([1, 2])).length") == 2


def test_a_tts_only_server_says_live_sessions_need_aura(customvoice_server, launch, mic_dir):
    page = launch(_spoken_wav(mic_dir / "speech_0.0.wav")).new_page()
    try:
        page.goto(customvoice_server.url + "/")
        page.wait_for_selector("#status.error")
        assert "no AURA stage" in page.inner_text("#status") and page.is_disabled("#connect")
    finally:
        page.close()


def test_base_talker_speaks_in_a_voice_cloned_from_the_microphone(base_tab):
    base_tab.open()
    base_tab.page.wait_for_selector("#clone:not([hidden])")  # no preset voices: a Base Talker
    base_tab.page.click("#clone")  # records 4 s of the fake microphone, registers it as my-voice
    base_tab.page.wait_for_selector("#voice option[value=my-voice]", state="attached", timeout=30_000)
    assert base_tab.page.input_value("#voice") == "my-voice"
    base_tab.connect("ptt", voice="my-voice")
    base_tab.talk(1.5)
    base_tab.wait_for_answer()
    [update] = base_tab.sent("session.update")
    assert update["session"]["audio"]["output"] == {"voice": "my-voice"}


def test_a_refused_session_can_be_fixed_and_retried(base_tab):
    base_tab.open()
    base_tab.page.wait_for_selector("#clone:not([hidden])")
    base_tab.page.select_option("#voice", "")  # a Base Talker has no default voice: the session is refused
    base_tab.page.click("#connect")
    base_tab.page.wait_for_selector("#conversation li.error")
    base_tab.page.wait_for_selector("body[data-state=idle]")  # closed, so the settings can change
    assert base_tab.page.inner_text("#connect") == "Connect" and "reference voice" in base_tab.page.inner_text("#status")
