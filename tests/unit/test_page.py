"""The page at `/` and the first-run surfaces without models: assets served offline and without a key, no CDN,
/docs off, and /v1/models naming the AURA (or Talker) checkpoint as the root."""

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aura_omni.deploy import parse_deploy_config
from aura_omni.server.app import create_app
from aura_omni.pipeline.runtime import Runtime

WEB = Path(__file__).resolve().parents[2] / "aura_omni" / "server" / "web"
AUTH = {"Authorization": "Bearer k"}
FULL = {"pipeline": "aura_omni", "stages": [{"stage_id": 0, "model": "org/asr"}, {"stage_id": 1, "model": "org/aura"},
                                            {"stage_id": 2, "model": "org/tts"}, {"stage_id": 3, "model": "org/tts"}]}
TTS_ONLY = {"pipeline": "qwen3_tts", "stages": [{"stage_id": 0, "model": "org/tts"},
                                               {"stage_id": 1, "model": "org/tts"}]}


def _client(deploy: dict, name: str | None = "served") -> TestClient:
    cfg = parse_deploy_config(deploy, "d.yaml")
    return TestClient(create_app(cfg, name, "k", runtime=Runtime(cfg, {})))


@pytest.fixture
def client():
    return _client(FULL)


def test_page_and_its_assets_need_no_api_key(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    scripts = re.findall(r'src="([^"]+)"', page.text)
    assert scripts == ["/web/app.js"]
    app_js = client.get("/web/app.js")
    assert app_js.status_code == 200 and "javascript" in app_js.headers["content-type"]
    worklet = re.search(r'addModule\("([^"]+)"\)', app_js.text).group(1)
    assert client.get(worklet).status_code == 200
    assert client.get("/v1/models").status_code == 401  # the API itself still wants the key


def test_unknown_or_escaping_asset_names_are_404(client):
    for name in ("nope.js", "..%2Fpage.py", "%2E%2E%2F%2E%2E%2Fcli.py"):
        assert client.get(f"/web/{name}").status_code == 404


def test_page_loads_nothing_from_the_network():
    for path in WEB.iterdir():
        urls = re.findall(r"https?://[^\s\"'`)]+", path.read_text())
        assert urls == [], f"{path.name} refers to {urls}"


def test_docs_are_off_and_the_schema_stays(client):
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404
    assert "/v1/audio/speech" in client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize("deploy, root", [(FULL, "org/aura"), (TTS_ONLY, "org/tts")])
def test_models_root_is_the_main_stage_checkpoint(deploy, root):
    client = _client(deploy)
    [card] = client.get("/v1/models", headers=AUTH).json()["data"]
    assert card["id"] == "served" and card["root"] == root
    assert client.get("/v1/models/served", headers=AUTH).json()["root"] == root
    assert _client(deploy, None).get("/v1/models", headers=AUTH).json()["data"][0]["id"] == root  # default name


def test_several_served_names_are_all_accepted_and_listed():
    cfg = parse_deploy_config(FULL, "d.yaml")
    names = ["aura-omni-tiny", "aurateam/AURA", "qwen3-tts"]
    client = TestClient(create_app(cfg, names, "k", runtime=Runtime(cfg, {})))
    cards = client.get("/v1/models", headers=AUTH).json()["data"]
    assert [c["id"] for c in cards] == ["aura-omni-tiny", "aurateam/AURA", "qwen3-tts"]
    assert client.get("/v1/models/qwen3-tts", headers=AUTH).status_code == 200
    assert client.get("/v1/models/other", headers=AUTH).status_code == 404
