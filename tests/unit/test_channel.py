"""The socket between the server and a stage's process (placement/channel.py): messages cross whole and in order however
far the reader falls behind."""

import asyncio
import collections
import socket

import numpy as np
import pytest

from aura_omni.placement.channel import KEPT, Channel, FrameReader, encode


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


class Frame:
    """A stand-in for a camera frame (VisionInput): crosses whole once, then by its content key."""
    crosses_once = True

    def __init__(self, key, pixels):
        self.content_key, self.pixels = key, pixels


class Unpicklable:
    def __reduce__(self):
        raise TypeError("does not pickle")


def test_an_object_that_crosses_once_goes_whole_the_first_time_and_by_key_after():
    held, reader = collections.OrderedDict(), FrameReader()
    frame = Frame("k0", np.arange(100_000, dtype=np.uint8))
    first = encode(("call", 1, "generate", ("r1", [frame])), held)
    again = encode(("call", 2, "generate", ("r2", [Frame("k0", np.zeros(1, np.uint8)), frame])), held)
    assert len(first) > 100_000 > 20 * len(again)  # the second names what the reader holds
    (m1,), (m2,) = reader.feed(first), reader.feed(again)
    assert (m1[3][1][0].pixels == frame.pixels).all()
    assert m2[3][1][0] is m2[3][1][1] is m1[3][1][0]  # both resolved to the object the reader keeps


def test_both_sides_drop_the_same_objects_so_a_key_always_names_one_the_reader_holds():
    held, reader = collections.OrderedDict(), FrameReader()
    frames = [Frame(f"k{i}", np.full(1000, i, np.uint8)) for i in range(KEPT + 1)]
    for i, frame in enumerate(frames):  # the first past KEPT pushes k0 out on both sides
        reader.feed(encode(("frame", [frame]), held))
        if i == 0:
            reader.feed(encode(("frame", [frame]), held))  # k0 used again: still the oldest once k1..k128 follow
    assert list(held) == list(reader.kept) == [f"k{i}" for i in range(1, KEPT + 1)]
    resent = encode(("frame", [frames[0]]), held)
    assert len(resent) > 1000  # k0 goes whole again (and k1 is dropped for it)
    (m,) = reader.feed(resent)
    named = encode(("frame", [frames[KEPT]]), held)
    assert len(named) < 1000
    (n,) = reader.feed(named)
    assert (m[1][0].pixels == 0).all() and (n[1][0].pixels == KEPT).all()
    assert list(held) == list(reader.kept) and "k1" not in held


def test_a_message_that_does_not_pickle_leaves_the_reader_s_keys_as_they_were():
    held, reader = collections.OrderedDict(), FrameReader()
    reader.feed(encode(("frame", [Frame("a", np.zeros(3, np.uint8))]), held))
    with pytest.raises(TypeError):
        encode(("frame", [Frame("a", None), Frame("b", None), Unpicklable()]), held)
    assert list(held) == list(reader.kept) == ["a"]
    (m,) = reader.feed(encode(("frame", [Frame("b", np.ones(3, np.uint8))]), held))
    assert (m[1][0].pixels == 1).all()  # b went whole: the failed message's b never reached the reader
