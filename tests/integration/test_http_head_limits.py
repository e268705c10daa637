"""A hostile answer's head is bounded in CPU as in bytes (issue 50), through real servers on 127.0.0.1:
an endless stream of ``100 Continue``, an answer with 5,000 headers, a head larger than its byte
budget and one dripped past its time budget each end the request early, with a code of their own and
a readable detail (shown in the reader's language on the dashboard)."""
import ipaddress
import socket
import threading
import time

import pytest

from opsboard import retry
from opsboard.config import ProviderSettings
from opsboard.deliveries.providers import http as http_provider, webhook

ALLOW = (ipaddress.ip_network("127.0.0.1/32"),)


class _Hostile:
    """Reads one request, then writes ``head`` once and ``repeat`` until the client goes away (or
    ``seconds`` pass); counts the bytes the client took."""

    def __init__(self, head: bytes, repeat: bytes = b"", seconds: float = 15.0, pause: float = 0.0):
        self.head, self.repeat, self.seconds, self.pause = head, repeat, seconds, pause
        self.sent = 0
        self.gone = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            started = time.monotonic()
            try:
                conn.sendall(self.head)
                self.sent += len(self.head)
                while self.repeat and time.monotonic() - started < self.seconds:
                    conn.sendall(self.repeat)
                    self.sent += len(self.repeat)
                    if self.pause:
                        time.sleep(self.pause)
            except OSError:
                self.gone.set()

    def close(self):
        self.sock.close()


@pytest.fixture
def hostile():
    made = []

    def make(*a, **kw):
        s = _Hostile(*a, **kw)
        made.append(s)
        return s
    http_provider._pool.clear()
    yield make
    for s in made:
        s.close()
    http_provider._pool.clear()


def _deliver(server, timeout=10.0):
    settings = ProviderSettings(webhook_allow=ALLOW, webhook_timeout=timeout)
    return webhook.deliver(settings, f"http://127.0.0.1:{server.port}/hook", ["whsec_" + "A" * 32], "msg_1", b"{}")


def test_an_endless_100_continue_is_too_many_interim_answers_not_a_timeout(hostile):
    server = hostile(b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 64)
    done = _deliver(server)
    # Before the limit this parsed ~12 MB/s of 100 Continue for the whole 10 s and ended as http_timeout.
    assert isinstance(done.outcome, retry.Unknown)
    assert done.outcome.code == "http_too_many_interim"
    assert done.outcome.detail == "too many interim answers"
    assert done.far_side_unwell   # counts for the endpoint's breaker
    assert server.gone.wait(10)   # the client hung up on it


def test_a_few_interim_answers_are_skipped(hostile):
    head = (b"HTTP/1.1 100 Continue\r\n\r\n" * 3 + b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
            + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    done = _deliver(hostile(head))
    assert isinstance(done.outcome, retry.Success) and done.status == 200


def test_5000_headers_are_too_many_headers(hostile):
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(5000)) + b"Content-Length: 0\r\n\r\n"
    done = _deliver(hostile(head))
    # Before: http_httpexception with the generic detail "HTTPException: got more than 100 headers".
    assert isinstance(done.outcome, retry.Unknown)
    assert (done.outcome.code, done.outcome.detail) == ("http_too_many_headers", "too many headers")


def test_a_head_past_its_byte_budget_is_too_large(hostile):
    # 90 lines of 1,000 bytes: under the line count and line length, over the 64 KiB of the head.
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 1000) for i in range(90)) + b"\r\n"
    done = _deliver(hostile(head))
    assert (done.outcome.code, done.outcome.detail) == ("http_head_too_large", "answer headers too large")


def test_interim_answers_spend_the_same_byte_budget(hostile):
    # Fewer interim answers than allowed, each with 90 fat lines: the byte budget stops them.
    fat = b"HTTP/1.1 100 Continue\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 300) for i in range(90)) + b"\r\n"
    done = _deliver(hostile(fat * 5))
    assert done.outcome.code == "http_head_too_large"


def test_a_head_dripped_past_its_time_budget_is_too_slow(hostile):
    # A header line every 100 ms: each read is quick, the request's 10 s deadline far away; the head's
    # own time budget (HEAD_MAX_SECONDS) ends it first.
    server = hostile(b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n", seconds=15.0, pause=0.1)
    done = _deliver(server, timeout=10.0)
    assert (done.outcome.code, done.outcome.detail) == ("http_head_too_slow", "answer headers too slow")
    assert server.sent < 15 + 11 * 60   # cut well before the deadline's worth of lines


def test_the_dashboard_reads_the_details_in_the_readers_language(app):
    from flask_babel import force_locale

    from opsboard.web import i18n

    details = {http_provider.DETAIL_TOO_MANY_HEADERS, http_provider.DETAIL_TOO_MANY_INTERIM,
               http_provider.DETAIL_HEAD_TOO_LARGE, http_provider.DETAIL_HEAD_TOO_SLOW}
    assert set(i18n.DETAIL_LABELS) == details
    with app.test_request_context():
        with force_locale("fa"):
            for d in details:
                assert i18n.detail_label(d) != d and i18n.detail_label(d)   # translated
            assert i18n.detail_label("HTTP 500: boom") == "HTTP 500: boom"   # a provider's words as they are
        with force_locale("en"):
            assert i18n.detail_label(http_provider.DETAIL_TOO_MANY_HEADERS) == "too many headers"
