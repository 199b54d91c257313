"""`aura-omni` command line, with vLLM's spellings.

  aura-omni serve [MODEL] --omni --deploy-config PATH --served-model-name NAME [NAME ...] --trust-remote-code
                  --host H --port P --api-key KEY --device cpu --dtype auto --load-format {auto,dummy}
                  --distributed-executor-backend ray --ray-address ADDRESS --cache-dir DIR --voice-dir DIR
  aura-omni make-tiny DIR [--seed N]
  aura-omni bench serve --backend {speech,chat,realtime} --base-url URL --model NAME --max-concurrency N [N ...]
                  --num-prompts N --request-rate R --save-result --result-filename FILE --plot FILE
  aura-omni bench plot RESULT.json [RESULT.json ...] --out FILE.svg
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import logging
import signal
import sys
from pathlib import Path

from . import env
from .media.limits import Limits

log = logging.getLogger("aura_omni")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="aura-omni", description="Qwen3-ASR -> AURA -> Qwen3-TTS server")
    parser.add_argument("--version", action="version", version=f"aura-omni {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the OpenAI-compatible API")
    serve.add_argument("model", nargs="?", default=None,
                       help="checkpoint (dir or HF id) for stages whose deploy entry has no `model`; "
                            "without --deploy-config it must be a Qwen3-TTS checkpoint (TTS-only serving)")
    serve.add_argument("--model", dest="model_flag", default=None, help=argparse.SUPPRESS)
    serve.add_argument("--deploy-config", default=None, help="deploy YAML (pipeline, stages, connectors)")
    serve.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                       help="names clients may send as `model`; the first is the one reported (default: MODEL, else "
                            "the AURA or Talker stage's checkpoint)")
    serve.add_argument("--omni", action="store_true", help="accepted for vLLM-Omni compatibility (always on)")
    serve.add_argument("--trust-remote-code", action="store_true",
                       help="accepted for compatibility; code inside checkpoints is never executed")
    serve.add_argument("--host", default="0.0.0.0",
                       help="address to listen on (default: 0.0.0.0, every interface; 127.0.0.1 for this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    serve.add_argument("--api-key", default=env.current().api_key,
                       help=f"require `Authorization: Bearer KEY` (default: ${env.API_KEY})")
    serve.add_argument("--device", default=None, help="run every stage here (cpu, cuda, cuda:1); default: stage `devices`")
    serve.add_argument("--dtype", default=None, choices=["auto", "bfloat16", "float16", "float32"],
                       help="weights and activations of every stage (default: each stage's `dtype`, else auto: "
                            "bfloat16 on GPU, float32 on CPU)")
    serve.add_argument("--load-format", default=None, choices=["auto", "dummy"],
                       help="dummy: full-size architecture with random weights (benchmarks without download)")
    serve.add_argument("--allowed-local-media-path", default=None,
                       help="folder below which requests may name server-local reference audio (off by default)")
    serve.add_argument("--allowed-media-domains", nargs="+", default=None, metavar="DOMAIN",
                       help="hosts whose http(s) image/video/audio URLs chat requests may use (off by default)")
    serve.add_argument("--cache-dir", default=None, metavar="DIR",
                       help="persistent compile caches and the default voice library (deploy key cache_dir; "
                            "default $XDG_CACHE_HOME/aura-omni or ~/.cache/aura-omni)")
    serve.add_argument("--voice-dir", default=None, metavar="DIR",
                       help="registered voices, kept across restarts and shared by every server given the same "
                            "directory (deploy key voice_dir; default CACHE_DIR/voices)")
    serve.add_argument("--request-timeout", type=float, default=300.0, metavar="SECONDS",
                       help="cancel a chat turn in every stage after this long (504); 0 = no limit")
    serve.add_argument("--drain-timeout", type=float, default=30.0, metavar="SECONDS",
                       help="on SIGTERM, refuse new work and let what is in flight finish for up to this long, then "
                            "exit 0 (docs/deploy.md)")
    serve.add_argument("--distributed-executor-backend", default=None, choices=["ray"],
                       help="ray: run each stage as Ray actors (deploy key distributed_executor_backend; docs/ray.md)")
    serve.add_argument("--ray-address", default=None, metavar="ADDRESS",
                       help="an existing Ray cluster (`ray start --head`'s address; implies --distributed-executor-backend "
                            "ray); default: a local Ray instance")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--keep-alive-on-device-loss", action="store_true",
                       help="when a stage's GPU fails, keep serving 503s (and /health) instead of exiting 1")
    limits = serve.add_argument_group("limits", "request limits (default: the deploy file's `limits:`, else built in)")
    for f in dataclasses.fields(Limits):
        limits.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=f.type, default=None, metavar="N",
                            help=f"default {f.default}")

    tiny = sub.add_parser("make-tiny", help="write tiny random checkpoints of all four stages + deploy files")
    tiny.add_argument("dir")
    tiny.add_argument("--seed", type=int, default=0)
    from .bench.serve import add_cli_args as add_bench_serve_args

    bench = sub.add_parser("bench", help="benchmark a running server")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    add_bench_serve_args(bench_sub.add_parser("serve", help="load a running server like `vllm bench serve`"))
    from .bench.plot import add_cli_args as add_bench_plot_args

    add_bench_plot_args(bench_sub.add_parser("plot", help="saved `bench serve` results on one picture (SVG)"))
    return parser


def load_serve_config(args: argparse.Namespace):
    """The deploy config `serve` runs: the file (stage `model` wins over MODEL) or TTS-only from MODEL, with
    `--distributed-executor-backend` and `--ray-address` over the file's keys (checked like them)."""
    from .deploy import load_deploy_config, parse_deploy_config, single_model_config

    model = args.model or args.model_flag
    backend, ray_address = getattr(args, "distributed_executor_backend", None), getattr(args, "ray_address", None)
    placement = {}
    if backend or ray_address:
        placement = {"distributed_executor_backend": backend or "ray"}
        if ray_address:
            placement["ray_address"] = ray_address
    if args.deploy_config:
        return load_deploy_config(args.deploy_config, default_model=model, overrides=placement)
    if not model:
        raise SystemExit("aura-omni serve: give --deploy-config PATH, or MODEL (a Qwen3-TTS checkpoint)")
    deploy = single_model_config(model)
    if not placement:
        return deploy
    return parse_deploy_config({**deploy.model_dump(exclude_unset=True), **placement}, deploy.source)


def serve_limits(args: argparse.Namespace, deploy) -> Limits:
    """Built-in defaults < the deploy file's `limits:` < `--max-...` flags."""
    return Limits.from_values(deploy.limits, {f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})


def serve_dirs(args: argparse.Namespace, deploy) -> tuple[Path, Path]:
    """(cache directory, voice directory): flags over the deploy file's `cache_dir` / `voice_dir` over defaults."""
    from .layers.cache_dir import resolve_cache_dir, voice_dir_under

    cache_dir = resolve_cache_dir(args.cache_dir or deploy.cache_dir)
    voice_dir = args.voice_dir or deploy.voice_dir
    return cache_dir, Path(voice_dir).expanduser().absolute() if voice_dir else voice_dir_under(cache_dir)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .deploy import DeployConfigError
    from .models.loader import CheckpointError
    from .server.app import create_app
    from .server.drain import FORCED_STOP_S, DrainingServer

    try:
        deploy = load_serve_config(args)
    except DeployConfigError as e:
        print(f"aura-omni serve: invalid deploy config\n{e}", file=sys.stderr)
        return 2
    if args.trust_remote_code or any(s.trust_remote_code for s in deploy.stages):
        log.info("--trust-remote-code accepted for compatibility: aura-omni runs its own model code and never "
                 "executes code shipped inside a checkpoint")
    name = args.served_model_name or args.model or args.model_flag  # None: the AURA (or Talker) stage's model
    if args.drain_timeout < 0:
        print("aura-omni serve: --drain-timeout must be >= 0", file=sys.stderr)
        return 2
    try:
        limits = serve_limits(args, deploy)
    except ValueError as e:
        print(f"aura-omni serve: {e}", file=sys.stderr)
        return 2
    from .layers.cache_dir import use_compile_caches

    cache_dir, voice_dir = serve_dirs(args, deploy)
    try:
        caches = use_compile_caches(cache_dir)  # before the first stage loads: its warm start compiles kernels
    except OSError as e:
        print(f"aura-omni serve: cache directory {cache_dir}: {e.strerror or e}", file=sys.stderr)
        return 2
    log.info("cache directory %s (triton %s, inductor %s); voices in %s", cache_dir, *caches.values(), voice_dir)
    try:
        app = create_app(deploy, name, args.api_key, device=args.device, dtype=args.dtype, limits=limits,
                         voice_dir=voice_dir,
                         load_format=args.load_format, allowed_local_media_path=args.allowed_local_media_path,
                         allowed_media_domains=args.allowed_media_domains,
                         request_timeout_s=args.request_timeout or None)
    except (CheckpointError, RuntimeError, ValueError, OSError) as e:  # OSError: e.g. an unwritable --voice-dir
        print(f"aura-omni serve: cannot start: {e}", file=sys.stderr)
        return 1
    log.info("serving %s (pipeline %s, stages %s) on http://%s:%d", name, deploy.pipeline,
             sorted(deploy.roles), args.host, args.port)
    drain = app.state.server.drain
    drain.timeout_s = args.drain_timeout
    server = DrainingServer(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                           ws="websockets-sansio", ws_max_size=limits.max_ws_message_bytes,
                                           # deflating base64 audio saves little and cost the event loop a tenth
                                           # of its time at 32 realtime sessions
                                           ws_per_message_deflate=False,
                                           timeout_graceful_shutdown=FORCED_STOP_S), drain)
    lost: list[str] = []

    def device_lost(loop) -> None:
        """A stage's GPU failed (layers/device_loss.py): stop serving and exit 1, for a supervisor to restart us."""
        lost.append(loop.name)
        if not args.keep_alive_on_device_loss:
            server.should_exit = True  # open streams end; /health says 503 `device_lost` meanwhile

    app.state.server.runtime.supervisor.on_device_lost = device_lost
    server.run()
    if lost:
        print(f"aura-omni serve: stopped: the GPU of stage {lost[0]} failed (see the log); start the server again",
              file=sys.stderr)
        return 1
    return 0


def make_tiny_command(args: argparse.Namespace) -> int:
    from .testing.make_tiny import make_tiny

    written = make_tiny(args.dir, seed=args.seed)
    for name, path in written.items():
        print(f"{name}: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(args, "log_level", "info").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        if hasattr(signal, "SIGUSR1") and sys.__stderr__ is not None:  # `kill -USR1 <pid>`: every thread's stack
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
        return serve(args)
    if args.command == "bench" and args.bench_command == "plot":
        from .bench.plot import main as bench_plot

        return bench_plot(args)
    if args.command == "bench":
        from .bench.serve import main as bench_serve

        return bench_serve(args)
    return make_tiny_command(args)


if __name__ == "__main__":
    sys.exit(main())
