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
        await asyncio.sleep(0)  # the loop's round that writes
        assert sender._out, "the socket took everything at once: the backlog path was not exercised"
        await asyncio.wait_for(done, 30)
        assert not sender._out  # the writer drained it and stopped
        sender.close()
        receiver.close()
        return got

    got = asyncio.run(main())
    assert [m[1] for m in got] == list(range(40))
    assert all(m[2].shape == (300_000,) and (m[2] == i).all() for i, m in enumerate(got))


def test_the_messages_of_one_round_go_out_in_one_write_and_arrive_in_order():
    async def main():
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        reads, got = [], []
        done = loop.create_future()
        sender = Channel(ours, loop, lambda m: None, lambda: None)
        receiver = Channel(theirs, loop, got.append, lambda: None)
        feed = receiver.frames.feed
        receiver.frames.feed = lambda data: reads.append(len(data)) or feed(data)
        for i in range(32):  # a step's deltas, one per stream
            sender.send(("item", i, " word"))
        assert len(sender._out) == 32  # nothing written yet: the loop writes them as it comes round
        loop.call_later(0.2, done.set_result, None)
        await done
        sender.close()
        receiver.close()
        return reads, got

    reads, got = asyncio.run(main())
    assert len(reads) == 1  # one write, so one read
    assert got == [("item", i, " word") for i in range(32)]


def test_messages_a_channel_could_not_write_before_its_loop_closed_are_written_by_the_one_that_takes_over():
    ours, theirs = socket.socketpair()
    first = asyncio.new_event_loop()
    old = Channel(ours, first, lambda m: None, lambda: None)
    old.send(("tell", "talker", "feed_text", ("r1", 0, [1, 2], False)))
    first.close()  # before its round came: the message is still queued

    async def main():
        loop = asyncio.get_running_loop()
        got = loop.create_future()
        sock, frames, unsent = old.handover()
        new = Channel(sock, loop, lambda m: None, lambda: None, frames, unsent)
        receiver = Channel(theirs, loop, got.set_result, lambda: None)
        message = await asyncio.wait_for(got, 5)
        new.close()
        receiver.close()
        return message

    assert asyncio.run(main()) == ("tell", "talker", "feed_text", ("r1", 0, [1, 2], False))


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


def test_only_a_message_that_names_a_kept_object_is_read_by_the_kept_object_unpickler():
    held, reader = collections.OrderedDict(), FrameReader()
    plain = encode(("item", 1, np.zeros(3, np.float32)), held)  # sent as one that may hold frames, holding none
    assert not plain[0] & 0x80 and not held
    framed = encode(("call", 2, "generate", ("r1", [Frame("k", np.ones(3, np.uint8))])), held)
    assert framed[0] & 0x80 and list(held) == ["k"]
    (a,), (b,) = reader.feed(plain), reader.feed(framed)
    assert (a[2] == 0).all() and (b[3][1][0].pixels == 1).all() and list(reader.kept) == ["k"]
    whole = encode(("call", 3, "generate", ("r2", [Frame("k", np.ones(3, np.uint8))])))  # without `held`: whole
    assert not whole[0] & 0x80
    (c,) = reader.feed(whole)
    assert (c[3][1][0].pixels == 1).all() and list(reader.kept) == ["k"]
