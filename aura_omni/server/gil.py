"""The interpreter lock's switch interval for a server of many threads.

Every stage loop is a thread that launches GPU work through torch, and torch lets go of the interpreter lock in each
call; taking it back waits until the thread holding it gives it up, at the latest after Python's switch interval
(5 ms by default). While the event loop ran Python for 32 realtime sessions committing at once, the ASR stage's first
step took ~120 ms where the engine alone takes ~30 (docs/benchmarks.md, session 20). A shorter interval bounds each
wait; the cost is more frequent hand-offs for a thread that runs Python without pause.
"""

import logging
import sys

log = logging.getLogger(__name__)


def set_switch_interval(ms: float) -> None:
    """The process's switch interval (the deploy's `gil_switch_interval_ms`)."""
    sys.setswitchinterval(ms / 1000)
    log.info("interpreter lock switch interval %.2f ms", 1000 * sys.getswitchinterval())
