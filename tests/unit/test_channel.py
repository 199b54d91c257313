"""The socket between the server and a stage's process (placement/channel.py): messages cross whole and in order however
far the reader falls behind."""

import asyncio
import socket

import numpy as np

from aura_omni.placement.channel import Channel


def test_a_backlog_larger_than_the_socket_buffer_arrives_whole_and_in_order():
    async def main():
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        got = []
        sender = Channel(ours, loop, lambda m: None, lambda: None)
        done = loop.create_future()

        def on_message(message):
            got.append(message)
            if len(got) == 40:
                done.set_result(None)

        receiver = Channel(theirs, loop, on_message, lambda: None)
        frames = [np.full(300_000, i, dtype=np.uint8) for i in range(40)]  # 12 MB: far past the socket's buffer
        for i, frame in enumerate(frames):
            sender.send(("frame", i, frame))
        assert sender._out, "the socket took everything at once: the backlog path was not exercised"
        await asyncio.wait_for(done, 30)
        assert not sender._out  # the writer drained it and stopped
        sender.close()
        receiver.close()
        return got

    got = asyncio.run(main())
    assert [m[1] for m in got] == list(range(40))
    assert all(m[2].shape == (300_000,) and (m[2] == i).all() for i, m in enumerate(got))
