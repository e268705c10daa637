"""The stream server's heartbeat walks one part of the streams per tick, never all of them (walking
10,000 streams each second to pick a fifteenth was a sixth of its CPU in the profile, issue 27): every
open stream belongs to exactly one part, gets its beat (and its re-read) once per period, and a closed
stream gets none.  What a stream is sent reaches its client through aiohttp's StreamResponse (issue 42),
never written to the transport by hand."""
from __future__ import annotations

import asyncio

import pytest

from opsboard.web.streams import HEARTBEAT_LINE, INLINE_MAX, MAX_UNSENT, Listener, Stream


class _Transport:
    def __init__(self, buffered: int = 0):
        self.buffered = buffered

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data: bytes) -> None:
        raise AssertionError("the body goes through the response, not the transport")


class _Response:
    """What Stream.pump uses of aiohttp's StreamResponse: ``write``."""

    def __init__(self):
        self.written: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.written.append(data)


def _stream(loop, user, transport=None) -> Stream:
    s = Stream(user, 0, loop.create_future())
    s.start(_Response(), transport or _Transport())
    return s


class _Reader:
    def __init__(self):
        self.woken: list[Stream] = []

    def wake(self, s: Stream) -> None:
        self.woken.append(s)


def test_each_stream_is_beaten_once_per_period_and_only_its_part_is_walked():
    loop = asyncio.new_event_loop()
    try:
        listener = Listener("postgresql://unused", beat_parts=3)
        listener.reader = reader = _Reader()
        streams = [_stream(loop, f"user-{i % 4}") for i in range(10)]
        for s in streams:
            listener.add(s)
        assert sorted(len(p) for p in listener.parts) == [3, 3, 4]  # dealt in turn
        gone = streams[4]
        listener.remove(gone)

        listener.beat(0)
        first = list(reader.woken)
        assert first and all(s.part == 0 for s in first)  # one part per tick
        for part in (1, 2):
            listener.beat(part)
        beaten = [s for s in streams if s.out]
        assert sorted(map(id, reader.woken)) == sorted(map(id, beaten))  # each beat queues its re-read
        assert gone not in beaten and len(beaten) == 9
        for s in beaten:  # once per period, queued for the stream's handler to write
            assert s.out == [HEARTBEAT_LINE]
        assert listener.count == 9 and gone not in listener.parts[gone.part]
    finally:
        loop.close()


def test_the_handler_writes_what_was_sent_through_the_response_until_the_stream_ends():
    async def scenario():
        loop = asyncio.get_running_loop()
        s = _stream(loop, "user-1")
        pump = asyncio.ensure_future(s.pump())
        await asyncio.sleep(0)
        assert s.send(b"id: 1\nevent: notification\ndata: {}\n\n") and s.send(HEARTBEAT_LINE)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        # Both in one write: what queued while the handler was away goes out together, in order.
        assert s.response.written == [b"id: 1\nevent: notification\ndata: {}\n\n" + HEARTBEAT_LINE]
        s.end()
        await asyncio.wait_for(pump, 1)
        assert not s.send(HEARTBEAT_LINE)  # ended: nothing more is taken

    asyncio.run(scenario())


@pytest.mark.parametrize("closing, buffered", [(True, 0), (False, MAX_UNSENT + 1)])
def test_a_gone_or_slow_client_ends_its_stream(closing, buffered):
    loop = asyncio.new_event_loop()
    try:
        transport = _Transport(buffered)
        transport.is_closing = lambda: closing
        s = _stream(loop, "user-1", transport)
        assert not s.send(HEARTBEAT_LINE)
        assert s.done.done() and s.out == []
    finally:
        loop.close()


def test_a_stream_not_started_takes_nothing():
    loop = asyncio.new_event_loop()
    try:
        s = Stream("user-1", 0, loop.create_future())
        assert not s.send(HEARTBEAT_LINE) and not s.done.done()
    finally:
        loop.close()


def test_a_reads_events_are_written_at_once_only_when_that_cannot_wait():
    """Stream.deliver: with the handler idle and nothing unsent, through the response at once (no task
    switch per stream in a broadcast); else queued behind what is there, in order."""
    async def scenario():
        loop = asyncio.get_running_loop()
        s = _stream(loop, "user-1")
        pump = asyncio.ensure_future(s.pump())
        await asyncio.sleep(0)  # the handler waits
        assert await s.deliver(b"a") and s.response.written == [b"a"] and s.out == []
        s.send(HEARTBEAT_LINE)  # the handler is woken, has not run yet
        assert await s.deliver(b"b") and s.out == [HEARTBEAT_LINE, b"b"]
        await asyncio.sleep(0)
        assert s.response.written == [b"a", HEARTBEAT_LINE + b"b"]
        assert await s.deliver(b"x" * (INLINE_MAX + 1)) and s.out == [b"x" * (INLINE_MAX + 1)]
        await asyncio.sleep(0)
        s.transport.buffered = 10  # the socket holds something unsent: the write might wait
        assert await s.deliver(b"c") and s.out == [b"c"]
        s.end()
        await asyncio.wait_for(pump, 1)
        assert not await s.deliver(b"d")

    asyncio.run(scenario())
