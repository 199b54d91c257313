"""Nothing a request leaves behind grows with the number of requests (issue 31: memory must stay flat under load).

The server runs in this process (serving.ThreadServer, the tiny demo deploy: all six stages), driven by
`scripts/soak.py`'s own jobs: streamed and whole speech, chat with text or speech in, chat left mid-stream,
transcriptions, realtime turns, barge-ins and sockets dropped mid-reply, and hostile requests answered 4xx; each
round is N jobs of that mix and N more of replies cut short (barge-ins, dropped sockets, chats left), so that what a
cancel leaves behind counts N/3 times a round. After a warm-up round, one round and then one more: between the two
censuses no kind of live object may grow (the project's classes, asyncio tasks and futures, metric children) and no
container (dict, list, set, deque) may grow by N/4 entries or more: per-request state kept after its request ended
(a journal, a request's state, a future, a session in a registry, a cache keyed by request id) shows as one of
those. The censuses see the objects the server froze out of garbage collection at start-up too (its registries).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import sys
import time
from pathlib import Path

import pytest
from serving import API_KEY, ThreadServer

from aura_omni.server.chat import MAX_REMEMBERED_AUDIO
from aura_omni.stages.aura.prompt_tokens import PromptTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import soak  # noqa: E402

# unfrozen, the census walks torch's deprecated aliases too (torch.distributed.reduce_op), which warn when touched
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

N = 24  # jobs per round: every kind of the soak's mix at least once, at its weights; then N replies cut short
CUT = ["realtime_barge_in", "realtime_leave", "chat_leave"]
BAR = N // 4  # growth that fails: a third of the cut replies' count, above the few requests a stage's last step holds
# Caches that keep something per request on purpose, each with a bound checked below: the chat audio transcripts
# (`assistant.audio.id` references, OpenAI's 24 hours, at most MAX_REMEMBERED_AUDIO), the prefix cache's block
# registry (at most one entry per KV block) and the AURA prompt's token ids by text span (at most max_texts).
BOUNDED = ("aura_omni.server.chat.AudioTranscripts._items", "aura_omni.engine.block_manager.BlockManager.cached",
           "aura_omni.stages.aura.prompt_tokens.PromptTokenizer._texts")
WATCHED_MODULES = ("aura_omni", "asyncio", "prometheus_client", "websockets", "uvicorn", "starlette", "h11")


def census() -> collections.Counter:
    """Live objects by type, for the modules whose objects a request makes."""
    gc.unfreeze()  # the server freezes its start-up objects (server/gc_pauses.py), and get_objects lists no frozen one
    gc.collect()
    counts = collections.Counter()
    for o in gc.get_objects():
        t = type(o)
        module = t.__dict__.get("__module__")
        if isinstance(o, asyncio.TimerHandle) and o.cancelled():
            continue  # a cancelled timer stays in its loop's queue until due (timer_queue)
        if isinstance(module, str) and module.startswith(WATCHED_MODULES):
            counts[f"{module}.{t.__qualname__}"] += 1
    return counts


CONTAINERS = (dict, list, set, collections.deque)


def containers() -> dict[int, tuple[int, object]]:
    """Every dict, list, set and deque: those the collector tracks, and those it does not (a dict of strings to
    floats, say `request id -> time`, holds no object that could form a cycle) found as the tracked ones' referents;
    those made at start-up too (a registry a request could leave an entry in), which the server froze."""
    gc.unfreeze()
    gc.collect()
    tracked = gc.get_objects()
    found = {id(o): o for o in tracked if isinstance(o, CONTAINERS)}
    for o in tracked:
        for r in gc.get_referents(o):
            if isinstance(r, CONTAINERS) and id(r) not in found:
                found[id(r)] = r
    return {key: (len(o), o) for key, o in found.items()}


def owner(o) -> str:
    """Whose attribute (or which module's global) a container is, for the failure message."""
    for r in gc.get_referrers(o):
        attrs = getattr(r, "__dict__", None)  # 3.11+: an instance may hold its attributes without a dict object
        if isinstance(attrs, dict) and not isinstance(r, type):
            name = next((k for k, v in attrs.items() if v is o), None)
            if name is not None:
                return f"{type(r).__module__}.{type(r).__qualname__}.{name}"
        if isinstance(r, dict):
            for r2 in gc.get_referrers(r):
                if getattr(r2, "__dict__", None) is r:
                    name = next((k for k, v in r.items() if v is o), "?")
                    return f"{type(r2).__module__}.{type(r2).__qualname__}.{name}"
            if "__name__" in r:
                return f"module {r['__name__']}." + next((k for k, v in r.items() if v is o), "?")
    return "an unnamed container"


def timer_queue(o) -> bool:
    """An event loop's queue of cancelled timers: they stay in it until due or purged, whichever loop runs them."""
    return isinstance(o, list) and all(isinstance(h, asyncio.TimerHandle) and h.cancelled() for h in o)


def grown(before: dict, after: dict, by: int) -> list[str]:
    out = []
    for key, (n, o) in after.items():
        if key in before and before[key][1] is o and n - before[key][0] >= by and not timer_queue(o):
            out.append(f"{owner(o)}: {before[key][0]} -> {n} entries, e.g. {repr(list(o)[-2:])[:200]}")
    return out


async def run_jobs(load: soak.Soak, n: int, kinds: list[str]) -> list[str]:
    lanes = asyncio.Semaphore(2)

    async def one(i: int) -> str:
        async with lanes:
            try:
                return await asyncio.wait_for(load.job(kinds[i % len(kinds)]), 120)
            except Exception as e:  # noqa: BLE001 - reported below
                return f"error {kinds[i % len(kinds)]}: {type(e).__name__} {e}"

    return await asyncio.gather(*(one(i) for i in range(n)))


@pytest.mark.slow
def test_live_objects_do_not_grow_with_the_number_of_requests(tiny_dir):
    server = ThreadServer(tiny_dir / "deploy_demo.yaml", model="tiny-tts")
    loop = asyncio.new_event_loop()
    try:
        args = argparse.Namespace(url=server.url, api_key=API_KEY, model="tiny-tts", job_timeout=120, aura_tokens=8,
                                  tts_tokens=12, seed=0)
        load = soak.Soak(args)
        kinds = [kind for kind, weight in soak.WEIGHTS.items() for _ in range(weight)]
        assert len(kinds) <= N

        seen = collections.Counter()  # outcomes by name (a list of them would be growth itself)

        def round_of_jobs() -> None:
            for mix in (kinds, CUT):  # the soak's mix, then replies cut: what a cancel leaves counts N/3 times a round
                outcomes = loop.run_until_complete(run_jobs(load, N, mix))
                assert not [o for o in outcomes if o.startswith("error")], outcomes
                seen.update(outcomes)
                loop.run_until_complete(load.settled())

        round_of_jobs()  # warm-up: lazily made state (tables, graphs, metric children) exists from here on
        round_of_jobs()
        objects, sizes = census(), containers()
        round_of_jobs()
        objects_after, sizes_after = census(), containers()

        more = {k: objects_after[k] - objects[k] for k in objects_after if objects_after[k] - objects[k] >= BAR}
        for _ in range(10):  # on a loaded machine a socket's teardown (its protocol's events) may lag its job's end:
            if not more:  # growth that is kept stays
                break
            time.sleep(0.5)
            objects_after = census()
            more = {k: objects_after[k] - objects[k] for k in objects_after if objects_after[k] - objects[k] >= BAR}
        # the replies were cut as the jobs say: a cancel at the first audio, a socket closed there
        assert seen["barged_in"] and seen["left"], seen
        assert not more, f"live objects grew over {2 * N} more jobs: {more}"
        bigger = [row for row in grown(sizes, sizes_after, by=BAR) if not row.startswith(BOUNDED)]
        assert not bigger, f"containers grew over {2 * N} more jobs:\n" + "\n".join(bigger)
        assert len(server.app.state.chat_audio_transcripts) <= MAX_REMEMBERED_AUDIO
        texts = [o for o in gc.get_objects() if isinstance(o, PromptTokenizer)]
        assert texts and all(len(t._texts) <= t.max_texts for t in texts)

        state = server.app.state.server
        assert state.drain.links == set() and getattr(server.app.state, "realtime_slots").used == 0
        stages = state.runtime.stage_stats()
        assert all(not c.get("in_flight") and not c.get("queued") for c in stages.values()), stages
    finally:
        loop.run_until_complete(load.client.aclose())
        loop.close()
        server.stop()
