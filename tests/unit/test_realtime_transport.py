"""WS /v1/realtime's handshake rules without a server: duplex mode, API key forms, subprotocol choice."""

from types import SimpleNamespace

import pytest

from aura_omni.server.errors import APIError
from aura_omni.server.realtime import SessionSlots, duplex_mode
from aura_omni.server.websocket_auth import accepted_subprotocol, check_api_key


def ws(path="/v1/realtime", query=None, headers=None, subprotocols=()):
    return SimpleNamespace(url=SimpleNamespace(path=path), query_params=query or {}, headers=headers or {},
                           scope={"type": "websocket", "subprotocols": list(subprotocols)})


def api_key_ok(conn, key) -> bool:
    try:
        check_api_key(conn, key)
    except APIError:
        return False
    return True


def test_duplex_mode_follows_path_query_and_session_mode():
    assert duplex_mode(ws("/v1/duplex"), "turn") is True
    assert duplex_mode(ws(query={"duplex": "1"}), "turn") is True
    assert duplex_mode(ws(), "turn") is False
    assert duplex_mode(ws(), "duplex") is True  # session_mode: duplex makes a bare /v1/realtime duplex
    assert duplex_mode(ws(query={"duplex": "0"}), "duplex") is None  # refused: Realtime API is not available


def test_api_key_from_header_query_or_subprotocol():
    assert api_key_ok(ws(headers={"authorization": "Bearer k"}), "k")
    assert api_key_ok(ws(query={"api_key": "k"}), "k")
    assert api_key_ok(ws(subprotocols=["realtime", "openai-insecure-api-key.k"]), "k")
    assert not api_key_ok(ws(headers={"authorization": "Bearer x"}, subprotocols=["openai-insecure-api-key.y"]), "k")
    assert not api_key_ok(ws(), "k")
    assert api_key_ok(ws(), None)


@pytest.mark.parametrize("offered, answer", [
    (["realtime", "openai-insecure-api-key.k", "openai-beta.realtime-v1"], "realtime"),
    (["openai-insecure-api-key.k", "x"], "x"),
    (["openai-insecure-api-key.k"], "openai-insecure-api-key.k"),  # browsers need one answered
    ([], None),
])
def test_subprotocol_answer_prefers_realtime_over_the_key(offered, answer):
    assert accepted_subprotocol(ws(subprotocols=offered)) == answer


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
