"""Every ```bash and ```python example of README.md and docs/*.md, run as a reader would run it: against one demo
server started by scripts/demo.sh's own serve command (tiny checkpoints, CPU), from a folder holding the repo's
configs/, examples/, scripts/ and benchmarks/, the demo's `tiny/` checkpoints and the input files the examples name
(question.wav, me.wav, camera.jpg). Only the demo's address is rewritten, to a free port. Blocks marked in the doc
(tests/e2e/doc_blocks.py) are checked another way or skipped with the reason shown."""

from __future__ import annotations

import ast
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from doc_blocks import KINDS, REPO, SKIPPED, Block, all_blocks, commands
from PIL import Image
from serving import SERVER_START_TIMEOUT_S, free_port

from aura_omni.bench.inputs import speech_like, wav_bytes

DEMO_PORT = 8091  # where the docs point: scripts/demo.sh's default
EXAMPLE_TIMEOUT_S = 300
BLOCKS = all_blocks()
VENV_BIN = Path(sys.executable).parent  # `aura-omni` and `python` as an activated venv gives them


def demo_command() -> str:
    """scripts/demo.sh's `exec ... serve` command, continuation lines joined."""
    script = (REPO / "scripts" / "demo.sh").read_text()
    start = script.index("\nexec ") + 1
    return re.sub(r"\\\n\s*", " ", script[start:]).splitlines()[0].removeprefix("exec ")


def example_env(port: int, folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AURA_OMNI_API_KEY"}  # the demo has no API key
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])), AURA_OMNI_API_KEY="",
               VENV=str(VENV_BIN.parent), PORT=str(port), HOST="127.0.0.1",
               XDG_CACHE_HOME=str(folder / "cache"))  # the demo's voice library and caches: this run's, not ~/.cache
    return env


def input_files(folder: Path, tiny_dir: Path) -> None:
    for name in ("configs", "examples", "scripts", "benchmarks"):
        (folder / name).symlink_to(REPO / name)
    (folder / "tiny").symlink_to(tiny_dir)
    (folder / "question.wav").write_bytes(wav_bytes(speech_like(1.5)))
    (folder / "me.wav").write_bytes(wav_bytes(speech_like(2.0)))
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(buf, format="JPEG")
    (folder / "camera.jpg").write_bytes(buf.getvalue())


@pytest.fixture(scope="module")
def demo(tiny_dir, tmp_path_factory):
    """(port, folder): the demo server as scripts/demo.sh starts it, and the folder examples run in."""
    folder = tmp_path_factory.mktemp("doc-examples")
    input_files(folder, tiny_dir)
    port = free_port()
    # a cache directory of its own: the voices its examples register are gone with the folder
    env = {**example_env(port, folder), "TINY": str(tiny_dir)}
    log = open(folder / "demo.log", "wb")
    proc = subprocess.Popen(["bash", "-c", demo_command()], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"demo exited:\n{(folder / 'demo.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"demo not ready:\n{(folder / 'demo.log').read_text()[-3000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield port, folder
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def rewritten(code: str, port: int) -> str:
    return re.sub(r"(127\.0\.0\.1|localhost):8091\b", f"127.0.0.1:{port}", code)


def run_block(block: Block, port: int, folder: Path) -> None:
    code = rewritten(block.code, port)
    if block.language == "python":
        argv = [sys.executable, "-c", code]
    else:
        argv = ["bash", "-c", "set -eo pipefail\n" + code]
    done = subprocess.run(argv, cwd=folder, env=example_env(port, folder), capture_output=True, text=True,
                          timeout=EXAMPLE_TIMEOUT_S)
    assert done.returncode == 0, (f"{block.id} failed ({done.returncode}):\n{code}\n--- stdout\n{done.stdout[-3000:]}"
                                  f"\n--- stderr\n{done.stderr[-3000:]}")


def check_serve_commands(block: Block, folder: Path, monkeypatch) -> None:
    """Each `aura-omni serve` is parsed by the real CLI and its deploy file and limits loaded (a wrong flag, path or
    key fails here); `make-tiny` is parsed. Anything else does not belong in a serve block."""
    from aura_omni.cli import build_parser, load_serve_config, serve_limits

    monkeypatch.chdir(folder)
    found = 0
    for line in commands(block.code):
        for command in (c.strip() for c in line.split("&&")):
            argv = shlex.split(command)
            assert argv[:2] in (["aura-omni", "serve"], ["aura-omni", "make-tiny"]), \
                f"{block.id}: a serve block runs only aura-omni serve / make-tiny, not {command!r}"
            args = build_parser().parse_args(argv[1:])
            if args.command == "serve":
                serve_limits(args, load_serve_config(args))
                found += 1
    assert found, f"{block.id}: a serve block without `aura-omni serve`"


def check_excerpt(block: Block) -> None:
    compile(block.code, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    assert block.words, f"{block.id}: an excerpt names what it shows (`<!-- example: excerpt module.Name ... -->`)"
    for name in block.words:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
                break
            except ModuleNotFoundError:
                continue
        else:
            raise AssertionError(f"{block.id}: no module in {name}")
        for attr in parts[i:]:
            assert hasattr(obj, attr), f"{block.id}: {name} does not exist ({attr} missing)"
            obj = getattr(obj, attr)


def test_every_marker_is_known_and_every_doc_has_been_read():
    assert {b.kind for b in BLOCKS} <= KINDS, [(b.id, b.kind) for b in BLOCKS if b.kind not in KINDS]
    assert any(b.doc.name == "README.md" for b in BLOCKS) and len({b.doc for b in BLOCKS}) > 3


def test_a_failing_example_fails_and_a_wrong_serve_flag_is_caught(tmp_path, monkeypatch):
    """The harness itself: a shell block's first failing command fails it (set -e), a python block's exception too,
    and a serve block with a flag `serve` does not know."""
    for language, code in (("bash", "true\nfalse\ntrue\n"), ("python", "raise SystemExit(3)\n")):
        with pytest.raises(AssertionError, match="failed"):
            run_block(Block(REPO / "README.md", 1, language, code), DEMO_PORT, tmp_path)
    with pytest.raises(SystemExit):
        check_serve_commands(Block(REPO / "README.md", 1, "bash", "aura-omni serve --deploy-confg x.yaml\n", "serve"),
                             tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_example(block: Block, request, monkeypatch):
    if block.kind in SKIPPED:
        pytest.skip(f"{block.id}: {SKIPPED[block.kind]}")
    if block.kind == "excerpt":
        check_excerpt(block)
        return
    port, folder = request.getfixturevalue("demo")
    if block.kind == "serve":
        check_serve_commands(block, folder, monkeypatch)
    else:
        run_block(block, port, folder)
