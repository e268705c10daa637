"""A small HTTP client for providers: bounded time, capped body, no redirects, optional SSRF guard.

The standard library's ``http.client`` is used directly so that the connection
goes to the address that was checked (a DNS answer cannot change between the
check and the connect) while TLS still verifies the host's name.

``reuse=True`` (webhooks) keeps HTTP/1.1 connections alive in a small
process-wide pool keyed by scheme, host, port *and the checked address*: the
name is still resolved and checked for every request, and a connection is
reused only when it goes to the address just checked.  Idle connections the
far side closed (readable before reuse) or idle over 10 s are dropped, never
written to; a request is never re-sent within one call.

``timeout`` is a deadline for the whole request (connect, send, headers, body),
not only for each read: a far side that drips a byte at a time cannot hold a
slot longer (:class:`_Deadlines` cuts the socket when it passes).

Why not urllib3: the same keep-alive POST to a sandbox receiver costs this
client less CPU than urllib3's bare ``HTTPConnectionPool.urlopen`` (which sends
the headers and the body in two writes, validates a ``Timeout`` and a ``Retry``
per call and wraps the response again), before any pinning or deadline; CPU is
what bounds the webhooks throughput (`opsboard bench --scenario webhooks`,
docs/performance.md).  Both sit on :mod:`http.client`, which parses the answer;
here its header block is read by :func:`parse_headers` instead of the
:mod:`email` parser (the same ``HTTPMessage``, for less CPU per answer).

An answer's head is bounded in CPU as in bytes (issue 50): at most
:data:`MAX_INTERIM` interim ``1xx`` answers, :data:`_MAXHEADERS` header lines,
:data:`HEAD_MAX_BYTES` bytes for all status and header lines together (interim
answers included) and :data:`HEAD_MAX_SECONDS` from the first status line to
the end of the final header block.  Past any of them the answer is abandoned
with a :class:`HeadLimit` (classified ``http_too_many_headers``,
``http_too_many_interim``, ``http_head_too_large`` or ``http_head_too_slow``,
each with its readable detail): an endless ``100 Continue`` once burned a whole
core for the 10 s of each attempt.
"""
from __future__ import annotations

import heapq
import http.client
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from opsboard import retry
from opsboard.deliveries import targets
from opsboard.deliveries.targets import Refused  # noqa: F401  (raised by request)


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes


_blocked = targets.blocked


#: Address literals already checked against an allow list: ``{(host, allow): address}``.  A literal's
#: verdict depends on nothing else (no DNS), so it is decided once; a refusal is not kept (it raises).
_literals: dict = {}
_LITERALS_MAX = 4096


def resolve_checked(host: str, port: int, allow=()) -> str:
    """The checked address to connect to (see :func:`opsboard.deliveries.targets.resolve_checked`).

    A name is resolved and checked on every call; an address literal's (allowed) verdict is kept.
    """
    key = (host, allow)
    ip = _literals.get(key)
    if ip is not None:
        return ip
    ip = targets.resolve_checked(host, port, allow)
    if ip == host and len(_literals) < _LITERALS_MAX:
        _literals[key] = ip
    return ip


def tls_context() -> ssl.SSLContext:
    """The TLS context of HTTPS requests: the system's trust store, the host's name verified.

    A module function so that a test can trust its own self-signed certificate.
    """
    return ssl.create_default_context()


#: Header lines and count of an answer at most (as :mod:`http.client`).
_MAXLINE, _MAXHEADERS = 65536, 100
#: Interim (1xx) answers before the final one at most; a receiver sends one ``100 Continue`` at most
#: (and only when asked; this client never asks), a ``103 Early Hints`` or two.
MAX_INTERIM = 8
#: Bytes of all status and header lines of one answer (interim answers included) at most.
HEAD_MAX_BYTES = 64 * 1024
#: Seconds from the answer's first status line to the end of its final header block at most.
HEAD_MAX_SECONDS = 2.0

#: The stored details of the head limits (English, as every attempt detail; pages show them in the
#: reader's language: opsboard.web.i18n.DETAIL_LABELS carries the same strings as message ids).
DETAIL_TOO_MANY_HEADERS = "too many headers"
DETAIL_TOO_MANY_INTERIM = "too many interim answers"
DETAIL_HEAD_TOO_LARGE = "answer headers too large"
DETAIL_HEAD_TOO_SLOW = "answer headers too slow"


class HeadLimit(http.client.HTTPException):
    """An answer's head passed one of its limits: ``code`` (short, stable) and ``detail`` (readable)."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code, self.detail = code, detail


class _HeadBudget:
    """What one answer's head may still spend: bytes, header lines (per block) and time."""

    __slots__ = ("bytes_left", "deadline")

    def __init__(self, max_bytes: int = HEAD_MAX_BYTES, seconds: float = HEAD_MAX_SECONDS):
        self.bytes_left = max_bytes
        self.deadline = time.monotonic() + seconds

    def spend(self, n: int) -> None:
        self.bytes_left -= n
        if self.bytes_left < 0:
            raise HeadLimit("head_too_large", DETAIL_HEAD_TOO_LARGE)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise HeadLimit("head_too_slow", DETAIL_HEAD_TOO_SLOW)


def parse_headers(fp, budget: "_HeadBudget | None" = None) -> http.client.HTTPMessage:
    """An answer's header block, as :func:`http.client.parse_headers` returns it, without the
    :mod:`email` parser (it was a large share of the client's CPU per webhook; profile of
    `opsboard bench --scenario webhooks`).  Folded lines are joined; a line without a colon, or whose name holds a
    space, is dropped (the email parser ends the headers there; here the rest still counts).

    More than :data:`_MAXHEADERS` lines raise :class:`HeadLimit` (``too_many_headers``); ``budget``
    (the answer's head, see :class:`_HeadBudget`) bounds the bytes and the time of every block."""
    msg = http.client.HTTPMessage()
    headers = []   # (name, value with its line ends) as the compat32 policy's header_source_parse
    lines = 0
    while True:
        line = fp.readline(_MAXLINE + 1)
        if len(line) > _MAXLINE:
            raise http.client.LineTooLong("header line")
        if budget is not None:
            budget.spend(len(line))
            budget.check_time()
        if line in (b"\r\n", b"\n", b""):
            break
        lines += 1
        if lines > _MAXHEADERS:
            raise HeadLimit("too_many_headers", DETAIL_TOO_MANY_HEADERS)
        text = line.decode("iso-8859-1")
        if text[0] in " \t":
            if headers:
                headers[-1][1].append(text)
            continue
        name, sep, value = text.partition(":")
        if sep and name and not any(c in name for c in " \t"):
            headers.append((name, [value.lstrip(" \t")]))
    # What Message.__setitem__ appends to under the compat32 policy, values as its parser leaves them.
    msg._headers = [(name, "".join(parts).rstrip("\r\n")) for name, parts in headers]
    return msg


class _Response(http.client.HTTPResponse):
    """:class:`http.client.HTTPResponse` with :func:`parse_headers`: ``begin`` is the standard
    library's (Python 3.11), only the header parser differs."""

    def begin(self):
        if self.headers is not None:
            return
        budget = None
        interim = 0
        while True:
            version, status, reason = self._read_status()
            if budget is None:   # the clock of the head starts at its first status line
                budget = _HeadBudget()
            budget.spend(len(version) + len(reason) + 6)
            # Every interim answer but 101 (a protocol switch, never asked for: the final answer here)
            # is skipped, and counted: an endless stream of them is a hostile far side.
            if not (100 <= status < 200) or status == http.client.SWITCHING_PROTOCOLS:
                break
            interim += 1
            if interim > MAX_INTERIM:
                raise HeadLimit("too_many_interim", DETAIL_TOO_MANY_INTERIM)
            parse_headers(self.fp, budget)   # the header of an interim answer, skipped
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = parse_headers(self.fp, budget)
        tr_enc = self.headers.get("transfer-encoding")
        if tr_enc and tr_enc.lower() == "chunked":
            self.chunked, self.chunk_left = True, None
        else:
            self.chunked = False
        self.will_close = self._check_close()
        self.length = None
        length = self.headers.get("content-length")
        if length and not self.chunked:
            try:
                self.length = int(length)
            except ValueError:
                self.length = None
            else:
                if self.length < 0:
                    self.length = None
        if status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED) or 100 <= status < 200 \
                or self._method == "HEAD":
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True


class _HTTP(http.client.HTTPConnection):
    response_class = _Response


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to ``ip`` (the checked address) while TLS (SNI, certificate name) uses ``host``."""

    response_class = _Response

    def __init__(self, host, ip, port, timeout):
        super().__init__(host, port, timeout=timeout, context=tls_context())
        self._ip = ip

    def connect(self):
        sock = socket.create_connection((self._ip, self.port), self.timeout)
        try:
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


class _Pool:
    """Idle keep-alive connections, keyed by (scheme, host, port, checked address)."""

    PER_KEY = 32
    TOTAL = 256
    IDLE_SECONDS = 10.0

    def __init__(self):
        self.lock = threading.Lock()
        self.idle: dict[tuple, list[tuple[float, http.client.HTTPConnection]]] = {}
        self.count = 0

    def take(self, key):
        now = time.monotonic()
        while True:
            with self.lock:
                conns = self.idle.get(key)
                if not conns:
                    return None
                used, conn = conns.pop()
                self.count -= 1
            if now - used <= self.IDLE_SECONDS and conn.sock is not None and not _readable(conn.sock):
                return conn
            conn.close()  # idle too long, or the far side closed it (or sent something unasked)

    def give(self, key, conn) -> None:
        with self.lock:
            conns = self.idle.setdefault(key, [])
            if len(conns) < self.PER_KEY and self.count < self.TOTAL:
                conns.append((time.monotonic(), conn))
                self.count += 1
                return
        conn.close()

    def clear(self) -> None:
        with self.lock:
            for conns in self.idle.values():
                for _, conn in conns:
                    conn.close()
            self.idle.clear()
            self.count = 0


_pool = _Pool()


class NotSent(OSError):
    """The request never went out (the connection or its TLS handshake failed): safe to send again."""

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


class _Deadlines:
    """One thread that shuts a request's socket down when its deadline passes.

    Socket timeouts bound each read, not the request: a server dripping its
    headers or body a byte at a time would otherwise keep a slot for ever.  The
    reading thread then sees the connection end and :func:`request` raises
    ``socket.timeout``.  Finished requests are dropped lazily (their entry's
    connection set to None); the thread wakes at most every ``GRAIN`` seconds.
    """

    GRAIN = 0.05

    def __init__(self):
        self.cond = threading.Condition()
        self.heap: list[list] = []
        self.seq = 0
        self.thread: threading.Thread | None = None

    def watch(self, deadline: float, conn) -> list:
        """``[deadline, seq, conn, expired]``: call :meth:`done` with it when the request ends."""
        with self.cond:
            self.seq += 1
            entry = [deadline, self.seq, conn, False]
            heapq.heappush(self.heap, entry)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
                self.thread.start()
            elif self.heap[0] is entry:
                self.cond.notify()
        return entry

    @staticmethod
    def done(entry: list) -> bool:
        """Stop watching; whether the deadline had cut the connection."""
        entry[2] = None
        return entry[3]

    def _run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                heap = self.heap
                while heap and (heap[0][2] is None or heap[0][0] <= now):
                    entry = heapq.heappop(heap)
                    conn = entry[2]
                    if conn is not None:
                        entry[3] = True
                        sock = getattr(conn, "sock", None)
                        if sock is not None:
                            try:
                                sock.shutdown(socket.SHUT_RDWR)
                            except OSError:
                                pass
                self.cond.wait(max(heap[0][0] - now, self.GRAIN) if heap else None)


_deadlines = _Deadlines()


def _readable(sock) -> bool:
    """An idle keep-alive socket is readable only when the far side closed it (or misbehaves)."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _connect(scheme: str, host: str, ip: str, port: int, timeout: float) -> http.client.HTTPConnection:
    if scheme == "https":
        return _PinnedHTTPS(host, ip, port, timeout)
    return _HTTP(ip, port, timeout=timeout)


def request(method: str, url: str, body: bytes | None = None, headers: dict | None = None, *,
            timeout: float = 10.0, max_body: int = 64 * 1024, guard: bool = False, allow=(),
            reuse: bool = False) -> Response:
    """One request, no redirects followed; the response body is read up to ``max_body`` bytes.

    ``timeout`` bounds the whole request.  Raises :class:`Refused`, :class:`NotSent`
    (connect timeout), ``OSError`` (connect refused, reset, ``socket.timeout``) or
    ``http.client.HTTPException``.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("only http(s) URLs")
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    ip = resolve_checked(host, port, allow) if guard else host
    deadline = time.monotonic() + timeout
    key = (parts.scheme, host, port, ip)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    hdrs = {"Host": parts.netloc, "User-Agent": "opsboard", **(headers or {})}
    if not reuse:
        hdrs["Connection"] = "close"
    conn = _pool.take(key) if reuse else None
    if conn is not None:
        conn.timeout = timeout
        conn.sock.settimeout(timeout)
    else:
        conn = _connect(parts.scheme, host, ip, port, timeout)
    watch = _deadlines.watch(deadline, conn)
    try:
        if conn.sock is None:
            try:
                conn.connect()
            except socket.timeout:
                conn.close()
                raise NotSent("connect_timeout") from None
        return _exchange(conn, key, method, path, body, hdrs, deadline, max_body, reuse, watch)
    except (OSError, http.client.HTTPException) as exc:
        if not isinstance(exc, NotSent) and _deadlines.done(watch):
            raise socket.timeout(f"no complete answer within {timeout:g} s") from None
        raise
    finally:
        _deadlines.done(watch)


def _exchange(conn, key, method, path, body, hdrs, deadline, max_body, reuse, watch) -> Response:
    keep = False
    try:
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        chunks, size = [], 0
        while size < max_body:
            chunk = resp.read(min(16384, max_body - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if watch[3]:   # the deadline cut the body short: not an answer
            raise socket.timeout("the deadline passed")
        # Reusable only when the whole answer was read and neither side asked to close.
        keep = reuse and resp.isclosed() and not resp.will_close
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, b"".join(chunks))
    finally:
        if keep and not _deadlines.done(watch):
            _pool.give(key, conn)
        else:
            conn.close()


def retry_after(headers: dict, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date)."""
    value = (headers or {}).get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - (now or time.time()))
        except (TypeError, ValueError):
            return None


#: How much of a failed answer's body is kept as its attempt's detail (before redaction).
BODY_EXCERPT = 400


def failure_detail(status: int, body: bytes | str | None) -> str:
    """A failed answer as an attempt's readable detail: ``HTTP 400: <the body's start>``.

    The provider's own words say why (``{"error": "invalid_payload", ...}``); they are cut to
    :data:`BODY_EXCERPT` characters, whitespace folded to one line, and redacted (secrets, tokens,
    emails, phone numbers) by :func:`opsboard.redact.redact` before anything stores them.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else (body or "")
    text = " ".join(text[:BODY_EXCERPT * 2].split())
    if len(text) > BODY_EXCERPT:
        text = text[:BODY_EXCERPT - 1] + "…"
    return retry.redact(f"HTTP {status}: {text}" if text else f"HTTP {status} (empty body)")


def classify(status: int, headers: dict, prefix: str = "http", body: bytes | str | None = None) -> retry.Outcome:
    """2xx success; 408/429/5xx retryable (Retry-After honoured); other statuses permanent.

    A failure carries :func:`failure_detail` (the status and the redacted start of ``body``)."""
    if 200 <= status < 300:
        return retry.Success(ref=f"{prefix}_{status}")
    if status in (408, 429) or status >= 500:
        return retry.Retryable(f"{prefix}_{status}", retry_after=retry_after(headers),
                               detail=failure_detail(status, body))
    return retry.Permanent(f"{prefix}_{status}", detail=failure_detail(status, body))


def classify_error(exc: BaseException, prefix: str = "http", sent: bool = True) -> retry.Outcome:
    """An exception of :func:`request` as an outcome.

    A timeout or a dropped connection after the request went out is
    ``Unknown``: the far side may have acted on it.
    """
    if isinstance(exc, Refused):
        return retry.Permanent(f"{prefix}_target_refused", detail=str(exc))
    if isinstance(exc, NotSent):
        return retry.Retryable(f"{prefix}_{exc.code}")
    if isinstance(exc, ssl.SSLCertVerificationError):   # in the handshake: nothing was sent
        return retry.Retryable(f"{prefix}_tls_certificate")
    if isinstance(exc, ConnectionRefusedError):
        return retry.Retryable(f"{prefix}_connect_refused")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return retry.Unknown(f"{prefix}_timeout")
    if isinstance(exc, http.client.RemoteDisconnected):  # a subclass of ConnectionResetError: first
        return retry.Unknown(f"{prefix}_connection_dropped")
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return retry.Unknown(f"{prefix}_connection_reset")
    if isinstance(exc, OSError) and str(exc).startswith("dns:"):
        return retry.Retryable(f"{prefix}_dns")
    if isinstance(exc, HeadLimit):   # the request went out: unknown, as a timeout (the breaker counts it)
        return retry.Unknown(f"{prefix}_{exc.code}", detail=exc.detail)
    if isinstance(exc, http.client.LineTooLong):
        return retry.Unknown(f"{prefix}_head_too_large", detail=DETAIL_HEAD_TOO_LARGE)
    return retry.Unknown(f"{prefix}_{type(exc).__name__.lower()}", detail=retry.redact(f"{type(exc).__name__}: {exc}"))
