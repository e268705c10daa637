"""The provider HTTP client's timeout is a deadline for the whole request, through real
servers on 127.0.0.1: a far side that drips its headers or its body a byte at a time
(each read well inside the timeout) is cut off when the deadline passes, and the
outcome is an unknown ``http_timeout`` (the request went out)."""
import ipaddress
import socket
import threading
import time

import pytest

from opsboard import retry
from opsboard.config import ProviderSettings
from opsboard.deliveries.providers import http as http_provider, webhook

ALLOW = (ipaddress.ip_network("127.0.0.1/32"),)
#: How long a dripping server keeps going at most (well past the client's deadline).
DRIP_SECONDS = 6.0


class _Dripping:
    """Reads one request, then sends ``head`` and ``tail`` a byte every 50 ms; counts what it sent."""

    def __init__(self, head: bytes, tail: bytes):
        self.head, self.tail = head, tail
        self.sent = 0
        self.cut = threading.Event()   # the client closed the connection while we dripped
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            started = time.monotonic()
            try:
                for i in range(len(self.head + self.tail)):
                    if time.monotonic() - started > DRIP_SECONDS:
                        return
                    conn.sendall((self.head + self.tail)[i:i + 1])
                    self.sent += 1
                    time.sleep(0.05)
            except OSError:
                self.cut.set()

    def close(self):
        self.sock.close()


@pytest.fixture
def drip():
    made = []

    def make(head: bytes, tail: bytes = b""):
        s = _Dripping(head, tail)
        made.append(s)
        return s
    http_provider._pool.clear()
    yield make
    for s in made:
        s.close()
    http_provider._pool.clear()


SLOW_HEADERS = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 20) for i in range(60))


def test_headers_dripped_slower_than_the_deadline_end_in_a_timeout(drip):
    server = drip(SLOW_HEADERS, b"Content-Length: 0\r\n\r\n")
    with pytest.raises(socket.timeout):
        http_provider.request("POST", f"http://127.0.0.1:{server.port}/hook", b"{}", timeout=1.0,
                              guard=True, allow=ALLOW, reuse=True)
    # Cut off at the deadline: the server could not finish its headers (about 20 bytes a second).
    assert server.cut.wait(5)
    assert server.sent < len(SLOW_HEADERS)


def test_a_body_dripped_slower_than_the_deadline_ends_in_a_timeout(drip):
    body = b"x" * 400
    server = drip(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body), body)
    with pytest.raises(socket.timeout):
        http_provider.request("POST", f"http://127.0.0.1:{server.port}/hook", b"{}", timeout=1.0,
                              guard=True, allow=ALLOW, reuse=True)
    assert server.cut.wait(5)
    assert server.sent < 60 + len(body)
    assert http_provider._pool.count == 0   # a connection cut by the deadline is never reused


def test_a_webhook_to_a_dripping_receiver_is_an_unknown_timeout(drip):
    server = drip(SLOW_HEADERS, b"Content-Length: 0\r\n\r\n")
    settings = ProviderSettings(webhook_allow=ALLOW, webhook_timeout=1.0)
    done = webhook.deliver(settings, f"http://127.0.0.1:{server.port}/hook", ["whsec_" + "A" * 32], "msg_1", b"{}")
    assert isinstance(done.outcome, retry.Unknown) and done.outcome.code == "http_timeout"
    assert done.far_side_unwell


class _Quick:
    """Answers every request on a kept-alive connection at once; counts connections."""

    def __init__(self):
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            data = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
                while b"\r\n\r\n" in data:
                    head, _, rest = data.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)
                    if len(rest) < length:
                        break
                    data = rest[length:]
                    conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")


def test_a_finished_request_leaves_its_kept_alive_connection_alone_after_its_deadline():
    http_provider._pool.clear()
    server = _Quick()
    url = f"http://127.0.0.1:{server.port}/hook"
    try:
        assert http_provider.request("POST", url, b"{}", timeout=0.2, guard=True, allow=ALLOW, reuse=True).status == 204
        time.sleep(0.4)   # past that request's deadline: the watchdog must not cut the idle connection
        assert http_provider.request("POST", url, b"{}", timeout=2, guard=True, allow=ALLOW, reuse=True).status == 204
        assert server.connections == 1
    finally:
        server.sock.close()
        http_provider._pool.clear()


def test_a_connect_timeout_is_not_sent_and_retryable():
    # Classification only: no test reaches an address outside the loopback range.
    outcome = http_provider.classify_error(http_provider.NotSent("connect_timeout"))
    assert isinstance(outcome, retry.Retryable) and outcome.code == "http_connect_timeout"
    assert isinstance(http_provider.classify_error(socket.timeout("read")), retry.Unknown)
