"""Continuous batching: which sequences run this step and how many tokens each feeds.

Every step spends a token budget (`max_num_batched_tokens`): running sequences first (a decode is one
token, an unfinished prefill continues with the next chunk), then waiting ones in arrival order while
fewer than `max_num_seqs` run. When the KV blocks run out, the most recently admitted running
sequence is preempted: its blocks are freed and it waits at the head of the queue to be recomputed
(prompt + what it generated so far). The oldest running sequence is never preempted, and start-up
guarantees one `max_model_len` sequence fits, so the engine always makes progress.

A model adapter may say a sequence cannot run yet (`ready`: the Talker's next text row has not arrived): such a
sequence keeps its blocks and its seat but is left out of the step, and does not hold back the others.
"""

from collections import deque
from dataclasses import dataclass
from itertools import chain
from typing import Callable

from aura_omni.engine.block_manager import BlockManager
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledSeq:
    seq: Sequence
    start: int  # first token fed this step (= tokens already cached)
    num_tokens: int  # tokens fed this step

    @property
    def end(self) -> int:
        return self.start + self.num_tokens

    @property
    def samples(self) -> bool:
        """The step reaches the sequence's last token, so it yields a new one."""
        return self.end == self.seq.num_tokens


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq]
    preempted: list[Sequence]
    seats_full: bool = False  # every seat (max_num_seqs) taken while requests wait for one: the stage is seat-bound

    @property
    def is_decode(self) -> bool:
        return all(s.num_tokens == 1 for s in self.scheduled)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager,
                 ready: Callable[[Sequence], bool] | None = None):
        self.config = config
        self.blocks = block_manager
        self.ready = ready  # None: every sequence can always run
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: the last one is preempted first
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    @property
    def seat_free(self) -> bool:
        """Fewer than `max_num_seqs` sequences run: a waiting one may be admitted."""
        return len(self.running) < self.config.max_num_seqs

    def has_work(self) -> bool:
        """Whether a step would run anything: sequences waiting for input do not count, nor do waiting ones while every
        seat is taken (the Talker's seats full of rows waiting for AURA's text made its loop spin, a step every 0.3 ms
        doing nothing but holding the interpreter lock; a row's input or end wakes the loop)."""
        if self.ready is None:
            return bool(self.waiting or self.running)
        return any(map(self.ready, chain(self.running, self.waiting if self.seat_free else ())))

    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledSeq] = []
        preempted: list[Sequence] = []
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            if self.ready is not None and not self.ready(seq):
                i += 1
                continue
            n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            while not self.blocks.grow(seq, n):
                victim = self.running[-1]
                if victim is seq and i == 0:  # alone and still out of blocks: cannot happen (see startup check)
                    raise RuntimeError(f"KV cache cannot hold one sequence ({seq}); raise the KV budget")
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                scheduled.append(ScheduledSeq(seq, seq.num_computed_tokens, n))
                budget -= n
                i += 1
                continue
            break  # seq itself was preempted: everything after it already was
        while self.waiting and budget > 0 and self.seat_free and not preempted:
            seq = self.waiting[0] if self.ready is None else next((s for s in self.waiting if self.ready(s)), None)
            if seq is None:
                break
            n = self.blocks.admit(seq, budget)
            if n == 0:
                break  # first come, first served: later requests wait too
            self.waiting.remove(seq)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            scheduled.append(ScheduledSeq(seq, seq.num_computed_tokens, n))
            budget -= n
        return SchedulerOutput(scheduled, preempted, seats_full=bool(self.waiting) and not self.seat_free)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.free_blocks(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Finished or aborted: leave the queues and free the blocks now."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free_blocks(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = seq.finish_reason or reason
