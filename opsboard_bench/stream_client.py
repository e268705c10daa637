"""The load client of ``opsboard bench --scenario streams``: many SSE streams in a process of its own.

Run as ``python -m opsboard_bench.stream_client PORT TOKEN_FILE`` (never imported by opsboard
itself; the scenario starts several, so that the client's own CPU neither shares the benchmark's GIL
nor hides in it).  It opens one ``/api/v1/inbox/stream`` per token in TOKEN_FILE (one a line) to
127.0.0.1:PORT, prints ``{"connected": n, "failed": n}`` once every attempt is over, then answers
lines on stdin:

- ``count R``: how many of its streams have received more than R notifications;
- ``dump``: one JSON line, each stream's receipt times (``time.monotonic()``, system-wide on Linux, so
  the benchmark compares them with its own commit times); then it closes its streams and exits.

No asyncio: one epoll over raw sockets, one ``recv`` per readable socket, and a count of the
``event: notification`` lines in what came (a line split over two reads still counts once).  The
least a client can do per event, so that the figures are the server's; the scenario reports the CPU
it used all the same.
"""
from __future__ import annotations

import json
import os
import select
import socket
import sys
import time

MARK = b"event: notification"
CONNECTED = b"connected at cursor"
#: Connections being opened at once.
CONNECTING = 200


class _Stream:
    __slots__ = ("sock", "got", "tail", "opened")

    def __init__(self, sock: socket.socket):
        self.sock, self.got, self.tail, self.opened = sock, [], b"", False


def main(port: int, tokens: list[str]) -> None:
    ep = select.epoll()
    streams: dict[int, _Stream] = {}
    ended: list[_Stream] = []  # opened, then closed by the server: their receipts still count
    opening: set[int] = set()
    connected = failed = 0
    todo = list(tokens)

    def drop(fd: int) -> None:
        s = streams.pop(fd)
        ep.unregister(fd)
        s.sock.close()
        if s.opened:
            ended.append(s)

    def on_readable(fd: int) -> None:
        nonlocal connected, failed
        s = streams[fd]
        try:
            data = s.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            if not s.opened:
                failed += 1
                opening.discard(fd)
            drop(fd)
            return
        buf = s.tail + data
        if not s.opened:
            if CONNECTED not in buf:
                s.tail = buf[-64:]
                return
            s.opened = True
            connected += 1
            opening.discard(fd)
        n = buf.count(MARK)
        if n:
            now = time.monotonic()
            s.got.extend([now] * n)
        s.tail = buf[-(len(MARK) - 1):]

    while todo or opening:
        while todo and len(opening) < CONNECTING:
            token = todo.pop()
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall((f"GET /api/v1/inbox/stream HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}"
                              "\r\nAccept: text/event-stream\r\n\r\n").encode())
                sock.setblocking(False)
            except OSError:
                failed += 1
                continue
            streams[sock.fileno()] = _Stream(sock)
            opening.add(sock.fileno())
            ep.register(sock.fileno(), select.EPOLLIN)
        for fd, _ in ep.poll(1.0):
            on_readable(fd)

    out = sys.stdout
    out.write(json.dumps({"connected": connected, "failed": failed}) + "\n")
    out.flush()
    stdin = sys.stdin.fileno()
    os.set_blocking(stdin, False)
    ep.register(stdin, select.EPOLLIN)
    pending = b""
    while True:
        for fd, _ in ep.poll():
            if fd != stdin:
                on_readable(fd)
                continue
            chunk = os.read(stdin, 4096)
            pending += chunk
            while b"\n" in pending or not chunk:
                line, _, pending = pending.partition(b"\n")
                words = line.decode().split()
                if not words or words[0] == "dump":
                    for fd2 in list(streams):
                        drop(fd2)
                    out.write(json.dumps([s.got for s in ended]) + "\n")
                    out.flush()
                    return
                if words[0] == "count":
                    r = int(words[1])
                    n = sum(1 for s in streams.values() if len(s.got) > r) + sum(1 for s in ended if len(s.got) > r)
                    out.write(f"{n}\n")
                    out.flush()


if __name__ == "__main__":
    with open(sys.argv[2]) as f:
        main(int(sys.argv[1]), f.read().split())
