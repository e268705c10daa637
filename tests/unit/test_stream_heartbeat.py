"""The stream server's heartbeat walks one part of the streams per tick, never all of them (walking
10,000 streams each second to pick a fifteenth was a sixth of its CPU in the profile, issue 27): every
open stream belongs to exactly one part, gets its beat (and its re-read) once per period, and a closed
stream gets none."""
from __future__ import annotations

import asyncio

from opsboard.web.streams import HEARTBEAT_LINE, Listener, Stream


class _Transport:
    def __init__(self):
        self.written: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written.append(data)


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
        streams = [Stream(f"user-{i % 4}", 0, _Transport(), loop.create_future()) for i in range(10)]
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
        beaten = [s for s in streams if s.transport.written]
        assert sorted(map(id, reader.woken)) == sorted(map(id, beaten))  # each beat queues its re-read
        assert gone not in beaten and len(beaten) == 9
        for s in beaten:  # once per period, as one HTTP chunk
            assert s.transport.written == [b"%x\r\n%b\r\n" % (len(HEARTBEAT_LINE), HEARTBEAT_LINE)]
        assert listener.count == 9 and gone not in listener.parts[gone.part]
    finally:
        loop.close()
