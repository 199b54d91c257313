"""What a small message costs to cross between the server and a stage's process (placement/channel.py): a stage step's
text deltas, one per stream, sent in one event-loop round (as a stage process sends AURA's 32 sessions' tokens, and the
server the Talker's 32 streamed texts), over a socket pair read by the same loop. Reports the sender's time per message
and the process time per message of sending, reading and the loop's rounds, best of `--repeats`.

    python benchmarks/channel_bench.py [--streams 32] [--rounds 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time

from aura_omni.placement.channel import Channel
from aura_omni.stages.aura.stage import AuraDelta


async def rounds(streams: int, count: int) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    total, got = streams * count, 0
    done = loop.create_future()

    def on_message(_) -> None:
        nonlocal got
        got += 1
        if got == total:
            done.set_result(None)

    sender = Channel(ours, loop, lambda _: None, lambda: None)
    receiver = Channel(theirs, loop, on_message, lambda: None)
    cpu, sending = time.process_time(), 0.0
    for _ in range(count):
        t = time.perf_counter()
        for i in range(streams):
            sender.send(("item", i, AuraDelta(" word", [12345])))
        sending += time.perf_counter() - t
        await asyncio.sleep(0)  # the loop comes round: the writes and the reads of this round
    await done
    cpu = time.process_time() - cpu
    sender.close()
    receiver.close()
    return sending / total, cpu / total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=32, help="messages sent in one loop round")
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    results = [asyncio.run(rounds(args.streams, args.rounds)) for _ in range(args.repeats)]
    send, cpu = min(r[0] for r in results), min(r[1] for r in results)
    print(f"{args.streams} messages a round: send {send * 1e6:.1f} us a message, send + read + the loop's rounds "
          f"{cpu * 1e6:.1f} us of process time a message")


if __name__ == "__main__":
    main()
