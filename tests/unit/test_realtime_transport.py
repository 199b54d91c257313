"""WS /v1/realtime's handshake rules without a server: duplex mode, API key forms, subprotocol choice."""

from types import SimpleNamespace

from aura_omni.server.realtime import SessionSlots, api_key_ok, chosen_subprotocol, duplex_mode


def ws(path="/v1/realtime", query=None, headers=None):
    return SimpleNamespace(url=SimpleNamespace(path=path), query_params=query or {}, headers=headers or {})


def test_duplex_mode_follows_path_query_and_session_mode():
    assert duplex_mode(ws("/v1/duplex"), "turn") is True
    assert duplex_mode(ws(query={"duplex": "1"}), "turn") is True
    assert duplex_mode(ws(), "turn") is False
    assert duplex_mode(ws(), "duplex") is True  # session_mode: duplex makes a bare /v1/realtime duplex
    assert duplex_mode(ws(query={"duplex": "0"}), "duplex") is None  # refused: Realtime API is not available


def test_api_key_from_header_query_or_subprotocol():
    assert api_key_ok(ws(headers={"authorization": "Bearer k"}), "k", [])
    assert api_key_ok(ws(query={"api_key": "k"}), "k", [])
    assert api_key_ok(ws(), "k", ["realtime", "openai-insecure-api-key.k"])
    assert not api_key_ok(ws(headers={"authorization": "Bearer x"}), "k", ["openai-insecure-api-key.y"])
    assert api_key_ok(ws(), None, [])


def test_subprotocol_answer_prefers_realtime_over_the_key():
    assert chosen_subprotocol(["realtime", "openai-insecure-api-key.k", "openai-beta.realtime-v1"]) == "realtime"
    assert chosen_subprotocol(["openai-insecure-api-key.k", "x"]) == "x"
    assert chosen_subprotocol(["openai-insecure-api-key.k"]) == "openai-insecure-api-key.k"  # browsers need one
    assert chosen_subprotocol([]) is None


def test_session_slots():
    slots = SessionSlots(1)
    assert slots.acquire() and not slots.acquire()
    slots.release()
    assert slots.acquire()


def test_the_session_package_does_not_import_the_http_server():
    import subprocess
    import sys

    code = ("import sys, aura_omni.session; bad = [m for m in ('aura_omni.server.app', 'aura_omni.server.realtime', "
            "'uvicorn') if m in sys.modules]; sys.exit(str(bad) if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
