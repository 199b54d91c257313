"""Non-streaming work that stops when its client leaves: a whole turn or utterance is not computed for nobody.

A streaming response notices a gone client through Starlette (it listens for `http.disconnect` while it streams); a
non-streaming one writes only at the end, so it waits for the work or the client's `http.disconnect`, whichever comes
first, and cancels the work (which aborts its engine requests) the moment the client goes.
"""

import asyncio

from fastapi import Request
from fastapi.responses import Response


async def client_gone(request: Request) -> None:
    """Returns when the client has disconnected (the body was read already: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(request: Request, work):
    """Await `work`, cancelling it when the client disconnects first (then a 499 that nobody reads)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(client_gone(request))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return Response(status_code=499)  # nginx's "client closed request"
    finally:
        task.cancel()
        gone.cancel()


async def first_of_stream(request: Request, stream):
    """A stream's first item, pulled before answering so that errors up to it are still a 4xx; the stream is closed
    (its stages stop) when that raises or the client leaves first, in which case the 499 Response comes back."""
    try:
        first = await unless_client_leaves(request, anext(stream))
    except BaseException:
        await stream.aclose()
        raise
    if isinstance(first, Response):
        await stream.aclose()
    return first
