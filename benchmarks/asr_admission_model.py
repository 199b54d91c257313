"""A model of the ASR stage's steps under commits arriving at a steady rate, deciding admissions with the stage's own
rule (`stages/asr/prompt_hold.py` PromptHold): transcript latency p50 / p95 (ms, arrival to the last token) for
each spacing of the commits and each hold factor. Steps run one after another: a step that takes new clips costs
`prompt_ms + per_clip_ms` a clip, one that only decodes `decode_ms`; each clip needs `tokens` tokens, its first from
its prompt step. The default costs are an H100's under 64 live sessions (docs/benchmarks.md, session 34).

    python benchmarks/asr_admission_model.py [--gaps 10 20 31 45 60] [--factors 0 0.5 1]
"""

import argparse

import numpy as np

from aura_omni.stages.asr.prompt_hold import PromptHold


def transcript_ms(arrivals: list[float], factor: float, *, prompt_ms: float, per_clip_ms: float, decode_ms: float,
                  tokens: int, max_hold_ms: float) -> np.ndarray:
    now, reads = 0.0, [0.0]  # the model's time and what the stage's clock reads, ms
    hold = PromptHold(factor, max_hold_ms / 1000, clock=lambda: reads[0] / 1000)
    arrivals = sorted(arrivals)
    nxt, waiting, decoding, done = 0, [], {}, []
    while len(done) < len(arrivals):
        while nxt < len(arrivals) and arrivals[nxt] <= now:
            reads[0] = arrivals[nxt]  # added when it arrived
            hold.arrived()
            waiting.append(arrivals[nxt])
            nxt += 1
        if not waiting and not decoding:
            now = arrivals[nxt]
            continue
        reads[0] = now
        admitted = []
        if waiting and hold.admit([t / 1000 for t in waiting], len(decoding)):
            admitted, waiting = waiting, []
        took = prompt_ms + per_clip_ms * len(admitted) if admitted else decode_ms
        hold.stepped(took / 1000, bool(admitted))
        now += took
        for arrival in list(decoding):
            decoding[arrival] += 1
        for arrival in admitted:
            decoding[arrival] = 1
        for arrival, made in list(decoding.items()):
            if made >= tokens:
                done.append(now - arrival)
                del decoding[arrival]
    return np.array(done)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gaps", type=float, nargs="+", default=[5, 10, 20, 31, 45, 60, 100], help="ms between commits")
    ap.add_argument("--factors", type=float, nargs="+", default=[0, 0.5, 1])
    ap.add_argument("--seconds", type=float, default=3.0, help="of commits")
    ap.add_argument("--prompt-ms", type=float, default=22.0)
    ap.add_argument("--per-clip-ms", type=float, default=1.0)
    ap.add_argument("--decode-ms", type=float, default=4.6)
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--max-hold-ms", type=float, default=100.0)
    args = ap.parse_args()
    costs = dict(prompt_ms=args.prompt_ms, per_clip_ms=args.per_clip_ms, decode_ms=args.decode_ms, tokens=args.tokens,
                 max_hold_ms=args.max_hold_ms)
    rng = np.random.default_rng(0)
    print("| commits every | " + " | ".join(f"hold factor {f:g}" for f in args.factors) + " |")
    print("|---|" + "---|" * len(args.factors))
    for gap in args.gaps:
        arrivals = [k * gap + rng.uniform(0, 5) for k in range(int(1000 * args.seconds / gap))]
        cells = []
        for factor in args.factors:
            ms = transcript_ms(arrivals, factor, **costs)
            cells.append(f"{np.percentile(ms, 50):.0f} / {np.percentile(ms, 95):.0f}")
        print(f"| {gap:g} ms | " + " | ".join(cells) + " |")
    burst = [rng.uniform(0, 15) for _ in range(32)]
    cells = [transcript_ms(burst, f, **costs) for f in args.factors]
    print("| 32 at once | " + " | ".join(f"{np.percentile(c, 50):.0f} / {np.percentile(c, 95):.0f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
