"""AURA alone, a camera turn as a realtime session and as a chat request make it: the prompt through the camera input
prefilled first (the turn's prefix), then the turn with its words, greedy and with a logit_bias. Prints each reply's
text and ids, so a reply that is one token repeated (id 0, "!", is what NaN logits give) or a bias that does not hold
shows at once. Session 11 found that way that realtime turns (a 2-frame video clip) went NaN on the H200 while chat
turns (two images) did not: `--off` names the fast paths to turn off and `--watch-graphs` compares every prefill-graph
replay with the same step run eagerly, which narrowed it to the Triton paged-prefill kernel (docs/benchmarks.md).

    python3 scripts/aura_camera_turn_check.py [--deploy-config configs/aura_omni_duplex_8.yaml] [--load-format dummy]
        [--off prefill_graphs fast_attention gemv pdl] [--watch-graphs] [--frame-size 640x480]
"""

import argparse
import asyncio
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aura_omni.deploy import AURA, load_deploy_config  # noqa: E402
from aura_omni.stages.aura.stage import AuraPipelineStage  # noqa: E402
from aura_omni.media.request_media import load_image_input, vision_configs  # noqa: E402
from aura_omni.pipeline.processors import asr2aura  # noqa: E402
from aura_omni.session.frames import FrameWindow  # noqa: E402

WORDS = "What is on the table in front of me?"
THE = 279  # " the"


def camera_inputs(kind: str, checkpoint: str, size: tuple[int, int]) -> list:
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8) for _ in range(2)]
    if kind == "images":  # a chat request's two camera frames
        return [load_image_input(f, None, checkpoint) for f in frames]
    window = FrameWindow(max_frames=2, threshold=1.0)  # a realtime session's camera window
    for f in frames:
        window.push(f)
    return [window.clip().to_vision_input(vision_configs(checkpoint)[1])]


async def reply(stage: AuraPipelineStage, prompt, vision, rid: str, sampling: dict) -> tuple[str, list[int]]:
    text, ids = "", []
    async for d in stage.generate(prompt, vision, request_id=rid, sampling=sampling):
        text, ids = text + d.text, ids + list(d.token_ids)
    return text, ids


def watch_prefill_graphs() -> None:
    """Print each replayed prefill graph's finiteness beside the same step run eagerly over the same buffers."""
    from aura_omni.engine.prefill_graphs import PrefillGraphs

    replay = PrefillGraphs.run

    def run(self, t, slots, cu, seq_lens, *rest):
        out = replay(self, t, slots, cu, seq_lens, *rest).clone()
        if t in self.graphs:
            eager = self._step(t)[:out.shape[0]].float()
            print(f"  prefill graph {t}: {out.shape[0]} tokens of {len(seq_lens)} sequences; replay finite "
                  f"{bool(out.isfinite().all())}, eager finite {bool(eager.isfinite().all())}, "
                  f"max |replay - eager| {float((out.float() - eager).abs().max()):.3g}")
        return out

    PrefillGraphs.run = run


async def main(args) -> int:
    if args.watch_graphs:
        watch_prefill_graphs()
    deploy = load_deploy_config(args.deploy_config)
    spec = next(s for s in deploy.stages if deploy.role_of(s) == AURA)
    for switch in args.off:  # e.g. --off prefill_graphs: which fast path a bad reply needs
        setattr(spec.kernels, switch, False)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    stage = AuraPipelineStage.load(spec, device, torch.bfloat16 if device == "cuda" else torch.float32,
                                   args.load_format)
    bad = 0
    for kind in ("images", "video"):  # the checkpoint's preprocessing configs, as the server reads them
        vision = camera_inputs(kind, spec.model, args.frame_size)
        items = ["image"] * len(vision) if kind == "images" else ["video"]
        with torch.inference_mode():  # through the stage's cache: the prefill below reuses this encoding
            embeds, deepstack = stage.vision_cache(vision)
        finite = all(bool(torch.isfinite(t).all()) for t in (embeds, *deepstack))
        print(f"{kind}: vision embeddings {'finite' if finite else 'NOT FINITE'}, max |x| {float(embeds.abs().max()):.3g}")
        prefix = await stage.prefill_prefix(asr2aura(None, vision_items=items), vision, request_id=f"{kind}-prefix")
        prompt = asr2aura(None, text_parts=[WORDS], vision_items=items)
        text, ids = await reply(stage, prompt, vision, f"{kind}-greedy", {"max_tokens": 16, "temperature": 0.0})
        biased, bias_ids = await reply(stage, prompt, vision, f"{kind}-biased",
                                       {"max_tokens": 8, "temperature": 0.5, "logit_bias": {str(THE): 100.0}})
        one_token = len(set(ids)) == 1
        bias_holds = set(bias_ids) == {THE}
        bad += one_token or not bias_holds
        print(f"{kind}: prefix {prefix} tokens; greedy {text!r} {ids}; biased {biased!r} "
              f"({'bias holds' if bias_holds else 'BIAS DOES NOT HOLD'}){'; ONE TOKEN REPEATED' if one_token else ''}")
    stage.close()
    return 1 if bad else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deploy-config", default="configs/aura_omni_duplex_8.yaml")
    p.add_argument("--load-format", default="dummy")
    p.add_argument("--off", nargs="*", default=[], choices=["fast_attention", "gemv", "pdl", "prefill_graphs"],
                   help="kernel switches to turn off for AURA")
    p.add_argument("--watch-graphs", action="store_true", help="check each prefill graph replay against eager")
    p.add_argument("--frame-size", type=lambda s: tuple(int(x) for x in s.split("x")), default=(640, 480))
    sys.exit(asyncio.run(main(p.parse_args())))
