"""Pickled messages over a socket between the server and a stage's process (`process_stages`), read and written by an
asyncio event loop itself: no thread hands a message over, so none waits for an interpreter lock that the event loop
and the stage loops keep busy. With a reader thread and a writer thread per pipe, 32 calls at once took 36 / 60 ms
(p50 / p95) to cross while two other threads ran Python, against 5 / 7 ms with none
(`benchmarks/process_crossing_bench.py`; docs/benchmarks.md, session 30).

A message is its pickle behind its length (8 bytes, network order). `send` never blocks: what the socket does not take
waits in a buffer the loop writes out as the other side reads (32 clips of 192 KB committed together).
"""

from __future__ import annotations

import asyncio
import collections
import pickle
import socket
import struct
from typing import Any, Callable

HEADER = struct.Struct("!Q")
READ_BYTES = 1 << 20


def encode(message: Any) -> bytes:
    """A message as it crosses (a message that does not pickle raises here, the sender's error)."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def request_id_of(args: tuple) -> str:
    """A call's request id, for the step trace: the first argument of a request's call (placement/host.py)."""
    return args[0] if args and isinstance(args[0], str) else "-"


class FrameReader:
    """Bytes as they arrive -> the whole messages among them, in order."""

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        self._buffer += data
        messages, pos, end = [], 0, len(self._buffer)
        while end - pos >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer, pos)
            if end - pos - HEADER.size < size:
                break
            start = pos + HEADER.size
            messages.append(pickle.loads(self._buffer[start:start + size]))
            pos = start + size
        del self._buffer[:pos]
        return messages


def receive(sock: socket.socket, frames: FrameReader, timeout_s: float | None) -> list[Any]:
    """Blocking (before an event loop serves the socket): the messages of one read, [] if none came within
    `timeout_s`; EOFError once the other side has closed."""
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(READ_BYTES)
    except (socket.timeout, InterruptedError):
        return []
    if not data:
        raise EOFError
    return frames.feed(data)


class Channel:
    """A connected socket served by `loop`: `on_message(message)` for each message read, `on_closed()` once the other
    side is gone. Every method runs on the loop's thread."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, on_message: Callable[[Any], None],
                 on_closed: Callable[[], None], frames: FrameReader | None = None):
        sock.setblocking(False)
        self.sock, self.loop = sock, loop
        self.closed = False
        self.frames = frames or FrameReader()  # may hold bytes read before (a handshake, another loop)
        # what the socket has not taken yet, message by message: taking the sent bytes off the front of one buffer
        # moved the rest each time, quadratic in the backlog (16 turns' frames, 29 MB to AURA's process at once,
        # held the server's event loop ~70 ms; docs/benchmarks.md, session 39)
        self._out: collections.deque[memoryview] = collections.deque()
        self._on_message, self._on_closed = on_message, on_closed
        loop.add_reader(sock.fileno(), self._readable)

    def send(self, message: Any) -> None:
        """Queue `message` behind those sent before; BrokenPipeError once the channel is closed."""
        if self.closed:
            raise BrokenPipeError("the channel is closed")
        data = memoryview(encode(message))
        if self._out:
            self._out.append(data)
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # the other side is gone: the reader sees it and closes
            return
        if sent < len(data):
            self._out.append(data[sent:])
            self.loop.add_writer(self.sock.fileno(), self._writable)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.loop.is_closed():
            self.loop.remove_reader(self.sock.fileno())
            self.loop.remove_writer(self.sock.fileno())
        self.sock.close()

    def _readable(self) -> None:
        try:
            data = self.sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            self._on_closed()
            return
        for message in self.frames.feed(data):
            self._on_message(message)

    def _writable(self) -> None:
        while self._out:
            head = self._out[0]
            try:
                sent = self.sock.send(head)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the other side is gone: the reader sees it and closes
                self._out.clear()
                break
            if sent < len(head):
                self._out[0] = head[sent:]
                return
            self._out.popleft()
        self.loop.remove_writer(self.sock.fileno())
