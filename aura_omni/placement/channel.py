"""Pickled messages over a socket between the server and a stage's process (`process_stages`), read and written by an
asyncio event loop itself: no thread hands a message over, so none waits for an interpreter lock that the event loop
and the stage loops keep busy. With a reader thread and a writer thread per pipe, 32 calls at once took 36 / 60 ms
(p50 / p95) to cross while two other threads ran Python, against 5 / 7 ms with none
(`benchmarks/process_crossing_bench.py`; docs/benchmarks.md, session 30).

A message is its pickle behind its length (8 bytes, network order; the top bit says it names kept objects, below).
`send` pickles at once and never blocks: the messages sent while the loop runs its callbacks go out together in one
write as it comes round (a step's 32 text deltas, the Talker's 32 streams' texts), and what the socket does not take
waits in a buffer the loop writes out as the other side reads (32 clips of 192 KB committed together). Most messages
carry no kept object and cross as plain pickles. A step's 32 text deltas took 7.4 us each to send and 12 us of process
time each in all (sending, reading, the loop's rounds) through the kept-object pickler and a write apiece; now 2.6 and
5.9 (`benchmarks/channel_bench.py`, docs/benchmarks.md session 42).

An object whose class sets `crosses_once` (a camera frame: media/vision_preprocess.py VisionInput) crosses whole the
first time and by its `content_key` after: the reader keeps the last KEPT such objects, and the sender keeps the same
keys in the same order (both sides apply the same steps to an LRU, message by message, in the socket's order), so it
knows which the reader holds. A turn's frames went with its prefix prefill while the user spoke, again with the prefix
at the commit and again with the generation, ~1 MB each time: at 32 sessions committing together the last one's
`generate` reached AURA's process ~60 ms after it was sent (docs/benchmarks.md, session 40).
"""

from __future__ import annotations

import asyncio
import collections
import io
import itertools
import pickle
import socket
import struct
from typing import Any, Callable

HEADER = struct.Struct("!Q")
NAMES_KEPT = 1 << 63  # in the header: the message names objects that cross once (read by the kept-object unpickler)
WRITE_BUFFERS = 512  # buffers per write (under the system's IOV_MAX, 1024 on Linux)
READ_BYTES = 1 << 20
KEPT = 128  # objects kept by content key on the reading side (camera frames: ~0.9 MB each)


def encode(message: Any, held: collections.OrderedDict | None = None) -> bytes:
    """A message as it crosses (a message that does not pickle raises here, the sender's error). `held`: the keys the
    reader keeps (a Channel's), updated as the message is pickled; without it, objects that cross once go whole."""
    if held is None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        return HEADER.pack(len(payload)) + payload
    out = io.BytesIO()
    out.write(bytes(HEADER.size))
    pickler = _Pickler(out, held)
    try:
        pickler.dump(message)
    except BaseException:
        pickler.undo()
        raise
    with out.getbuffer() as data:
        HEADER.pack_into(data, 0, (len(data) - HEADER.size) | (NAMES_KEPT if pickler.named else 0))
    return out.getvalue()


def keep(key: str, obj: Any) -> Any:
    """In a message: `obj` whole, for the reader to keep under `key` (resolved by the reader's unpickler)."""
    raise RuntimeError("a kept object is read only by a channel's FrameReader")


def kept(key: str) -> Any:
    """In a message: the object the reader keeps under `key`."""
    raise RuntimeError("a kept object is read only by a channel's FrameReader")


def _hold(store: collections.OrderedDict, key: str, value: Any = None) -> None:
    """The one LRU step both sides take for an object that crosses whole."""
    store[key] = value
    store.move_to_end(key)
    if len(store) > KEPT:
        store.popitem(last=False)


class _Pickler(pickle.Pickler):
    def __init__(self, out: io.BytesIO, held: collections.OrderedDict):
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.held = held
        self.before: collections.OrderedDict | None = None  # `held` as it was, once this message changed it
        self.whole = None  # the object being pickled whole inside its `keep`

    @property
    def named(self) -> bool:
        """The message holds an object that crosses once (whole or by its key)."""
        return self.before is not None

    def reducer_override(self, obj: Any) -> Any:  # called for objects other than the builtin types
        if obj is self.whole:
            self.whole = None
            return NotImplemented
        if not getattr(type(obj), "crosses_once", False) or (key := obj.content_key) is None:
            return NotImplemented
        if self.before is None:
            self.before = collections.OrderedDict(self.held)
        if key in self.held:
            self.held.move_to_end(key)
            return kept, (key,)
        _hold(self.held, key)
        self.whole = obj
        return keep, (key, obj)

    def undo(self) -> None:
        """The message did not pickle: the reader never sees it."""
        if self.before is not None:
            self.held.clear()
            self.held.update(self.before)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data, store: collections.OrderedDict):
        super().__init__(io.BytesIO(data))
        self.store = store

    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name == "keep":
            return self._keep
        if module == __name__ and name == "kept":
            return self._kept
        return super().find_class(module, name)

    def _keep(self, key: str, obj: Any) -> Any:
        _hold(self.store, key, obj)
        return obj

    def _kept(self, key: str) -> Any:
        self.store.move_to_end(key)
        return self.store[key]


def request_id_of(args: tuple) -> str:
    """A call's request id, for the step trace: the first argument of a request's call (placement/host.py)."""
    return args[0] if args and isinstance(args[0], str) else "-"


class FrameReader:
    """Bytes as they arrive -> the whole messages among them, in order."""

    def __init__(self):
        self._buffer = bytearray()
        self.kept: collections.OrderedDict[str, Any] = collections.OrderedDict()  # objects that crossed once

    def feed(self, data: bytes) -> list[Any]:
        self._buffer += data
        messages, pos, end = [], 0, len(self._buffer)
        while end - pos >= HEADER.size:
            (header,) = HEADER.unpack_from(self._buffer, pos)
            size = header & ~NAMES_KEPT
            if end - pos - HEADER.size < size:
                break
            start = pos + HEADER.size
            with memoryview(self._buffer)[start:start + size] as payload:
                messages.append(_Unpickler(payload, self.kept).load() if header & NAMES_KEPT else pickle.loads(payload))
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
                 on_closed: Callable[[], None], frames: FrameReader | None = None,
                 unsent: collections.deque[memoryview] | None = None):
        sock.setblocking(False)
        self.sock, self.loop = sock, loop
        self.closed = False
        self.frames = frames or FrameReader()  # may hold bytes read before (a handshake, another loop)
        # what the socket has not taken yet, message by message (`unsent`: a channel's before over this socket, whose
        # loop closed): taking the sent bytes off the front of one buffer moved the rest each time, quadratic in the
        # backlog (16 turns' frames, 29 MB to AURA's process at once, held the server's event loop ~70 ms;
        # docs/benchmarks.md, session 39)
        self._out: collections.deque[memoryview] = unsent if unsent is not None else collections.deque()
        self._writing = False  # a write is due: on the loop's next round, or when the socket takes more
        # the keys of the objects the reader keeps (`crosses_once`); a Channel made anew over a served socket starts
        # empty, and the reader's older entries are then the first it drops, so every key here is still there
        self._held: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._on_message, self._on_closed = on_message, on_closed
        loop.add_reader(sock.fileno(), self._readable)
        if self._out:
            self._write_soon()

    def send(self, message: Any, kept: bool = False) -> None:
        """Queue `message` behind those sent before, written on the loop's next round; BrokenPipeError once the channel
        is closed. `kept`: it may hold objects that cross once (a call's arguments), else they go whole."""
        if self.closed:
            raise BrokenPipeError("the channel is closed")
        self._out.append(memoryview(encode(message, self._held if kept else None)))
        if not self._writing:
            self._write_soon()

    def _write_soon(self) -> None:
        self._writing = True
        self.loop.call_soon(self._writable)

    def handover(self) -> tuple[socket.socket, FrameReader, collections.deque[memoryview]]:
        """What a new Channel over this socket takes on once this one's loop has closed: the socket, the bytes read
        and the messages not yet written."""
        return self.sock, self.frames, self._out

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
        """Write what is queued, many messages a call, until the socket takes no more (then again once it can)."""
        if self.closed:
            return
        while self._out:
            batch = list(itertools.islice(self._out, WRITE_BUFFERS))
            try:
                sent = self.sock.sendmsg(batch)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:  # the other side is gone: the reader sees it and closes
                self._out.clear()
                break
            full = sent < sum(map(len, batch))
            while sent and sent >= len(self._out[0]):
                sent -= len(self._out.popleft())
            if sent:
                self._out[0] = self._out[0][sent:]
            if full:
                self.loop.add_writer(self.sock.fileno(), self._writable)
                return
        self._writing = False
        self.loop.remove_writer(self.sock.fileno())
