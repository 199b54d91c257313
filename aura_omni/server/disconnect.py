"""Non-streaming work that stops when its client leaves: a whole turn or utterance is not computed for nobody.

A streaming response notices a gone client when its next write fails; a non-streaming one writes only at the
end, so it polls the connection while the work runs and cancels the work (which aborts its engine requests).
"""

import asyncio

from fastapi import Request
from fastapi.responses import Response

DISCONNECT_POLL_S = 0.25  # how often the connection is checked


async def unless_client_leaves(request: Request, work):
    """Await `work`, cancelling it when the client disconnects first (then a 499 that nobody reads)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return Response(status_code=499)  # nginx's "client closed request"
    finally:
        task.cancel()
