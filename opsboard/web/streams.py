"""The stream server: inbox SSE streams where waiting costs no thread (``opsboard streams``).

A gunicorn gthread process gives each open stream a thread, so a few streams
starve the pages (issue 27).  This asyncio process (aiohttp's web server)
serves the same two routes, ``/inbox/stream`` (the dashboard's session
cookie) and ``/api/v1/inbox/stream`` (a user token), with the same events:
``id`` = inbox cursor, ``event: notification``, the data of
:func:`opsboard.web.sse.event_data`; ``Last-Event-ID`` (or ``?since=``)
resumes; a comment line every 15 s is the heartbeat.  The web app answers
both routes with a 307 here when ``OPSBOARD_STREAMS_URL`` is set (or a reverse
proxy routes the two paths here).

- ONE LISTEN connection per process (:class:`Listener`) wakes the streams of
  a notification's recipient (``*``: all of them); a wake-up is a hint, the
  stream re-reads the inbox.  No connection is held while a stream waits.
- Reads after a wake-up go through a small pool, batched (:class:`Reader`):
  the streams woken together are read in one query (``inbox_events_since_many``),
  so a broadcast to 10,000 streams is a few dozen round trips, not 10,000.
- Authentication is the web's: the token check of the inbox API
  (:func:`opsboard.notifications.inbox.verify_token`) and, for the dashboard,
  the Flask session cookie decoded with Flask's own serializer
  (``SecureCookieSessionInterface.get_signing_serializer``), the session's
  client fingerprint (:func:`opsboard.web.context.client_fingerprint`, stored at
  sign-in: the same browser and address), then the server-side session check
  (:func:`opsboard.auth.load_session_principal`).  Both are sync: they run in
  threads, on a pool of their own.  A user only ever streams their own inbox.
- Each stream is an aiohttp ``StreamResponse``: its request handler writes what
  the reads and heartbeats hand it (:meth:`Stream.pump`), so aiohttp frames the
  body, and a slow client's backpressure holds only its own handler.
- Caps: ``OPSBOARD_STREAMS_MAX`` open streams per process (503 with
  ``Retry-After`` beyond: the inbox page polls), 5 per user per process (429).
- ``OPSBOARD_STREAMS_PROCESSES`` > 1: that many such processes on the one
  address (:class:`Supervisor`: SO_REUSEPORT sockets bound before the fork,
  the kernel spreads the connections), each with its own LISTEN hub, pools and
  caps.  A broadcast's cost is one socket write per stream (most of the
  process's CPU in the profile): processes put it on every core.
- CORS with credentials only for ``OPSBOARD_STREAMS_ORIGINS`` (the dashboard
  origins whose pages follow the 307 here).
- SIGTERM / SIGINT: every stream ends at once (clients reconnect elsewhere or
  poll), then the server closes; well within any grace period.
"""
from __future__ import annotations

import asyncio
import gc
import hmac
import logging
import os
import select
import signal
import socket
import sys
import time
import traceback
from typing import Callable

import psycopg
from aiohttp import web
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool

from .. import db as dbmod
from .. import tenancy
from ..auth import load_session_principal
from ..config import Config
from ..notifications import inbox
from . import sse

log = logging.getLogger("opsboard.streams")

API_PATH = "/api/v1/inbox/stream"
PAGE_PATH = "/inbox/stream"
#: Most (recipient, cursor) pairs one batched read asks for.
READ_BATCH = 500


#: Bytes a stream's socket may hold unsent before its client counts as gone (it resumes by Last-Event-ID).
MAX_UNSENT = 1 << 20
#: A read's events up to this size are written by the read itself when the stream's socket has nothing
#: queued (:meth:`Stream.deliver`): far below the transport's high-water mark (64 KiB), so the write
#: cannot wait for a drain.
INLINE_MAX = 16 * 1024
HEARTBEAT_LINE = b": heartbeat\n\n"


class Stream:
    """One open client.  No task of its own runs for it while it waits: a wake-up queues it for the next
    batched read (:class:`Reader`), which hands its new rows to :meth:`send`; the heartbeat sends a
    comment line the same way and queues a read (the poll behind the hint).  The stream's request
    handler writes what was sent through aiohttp's :class:`~aiohttp.web.StreamResponse` (:meth:`pump`),
    so aiohttp frames the body and a slow client's backpressure holds only its own handler.
    ``done`` resolves when the stream ends (client gone, shutdown, a database error)."""

    __slots__ = ("key", "user_id", "cursor", "response", "transport", "done", "queued", "reading", "dirty",
                 "part", "out", "unsent", "waiter")

    def __init__(self, user_id, cursor: int, done: asyncio.Future):
        self.key, self.user_id, self.cursor = str(user_id), user_id, cursor
        self.done = done
        #: Set by :meth:`start` once the response is prepared: until then nothing is sent.
        self.response: web.StreamResponse | None = None
        self.transport = None
        self.queued = self.reading = self.dirty = False
        self.part = 0  # which heartbeat part it belongs to (Listener.beat)
        self.out: list[bytes] = []  # sent, not yet written by the handler
        self.unsent = 0
        self.waiter: asyncio.Future | None = None

    def start(self, response: web.StreamResponse, transport) -> None:
        """The prepared response and its request's transport (``web.Request.transport``, read for its
        write buffer's size only: the body goes through ``response.write``)."""
        self.response, self.transport = response, transport

    def send(self, data: bytes) -> bool:
        """Queue ``data`` (whole SSE events or a comment line) for the handler to write; False, and the
        stream ends, when the client is gone or reads too slowly (more than ``MAX_UNSENT`` bytes held)."""
        t = self.transport
        if t is None or self.done.done():
            return False  # not started yet (its first read comes when it is) or ended
        if t.is_closing() or t.get_write_buffer_size() + self.unsent > MAX_UNSENT:
            self.end()
            return False
        self.out.append(data)
        self.unsent += len(data)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)
        return True

    async def deliver(self, data: bytes) -> bool:
        """:meth:`send` for a read's events, written at once through the response when that cannot wait:
        the handler is idle (nothing queued before these) and the socket holds nothing unsent, so
        ``StreamResponse.write`` of at most ``INLINE_MAX`` bytes finds the transport below its high-water
        mark and returns without waiting.  A broadcast's thousands of writes then cost no task switch each
        (the handler's wake-up was a third more CPU per delivery in ``opsboard bench --scenario streams``);
        anything else queues for the handler."""
        t, w = self.transport, self.waiter
        if (t is None or self.done.done() or w is None or w.done() or self.out or len(data) > INLINE_MAX
                or t.is_closing() or t.get_write_buffer_size()):
            return self.send(data)
        try:
            await self.response.write(data)
        except ConnectionError:
            self.end()
            return False
        return True

    def end(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def pump(self) -> None:
        """Write what :meth:`send` queued through the response, until the stream ends.  Runs in the
        stream's own request handler: ``StreamResponse.write`` may wait for a slow client to drain,
        and only this stream waits."""
        loop = asyncio.get_running_loop()
        while not self.done.done():
            if not self.out:
                self.waiter = loop.create_future()
                await self.waiter
                self.waiter = None
                continue
            data = self.out[0] if len(self.out) == 1 else b"".join(self.out)
            self.out.clear()
            self.unsent = 0
            await self.response.write(data)


class Listener:
    """The process's one LISTEN connection on the inbox channel, fanned out to the open streams.

    A payload is a recipient id (wakes that user's streams) or ``*`` (all).  After each
    (re)connection every stream is woken once: a notification may have been missed meanwhile.
    """

    def __init__(self, url: str, beat_parts: int = 15):
        self.url = url
        self.streams: dict[str, set[Stream]] = {}
        #: The streams by heartbeat part, dealt in turn as they open: a beat walks its part only.
        self.parts: list[set[Stream]] = [set() for _ in range(max(1, beat_parts))]
        self._deal = 0
        self.count = 0
        self.connected = False
        self.notifications = 0
        self.reader: Reader | None = None
        #: When the last notification arrived, and when a stream last wrote events (monotonic): /healthz
        #: shows the gap, the server's own share of a delivery (the benchmark's client adds its own).
        self.last_notify = self.last_write = 0.0

    def add(self, stream: Stream) -> None:
        self.streams.setdefault(stream.key, set()).add(stream)
        stream.part = self._deal
        self.parts[stream.part].add(stream)
        self._deal = (self._deal + 1) % len(self.parts)
        self.count += 1

    def remove(self, stream: Stream) -> None:
        group = self.streams.get(stream.key)
        if group is not None and stream in group:
            group.discard(stream)
            self.parts[stream.part].discard(stream)
            self.count -= 1
            if not group:
                del self.streams[stream.key]

    def per_user(self, key: str) -> int:
        return len(self.streams.get(key, ()))

    def all(self) -> list[Stream]:
        return [s for group in self.streams.values() for s in group]

    def beat(self, part: int) -> None:
        """The heartbeat of one ``part`` of the streams: one timer for the process, not one per stream,
        and the streams spread over the period (never 10,000 heartbeats and re-reads at once).  Only that
        part is walked (walking every stream each second to pick a fifteenth was a large share of the
        stream server's CPU in the profile of `opsboard bench --scenario streams`)."""
        for s in list(self.parts[part % len(self.parts)]):
            if s.send(HEARTBEAT_LINE):
                self.reader.wake(s)

    def wake(self, payload: str) -> None:
        if self.reader is None:
            return
        targets = self.all() if payload == "*" else list(self.streams.get(payload, ()))
        for s in targets:
            self.reader.wake(s)

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True, connect_timeout=2)
            except (psycopg.Error, OSError) as exc:
                failures += 1
                if failures == 1:
                    log.warning("streams: no LISTEN connection (%s); retrying", type(exc).__name__)
                await asyncio.sleep(min(10.0, 0.5 * 2 ** (failures - 1)))
                continue
            try:
                async with conn:
                    await conn.execute(f'LISTEN "{inbox.CHANNEL}"')
                    if failures:
                        log.warning("streams: LISTEN connection back")
                    failures = 0
                    self.connected = True
                    self.wake("*")  # resync: what was read before LISTEN took is looked at again
                    async for n in conn.notifies():
                        self.notifications += 1
                        self.last_notify = time.monotonic()
                        self.wake(n.payload)
            except (psycopg.Error, OSError) as exc:
                failures += 1
                self.connected = False
                log.warning("streams: LISTEN connection lost (%s); reconnecting", type(exc).__name__)
                await asyncio.sleep(0.5)
            finally:
                self.connected = False


#: The reader's transaction sees every recipient's rows (opsboard.tenancy.Bypass.STREAMS).
SCOPE_ALL_STREAMS = f"SELECT set_config('{tenancy.SETTING}', '{tenancy.ALL}', true)"
assert tenancy.Bypass.STREAMS


class Reader:
    """Batched inbox reads: the streams woken together are read in one query per ``READ_BATCH``
    (``inbox_events_since_many``), up to ``concurrency`` queries at once; each stream's new rows are handed
    to it from there (:meth:`Stream.send`).  A stream woken while its read is under way is read again after it."""

    def __init__(self, pool: AsyncConnectionPool, concurrency: int, listener: Listener):
        self.pool, self.listener = pool, listener
        self.pending: list[Stream] = []
        self.slots = asyncio.Semaphore(concurrency)
        self.flushing = False
        self.tasks: set[asyncio.Task] = set()
        self.queries = 0

    def wake(self, s: Stream) -> None:
        if s.transport is None:
            return  # still starting: its first read, once started, covers this
        if s.reading:
            s.dirty = True
            return
        if s.queued or s.done.done():
            return
        s.queued = True
        self.pending.append(s)
        if not self.flushing:
            self.flushing = True
            self._spawn(self._flush())

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _flush(self) -> None:
        try:
            while self.pending:
                await self.slots.acquire()
                batch, self.pending = self.pending[:READ_BATCH], self.pending[READ_BATCH:]
                for s in batch:
                    s.queued, s.reading = False, True
                self._spawn(self._query(batch))
        finally:
            self.flushing = False

    async def _query(self, batch: list[Stream]) -> None:
        try:
            pairs: dict[tuple[str, int], list[Stream]] = {}
            for s in batch:
                pairs.setdefault((s.key, s.cursor), []).append(s)
            keys = list(pairs)
            rows: list[list[tuple]] = [[] for _ in keys]
            async with self.pool.connection() as conn, conn.transaction():
                # Row-level security: the rows are the recipients', whose sessions were checked (tenancy.Bypass.STREAMS).
                await conn.execute(SCOPE_ALL_STREAMS)
                cur = conn.cursor(row_factory=tuple_row)
                await cur.execute(dbmod.queries["inbox_events_since_many"],
                                  {"user_ids": "{" + ",".join(k[0] for k in keys) + "}",
                                   "cursors": "{" + ",".join(str(k[1]) for k in keys) + "}",
                                   "limit": inbox.MAX_LIMIT})
                for i, seq, data in await cur.fetchall():
                    rows[i - 1].append((seq, data))
            self.queries += 1
            wrote = False
            for k, found in zip(keys, rows):
                data = "".join(f"id: {seq}\nevent: notification\ndata: {d}\n\n" for seq, d in found).encode() \
                    if found else None
                for s in pairs[k]:
                    s.reading = False
                    if data is not None and await s.deliver(data):
                        s.cursor = found[-1][0]
                        wrote = True
                    if s.dirty or len(found) == inbox.MAX_LIMIT:
                        s.dirty = False
                        self.wake(s)
            if wrote:
                self.listener.last_write = time.monotonic()
        except Exception as exc:  # noqa: BLE001  (the database: those streams end, their clients resume)
            log.warning("streams: a read failed (%s); ending %d streams", type(exc).__name__, len(batch))
            for s in batch:
                s.reading = False
                s.end()
        finally:
            self.slots.release()


def _error(status: int, code: str, message: str, headers: dict | None = None) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status, headers=headers)


class StreamServer:
    """The aiohttp application and what it shares: the listener, the reader, the auth pool, the caps."""

    def __init__(self, config: Config, url: str, *, heartbeat: float = sse.HEARTBEAT):
        from flask import Flask
        from flask.sessions import SecureCookieSessionInterface

        from .context import SESSION_LIFETIME

        config.require_secret()
        self.config, self.url, self.heartbeat = config, url, heartbeat
        self.max_streams = config.streams_max
        self.origins = frozenset(config.streams_origins)
        self.listener = Listener(url, beat_parts=max(1, int(heartbeat)))
        self.stopping = False
        # Flask's own cookie serializer, keyed like the web app's (the same secret and salt).
        self._flask = Flask("opsboard-streams")
        self._flask.secret_key = config.secret_key
        self._sessions = SecureCookieSessionInterface().get_signing_serializer(self._flask)
        self._session_max_age = int(SESSION_LIFETIME.total_seconds())
        self.auth_db: dbmod.Database | None = None
        self.pool: AsyncConnectionPool | None = None
        self.reader: Reader | None = None
        self._listen_task: asyncio.Task | None = None
        self._beat_task: asyncio.Task | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.auth_db = dbmod.Database(self.url, min_size=1, max_size=4, name="streams-auth").open(check=False)
        self.pool = AsyncConnectionPool(self.url, min_size=1, max_size=4, open=False, name="streams-read",
                                        kwargs={"autocommit": True, "row_factory": dict_row})
        await self.pool.open(wait=False)
        self.reader = Reader(self.pool, concurrency=4, listener=self.listener)
        self.listener.reader = self.reader
        self._listen_task = asyncio.ensure_future(self.listener.run())
        self._beat_task = asyncio.ensure_future(self._beats())

    async def _beats(self) -> None:
        parts = len(self.listener.parts)  # a part each second: each stream's beat every `heartbeat` s
        tick = 0
        while True:
            await asyncio.sleep(self.heartbeat / parts)
            self.listener.beat(tick % parts)
            tick += 1

    def end_streams(self) -> None:
        """Every open stream returns now (shutdown: streams end first)."""
        self.stopping = True
        for s in self.listener.all():
            s.end()

    async def close(self) -> None:
        for task in (self._listen_task, self._beat_task):
            if task is None:
                continue
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self.pool is not None:
            await self.pool.close(timeout=2)
        if self.auth_db is not None:
            await asyncio.to_thread(self.auth_db.close)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(API_PATH, self.api_stream, allow_head=True)
        app.router.add_get(PAGE_PATH, self.page_stream, allow_head=True)
        app.router.add_route("OPTIONS", API_PATH, self.preflight)
        app.router.add_route("OPTIONS", PAGE_PATH, self.preflight)
        app.router.add_get("/healthz", self.healthz)
        app.on_response_prepare.append(self._headers)
        return app

    # ------------------------------------------------------------ HTTP

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if origin and origin in self.origins:
            # Only the configured dashboard origins may read a stream with the user's cookie.
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Credentials"] = "true"
        response.headers.setdefault("Vary", "Origin")
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")

    async def preflight(self, request: web.Request) -> web.Response:
        headers = {}
        if request.headers.get("Origin") in self.origins:
            headers = {"Access-Control-Allow-Methods": "GET, HEAD",
                       "Access-Control-Allow-Headers": "Authorization, Last-Event-ID, Cache-Control, Accept",
                       "Access-Control-Max-Age": "600"}
        return web.Response(status=204, headers=headers)

    async def healthz(self, request: web.Request) -> web.Response:
        gap = self.listener.last_write - self.listener.last_notify
        return web.json_response({"ok": True, "pid": os.getpid(), "streams": self.listener.count,
                                  "listening": self.listener.connected,
                                  "max_streams": self.max_streams, "notifications": self.listener.notifications,
                                  "last_notify_to_last_write_ms": round(gap * 1000, 1) if gap > 0 else None,
                                  "reads": self.reader.queries if self.reader else 0})

    async def api_stream(self, request: web.Request) -> web.StreamResponse:
        scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            return _error(401, "unauthorized", "Send your token: Authorization: Bearer obu_...",
                          {"WWW-Authenticate": 'Bearer realm="opsboard-inbox"'})
        tok = await asyncio.to_thread(self._verify_token, secret.strip())
        if tok is None:
            return _error(401, "unauthorized", "The token is unknown or revoked.",
                          {"WWW-Authenticate": 'Bearer realm="opsboard-inbox", error="invalid_token"'})
        if not tok["active_member"]:
            return _error(403, "no_membership", "The token's user has no active membership of a tenant.")
        return await self.stream(request, tok["user_id"])

    async def page_stream(self, request: web.Request) -> web.StreamResponse:
        from .context import SESSION_COOKIE
        cookie = request.cookies.get(SESSION_COOKIE)
        user_id = await asyncio.to_thread(self._session_user, cookie, request) if cookie else None
        if user_id is None:
            return _error(401, "unauthorized", "Sign in to continue.")
        return await self.stream(request, user_id)

    def _verify_token(self, secret: str) -> dict | None:
        with self.auth_db.connection() as conn:
            return inbox.verify_token(conn, secret)

    def _session_user(self, cookie: str, request: web.Request):
        """The user of a dashboard session cookie, checked as the web app checks it, or None."""
        from itsdangerous import BadSignature

        from .context import CLIENT_KEY, SESSION_PROTECTION, client_fingerprint

        try:
            data = self._sessions.loads(cookie, max_age=self._session_max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not data.get("_user_id"):
            return None
        if SESSION_PROTECTION == "strong":
            # A cookie used from another address or browser than the one it was issued to signs nobody in:
            # the fingerprint the web stored at sign-in, computed again from this request.
            sent = data.get(CLIENT_KEY)
            here = client_fingerprint(request.headers.get("X-Forwarded-For"), request.remote,
                                      request.headers.get("User-Agent"))
            if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), here.encode()):
                return None
        with self.auth_db.connection() as conn:
            principal = load_session_principal(conn, str(data["_user_id"]))
        return principal.id if principal is not None else None

    @staticmethod
    def _cursor(request: web.Request) -> int | None:
        return inbox.parse_cursor(request.headers.get("Last-Event-ID") or request.query.get("since"))

    async def stream(self, request: web.Request, user_id) -> web.StreamResponse:
        """The SSE stream of ``user_id``'s inbox (the caller authenticated them)."""
        cursor = self._cursor(request)
        if cursor == -1:
            return _error(400, "invalid_cursor", "Last-Event-ID must be an inbox cursor (a non-negative integer)")
        if self.stopping or self.listener.count >= self.max_streams:
            return _error(503, "streams_full", "This stream server holds as many streams as it may; poll and "
                          "retry later.", {"Retry-After": str(sse.RETRY_AFTER)})
        key = str(user_id)
        if self.listener.per_user(key) >= sse.MAX_PER_USER:
            return _error(429, "too_many_streams", "Too many open streams for this user; close one.",
                          {"Retry-After": "5"})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "X-Accel-Buffering": "no"})
        if request.method == "HEAD":
            await resp.prepare(request)
            return resp
        done = asyncio.get_running_loop().create_future()
        s = Stream(user_id, cursor if cursor is not None else 0, done)
        self.listener.add(s)
        try:
            await resp.prepare(request)
            if cursor is None:
                async with self.pool.connection() as conn, conn.transaction():
                    await conn.execute(SCOPE_ALL_STREAMS)
                    cur = await conn.execute(dbmod.queries["inbox_latest_seq"], {"user_id": user_id})
                    s.cursor = (await cur.fetchone())["seq"]
            await resp.write(f"retry: 3000\n: connected at cursor {s.cursor}\n\n".encode())
            s.start(resp, request.transport)
            if not self.stopping:
                self.reader.wake(s)
                await s.pump()  # the stream's rows and heartbeats, written as they come, until it ends
        except ConnectionError:
            pass
        except psycopg.Error as exc:
            log.warning("streams: a stream ended on a database error (%s)", type(exc).__name__)
        finally:
            s.end()
            self.listener.remove(s)
        return resp


async def serve(config: Config, url: str, sock: socket.socket, *, heartbeat: float = sse.HEARTBEAT,
                on_ready: Callable[["StreamServer"], None] | None = None) -> None:
    """Run one stream server process on the listening ``sock`` until SIGTERM or SIGINT; streams end first,
    then the server closes.  ``on_ready`` is called once it accepts connections."""
    # Ten thousand open connections are a large heap of long-lived objects; the cyclic collector's
    # default thresholds ran a full pass over it every few deliveries (a large share of a broadcast's
    # time in the profile of `opsboard bench --scenario streams`).  Rarer passes: reference counting still frees almost everything at once.
    gc.set_threshold(50_000, 50, 100)
    server = StreamServer(config, url, heartbeat=heartbeat)
    await server.start()
    # handler_cancellation: a client that leaves cancels its stream's handler at once (its slot frees now,
    # not at its next heartbeat).
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=2.0, handle_signals=False,
                           handler_cancellation=True)
    await runner.setup()
    site = web.SockSite(runner, sock, shutdown_timeout=2.0)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if on_ready is not None:
        on_ready(server)
    try:
        await stop.wait()
    finally:
        log.info("streams: stopping (%d open)", server.listener.count)
        server.end_streams()
        await runner.cleanup()
        await server.close()


def listen_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` listening sockets on one address: with more than one, SO_REUSEPORT (the kernel spreads new
    connections over them; port 0 takes the port the first one got).  OSError when the address is taken."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(socket.create_server((host, port), family=family, backlog=4096, reuse_port=count > 1))
            port = socks[0].getsockname()[1]
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def _announce(host: str, port: int, processes: int, max_streams: int) -> None:
    each = f"{processes} processes, at most {max_streams} streams each" if processes > 1 \
        else f"at most {max_streams} streams"
    print(f"opsboard streams listening on http://{host}:{port} ({each})", flush=True)


def _end_with_parent(parent: int) -> None:
    """SIGTERM to this process when its parent dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``): no
    stream server process outlives its supervisor, holding the port with nobody to restart or stop it."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before the request took
        os._exit(0)


class Supervisor:
    """``OPSBOARD_STREAMS_PROCESSES`` > 1: one stream server per process, forked from here, each on its own
    SO_REUSEPORT socket of the one address (bound here, before the fork: a child that dies is forked again
    on the same socket, and the connections queued on it meanwhile are served).  Each process has its own
    LISTEN connection, pools and cap; the per-user cap holds per process (as with several hosts).
    SIGTERM / SIGINT go to every child, which ends its streams at once; then this process exits."""

    RESTART_DELAY = 1.0

    def __init__(self, config: Config, url: str, socks: list[socket.socket]):
        self.config, self.url, self.socks = config, url, socks
        self.children: dict[int, int] = {}  # pid -> socket index
        self.stopping = False
        self.pid = os.getpid()
        self._ready_r, self._ready_w = os.pipe()

    def _signal(self, signum, _frame) -> None:
        if os.getpid() != self.pid:
            return  # a child between fork and its own handlers: not ours to forward
        self.stopping = True
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _spawn(self, index: int) -> None:
        pid = os.fork()
        if pid:
            self.children[pid] = index
            return
        code = 1
        try:  # the child: its own signal handling (serve's), its one socket
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _end_with_parent(self.pid)
            os.close(self._ready_r)
            for i, s in enumerate(self.socks):
                if i != index:
                    s.close()
            ready_w = self._ready_w
            asyncio.run(serve(self.config, self.url, self.socks[index], on_ready=lambda _s: os.write(ready_w, b".")))
            code = 0
        except BaseException:  # noqa: BLE001  (whatever it was, this process ends; the parent starts another)
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._signal)
        for i in range(len(self.socks)):
            self._spawn(i)
        ready = 0
        while ready < len(self.socks) and not self.stopping:
            if select.select([self._ready_r], [], [], 0.5)[0]:
                ready += len(os.read(self._ready_r, 64))
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid:
                self.children.pop(pid, None)
                log.error("streams: a stream server process failed to start (exit status %s)", status)
                self._signal(signal.SIGTERM, None)
                self._reap()
                return 1
        if not self.stopping:
            host, port = self.socks[0].getsockname()[:2]
            _announce(host, port, len(self.socks), self.config.streams_max)
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            index = self.children.pop(pid, None)
            if index is not None and not self.stopping:
                log.warning("streams: stream server process %d ended (status %s); starting another", pid, status)
                time.sleep(self.RESTART_DELAY)
                if not self.stopping:
                    self._spawn(index)
        return 0

    def _reap(self) -> None:
        while self.children:
            try:
                pid, _ = os.wait()
            except ChildProcessError:
                break
            self.children.pop(pid, None)


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0: any free port) -> (host, port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--bind wants HOST:PORT, got {text!r}")
    return host, int(port)


def run(config: Config, url: str, bind: str) -> int:
    """``opsboard streams``: ``config.streams_processes`` stream server processes on ``bind``."""
    host, port = parse_bind(bind)
    try:
        socks = listen_sockets(host, port, config.streams_processes)
    except OSError as exc:
        from ..errors import UsageError
        raise UsageError(f"cannot listen on {bind}: {exc.strerror or exc}") from None
    try:
        if len(socks) > 1:
            return Supervisor(config, url, socks).run()
        bound = socks[0].getsockname()
        asyncio.run(serve(config, url, socks[0],
                          on_ready=lambda server: _announce(bound[0], bound[1], 1, server.max_streams)))
        return 0
    finally:
        for s in socks:
            s.close()

