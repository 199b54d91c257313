"""Where a server's start goes: `Runtime.load` and the warm start of a deploy file under cProfile, as `aura-omni
serve` runs them, then the functions that took the most time (cumulative) and the wall time of each part.

    python scripts/startup_profile.py configs/qwen3_tts.yaml --load-format dummy [--top 45] [--out prof.txt]
"""

import argparse
import asyncio
import cProfile
import io
import logging
import pstats
import time

from aura_omni.deploy import load_deploy_config
from aura_omni.pipeline.runtime import Runtime


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("deploy")
    p.add_argument("--load-format", default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--top", type=int, default=45)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    deploy = load_deploy_config(args.deploy)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    runtime = Runtime.load(deploy, device=args.device, load_format=args.load_format)
    t_load = time.perf_counter()
    asyncio.run(runtime.warm_up())
    prof.disable()
    t_warm = time.perf_counter()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).sort_stats("cumulative")
    stats.print_stats(args.top)
    stats.print_stats("aura_omni", args.top)  # the project's own functions
    stats.sort_stats("tottime").print_stats(25)
    report = f"load {t_load - t0:.1f} s, warm start {t_warm - t_load:.1f} s\n{buf.getvalue()}"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    runtime.close()


if __name__ == "__main__":
    main()
