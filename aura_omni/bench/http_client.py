"""A lean HTTP/1.1 client for `bench serve`: keep-alive connections, a JSON body out, a streamed body in.

httpx's connection pool (httpcore 1.0) checks every connection for every queued request whenever one is taken or
given back, so a burst of 64 streamed requests spends its client's time there: 64 requests to a server that answers
at once saw their first byte after ~300 / ~470 ms (p50 / p95) with httpx and ~11 / ~37 ms with this client
(docs/benchmarks.md, session 28). What a benchmark times must be the server, not its client's pool.
The interface is the part of httpx's the backends use (`stream`, `status_code`, `headers`, `aread`,
`aiter_bytes`, `aiter_lines`), so `--http-client httpx` can still time what an httpx client sees.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import ssl
from contextlib import asynccontextmanager
from typing import AsyncIterator
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 65536


class HttpError(Exception):
    """The server's reply could not be read as HTTP/1.1."""


class ServerClosed(HttpError):
    """The server closed the connection before answering."""


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class Response:
    """One reply: status and headers read, the body read as it is consumed."""

    def __init__(self, conn: Connection, status_code: int, headers: dict[str, str]):
        self.conn, self.status_code, self.headers = conn, status_code, headers
        self.finished = False  # the body was read to its end: the connection can serve another request
        self.reusable = headers.get("connection", "").lower() != "close"

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        reader = self.conn.reader
        if self.finished:
            return
        if self.status_code in (204, 304):
            pass  # no body whatever the headers say
        elif self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                line = await reader.readline()
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise HttpError(f"bad chunk size line {line[:40]!r}") from None
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
                        pass
                    break
                data = await reader.readexactly(size + 2)
                yield data[:-2]
        elif (length := self.headers.get("content-length")) is not None:
            left = int(length)
            while left > 0:
                data = await reader.read(min(left, 1 << 16))
                if not data:
                    raise HttpError("the connection closed before the body's end")
                left -= len(data)
                yield data
        else:  # the body ends with the connection
            self.reusable = False
            while data := await reader.read(1 << 16):
                yield data
        self.finished = True

    async def aiter_lines(self) -> AsyncIterator[str]:
        pending, decoder = "", codecs.getincrementaldecoder("utf-8")("replace")  # a character may span two chunks
        async for data in self.aiter_bytes():
            pending += decoder.decode(data)
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line.rstrip("\r")
        if pending:
            yield pending

    async def aread(self) -> bytes:
        return b"".join([data async for data in self.aiter_bytes()])


class HttpClient:
    """Connections to one server (scheme, host and port of `base_url`), each kept for the next request once its
    reply was read to the end; any other end closes it."""

    def __init__(self, base_url: str, connect_timeout: float = 30.0):
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL: {base_url}")
        self.host = url.hostname or "localhost"
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if url.scheme == "https" else None
        self.authority = url.netloc.rsplit("@", 1)[-1]
        self.connect_timeout = connect_timeout
        self.idle: list[Connection] = []

    async def connect(self) -> Connection:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=MAX_HEADER_BYTES), self.connect_timeout)
        return Connection(reader, writer)

    async def send(self, request: bytes) -> tuple[Connection, Response]:
        """The request on an idle connection, or on a new one when none is left or the server closed the idle one
        before answering (its keep-alive ran out: nothing of the request was read)."""
        while self.idle:
            conn = self.idle.pop()
            if conn.reader.at_eof():
                conn.close()
                continue
            try:
                return conn, await _exchange(conn, request)
            except (ConnectionError, ServerClosed):
                continue
        conn = await self.connect()
        return conn, await _exchange(conn, request)

    @asynccontextmanager
    async def stream(self, method: str, url: str, json: object = None,  # noqa: A002 - httpx's keyword
                     headers: dict[str, str] | None = None) -> AsyncIterator[Response]:
        """Send one request; the reply's status and headers are read when the block starts, its body in it."""
        path = urlsplit(url)
        target = (path.path or "/") + (f"?{path.query}" if path.query else "")
        body = b"" if json is None else _json_bytes(json)
        head = [f"{method} {target} HTTP/1.1", f"Host: {self.authority}", f"Content-Length: {len(body)}"]
        if json is not None:
            head.append("Content-Type: application/json")
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        conn, response = await self.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        try:
            yield response
        finally:
            if response.finished and response.reusable:
                self.idle.append(conn)
            else:  # not read to its end (an error, a timeout, a reader that stopped): nothing else can use it
                conn.close()

    async def aclose(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


async def _exchange(conn: Connection, request: bytes) -> Response:
    """The request out, the reply's head in; the connection is closed if either fails (a bad reply, or the request's
    timeout: its state is unknown)."""
    try:
        conn.writer.write(request)
        await conn.writer.drain()
        return await _read_head(conn)
    except BaseException:
        conn.close()
        raise


async def _read_head(conn: Connection) -> Response:
    while True:
        try:
            head = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            raise ServerClosed("the server closed the connection before answering") from e
        except asyncio.LimitOverrunError as e:
            raise HttpError("the reply's headers are too long") from e
        status_line, *lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HttpError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
        status = int(parts[1])
        if status >= 200:
            break  # 1xx (100 Continue, 103 Early Hints) come before the real reply
    headers = {}
    for line in lines:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return Response(conn, status, headers)


def _json_bytes(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
