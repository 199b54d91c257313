"""`aura-omni serve` subprocesses for the end-to-end tests (a module of its own: test modules import it by a name
no other test folder uses, unlike `conftest`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import uvicorn

API_KEY = "test-key"
SERVER_START_TIMEOUT_S = 180  # 2 shared CPU cores: importing torch and loading tiny models can be slow


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "aura_omni.cli", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """An `aura-omni serve` subprocess; `url` is its base URL."""

    def __init__(self, deploy: Path, log_path: Path, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            _cli("serve", "--deploy-config", str(deploy), "--served-model-name", "tiny-tts", "--host", "127.0.0.1",
                 "--port", str(self.port), "--api-key", API_KEY, "--trust-remote-code", "--omni", *extra),
            stdout=self._log, stderr=subprocess.STDOUT,
            # a cache directory of its own (compile caches, voice library): no run sees another's voices
            env={**os.environ, "OMP_NUM_THREADS": "1", "XDG_CACHE_HOME": str(log_path.parent / "cache")})

    def wait_ready(self) -> Server:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.log_path.read_text()[-4000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"server not ready after {SERVER_START_TIMEOUT_S} s:\n{self.log_path.read_text()[-4000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def _start(tiny_dir: Path, tmp_path_factory, deploy: str, *extra: str):
    log = tmp_path_factory.mktemp("logs") / (deploy + ".log")
    server = Server(tiny_dir / deploy, log, *extra)
    try:
        server.wait_ready()
    except Exception:
        server.stop()
        raise
    return server




class ThreadServer:
    """uvicorn serving `create_app(deploy)` in a daemon thread of the test process; `runtime` is the live stage
    models, so tests can look inside the stages (engines, KV blocks, loops) while requests run."""

    def __init__(self, deploy: Path, media_root: Path | None = None, model: str = "aura-tiny", **app_options):
        from aura_omni.deploy import load_deploy_config
        from aura_omni.server.app import create_app

        self.app = create_app(load_deploy_config(deploy), model, API_KEY, allowed_local_media_path=media_root,
                              **app_options)
        self.runtime = self.app.state.server.runtime
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
