"""`bench serve`'s own HTTP/1.1 client against a real socket: what it sends, how it reads each kind of body, when it
keeps a connection and when it must not."""

import asyncio
import json

import pytest

from aura_omni.bench.backends import BACKENDS, BenchConfig
from aura_omni.bench.http_client import HttpClient, HttpError


class Server:
    """An asyncio server answering each request with the next of `replies` (bytes, or a coroutine function given
    the writer); records the requests it read and counts its connections."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests: list[tuple[str, dict, bytes]] = []
        self.connections = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                line, *lines = head.decode().split("\r\n")
                headers = {k.lower(): v.strip() for k, v in (h.split(":", 1) for h in lines if ":" in h)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                self.requests.append((line, headers, body))
                reply = self.replies.pop(0)
                if callable(reply):
                    if await reply(writer) == "close":
                        return
                else:
                    writer.write(reply)
                    await writer.drain()
        finally:
            writer.close()


def chunked(*pieces: bytes, ctype="audio/pcm", status="200 OK") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ntransfer-encoding: chunked\r\n\r\n".encode() + body


def sized(body: bytes, status="200 OK", ctype="application/json") -> bytes:
    return f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_a_request_goes_out_as_http_1_1_with_its_json_body_and_headers():
    async def main():
        async with Server(sized(b"{}")) as srv:
            client = HttpClient(srv.url)
            async with client.stream("POST", srv.url + "/v1/audio/speech?x=1", json={"input": "hé"},
                                     headers={"Authorization": "Bearer sk"}) as r:
                assert r.status_code == 200 and await r.aread() == b"{}"
            await client.aclose()
            return srv.requests

    (line, headers, body), = run(main())
    assert line == "POST /v1/audio/speech?x=1 HTTP/1.1"
    assert headers["host"].startswith("127.0.0.1:") and headers["authorization"] == "Bearer sk"
    assert headers["content-type"] == "application/json" and json.loads(body) == {"input": "hé"}


def test_a_chunked_body_is_read_as_it_arrives_and_its_connection_kept():
    async def main():
        more = asyncio.Event()

        async def streaming(writer):
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\n")
            await writer.drain()
            await more.wait()  # the rest only once the client has the first piece
            writer.write(b"2;ext=1\r\nef\r\n0\r\nx-trailer: 1\r\n\r\n")
            await writer.drain()

        async with Server(streaming, chunked(b"again")) as srv:
            client = HttpClient(srv.url)
            pieces = []
            async with client.stream("POST", "/a", json={}) as r:
                async for data in r.aiter_bytes():
                    pieces.append(data)
                    more.set()
            async with client.stream("POST", "/b", json={}) as r:
                second = await r.aread()
            await client.aclose()
            return pieces, second, srv.connections

    pieces, second, connections = run(main())
    assert pieces == [b"abcd", b"ef"] and second == b"again" and connections == 1


def test_sse_lines_are_split_across_chunks_and_an_error_status_is_read_whole():
    async def main():
        async with Server(chunked(b"data: {\"a\"", b": 1}\r\n\r\ndata: \xc3", b"\xa9\n\n", ctype="text/event-stream"),
                          sized(b'{"error": {"message": "bad"}}', status="400 Bad Request")) as srv:
            client = HttpClient(srv.url)
            async with client.stream("POST", "/chat", json={}) as r:
                lines = [line async for line in r.aiter_lines()]
            async with client.stream("POST", "/chat", json={}) as r:
                error = (r.status_code, json.loads(await r.aread()))
            await client.aclose()
            return lines, error, srv.connections

    lines, error, connections = run(main())
    assert lines == ['data: {"a": 1}', "", "data: é", ""] and error == (400, {"error": {"message": "bad"}})
    assert connections == 1


def test_a_body_that_ends_with_the_connection_or_is_left_unread_closes_it():
    async def until_close(writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: audio/pcm\r\n\r\nxyz")
        return "close"

    async def main():
        async with Server(until_close, chunked(b"a", b"b"), sized(b"{}")) as srv:
            client = HttpClient(srv.url)
            async with client.stream("POST", "/", json={}) as r:
                whole = await r.aread()
            async with client.stream("POST", "/", json={}) as r:
                async for _ in r.aiter_bytes():
                    break  # the reader stops after the first piece: the rest is still on the wire
            async with client.stream("POST", "/", json={}) as r:
                last = await r.aread()
            await client.aclose()
            return whole, last, srv.connections

    whole, last, connections = run(main())
    assert whole == b"xyz" and last == b"{}" and connections == 3


def test_an_idle_connection_the_server_closed_is_replaced_without_failing_the_request():
    async def close_after(writer):
        writer.write(sized(b"1"))
        await writer.drain()
        return "close"  # after answering, as a server whose keep-alive ran out

    async def main():
        async with Server(close_after, sized(b"2")) as srv:
            client = HttpClient(srv.url)
            async with client.stream("POST", "/", json={}) as r:
                first = await r.aread()
            await asyncio.sleep(0.05)  # the close reaches the client while the connection is idle
            async with client.stream("POST", "/", json={}) as r:
                second = await r.aread()
            await client.aclose()
            return first, second, srv.connections

    assert run(main()) == (b"1", b"2", 2)


def test_a_reply_that_is_not_http_is_an_error():
    async def main():
        async with Server(b"SSH-2.0-OpenSSH\r\n\r\n") as srv:
            client = HttpClient(srv.url)
            with pytest.raises(HttpError, match="status line"):
                async with client.stream("POST", "/", json={}):
                    pass
            await client.aclose()

    run(main())


@pytest.mark.parametrize("http_client", ["builtin", "httpx"])
def test_the_speech_backend_times_a_streamed_reply_through_either_client(http_client):
    async def main():
        async with Server(chunked(b"\0\0" * 2400, b"\0\0" * 2400)) as srv:
            backend = BACKENDS["speech"](BenchConfig(base_url=srv.url, http_client=http_client))
            try:
                result = await backend.request("Say this.")
            finally:
                await backend.aclose()
            return result, json.loads(srv.requests[0][2])

    result, body = run(main())
    assert result.ok and result.audio_seconds == pytest.approx(0.2) and 0 < result.ttfa <= result.latency
    assert body["input"] == "Say this." and body["stream"] is True
