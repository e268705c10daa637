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
  the streams woken together are read in one query (``inbox_since_many``),
  so a broadcast to 10,000 streams is a few dozen round trips, not 10,000.
- Authentication is the web's: the token check of the inbox API
  (:func:`opsboard.notifications.inbox.verify_token`) and, for the dashboard,
  the Flask session cookie decoded with Flask's own serializer, flask-login's
  session protection, then the server-side session check
  (:func:`opsboard.auth.load_session_principal`).  Both are sync: they run in
  threads, on a pool of their own.  A user only ever streams their own inbox.
- Caps: ``OPSBOARD_STREAMS_MAX`` open streams per process (503 with
  ``Retry-After`` beyond: the inbox page polls), 5 per user (429).
- CORS with credentials only for ``OPSBOARD_STREAMS_ORIGINS`` (the dashboard
  origins whose pages follow the 307 here).
- SIGTERM / SIGINT: every stream ends at once (clients reconnect elsewhere or
  poll), then the server closes; well within any grace period.
"""
from __future__ import annotations

import asyncio
import logging
import signal

import psycopg
from aiohttp import web
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from .. import db as dbmod
from ..auth import load_session_principal
from ..config import Config
from ..notifications import inbox
from . import sse

log = logging.getLogger("opsboard.streams")

API_PATH = "/api/v1/inbox/stream"
PAGE_PATH = "/inbox/stream"
#: Most (recipient, cursor) pairs one batched read asks for.
READ_BATCH = 500


class Stream:
    """One open client: woken by the listener (re-reads its user's inbox) or by the heartbeat
    (writes a comment line, then re-reads: the poll behind the hint)."""

    __slots__ = ("key", "woken", "beat")

    def __init__(self, key: str):
        self.key = key
        self.woken = asyncio.Event()
        self.beat = False


class Listener:
    """The process's one LISTEN connection on the inbox channel, fanned out to the open streams.

    A payload is a recipient id (wakes that user's streams) or ``*`` (all).  After each
    (re)connection every stream is woken once: a notification may have been missed meanwhile.
    """

    def __init__(self, url: str):
        self.url = url
        self.streams: dict[str, set[Stream]] = {}
        self.count = 0
        self.connected = False
        self.notifications = 0

    def add(self, stream: Stream) -> None:
        self.streams.setdefault(stream.key, set()).add(stream)
        self.count += 1

    def remove(self, stream: Stream) -> None:
        group = self.streams.get(stream.key)
        if group is not None and stream in group:
            group.discard(stream)
            self.count -= 1
            if not group:
                del self.streams[stream.key]

    def per_user(self, key: str) -> int:
        return len(self.streams.get(key, ()))

    def beat(self, part: int, parts: int) -> None:
        """The heartbeat of one ``part`` of ``parts`` of the streams: one timer for the process, not one
        per stream, and the streams spread over the period (never 10,000 heartbeats and re-reads at once)."""
        for group in list(self.streams.values()):
            for s in group:
                if (id(s) >> 4) % parts == part:
                    s.beat = True
                    s.woken.set()

    def wake(self, payload: str) -> None:
        groups = self.streams.values() if payload == "*" else [self.streams.get(payload, ())]
        for group in list(groups):
            for s in group:
                s.woken.set()

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
                        self.wake(n.payload)
            except (psycopg.Error, OSError) as exc:
                failures += 1
                self.connected = False
                log.warning("streams: LISTEN connection lost (%s); reconnecting", type(exc).__name__)
                await asyncio.sleep(0.5)
            finally:
                self.connected = False


class Reader:
    """Batched inbox reads: each stream asks for its rows after its cursor; the asks that arrive
    while earlier reads are under way are answered together, up to ``concurrency`` queries at once."""

    def __init__(self, pool: AsyncConnectionPool, concurrency: int):
        self.pool = pool
        self.pending: list[tuple[str, int, asyncio.Future]] = []
        self.slots = asyncio.Semaphore(concurrency)
        self.flushing = False
        self.tasks: set[asyncio.Task] = set()
        self.queries = 0

    def since(self, user_id: str, cursor: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((user_id, cursor, fut))
        if not self.flushing:
            self.flushing = True
            self._spawn(self._flush())
        return fut

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _flush(self) -> None:
        try:
            while self.pending:
                await self.slots.acquire()
                batch, self.pending = self.pending[:READ_BATCH], self.pending[READ_BATCH:]
                self._spawn(self._query(batch))
        finally:
            self.flushing = False

    async def _query(self, batch) -> None:
        try:
            pairs: dict[tuple[str, int], list[asyncio.Future]] = {}
            for user_id, cursor, fut in batch:
                pairs.setdefault((user_id, cursor), []).append(fut)
            keys = list(pairs)
            rows: list[list[dict]] = [[] for _ in keys]
            async with self.pool.connection() as conn:
                cur = await conn.execute(dbmod.queries["inbox_since_many"],
                                         {"user_ids": [k[0] for k in keys], "cursors": [k[1] for k in keys],
                                          "limit": inbox.MAX_LIMIT})
                for row in await cur.fetchall():
                    rows[row["i"] - 1].append(row)
            self.queries += 1
            for k, found in zip(keys, rows):
                for fut in pairs[k]:
                    if not fut.done():
                        fut.set_result(found)
        except BaseException as exc:
            for _u, _c, fut in batch:
                if not fut.done():
                    fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError("read cancelled"))
            if not isinstance(exc, Exception):
                raise
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
        self.listener = Listener(url)
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
        self.reader = Reader(self.pool, concurrency=4)
        self._listen_task = asyncio.ensure_future(self.listener.run())
        self._beat_task = asyncio.ensure_future(self._beats())

    async def _beats(self) -> None:
        parts = max(1, int(self.heartbeat))  # a part each second: each stream's beat every `heartbeat` s
        tick = 0
        while True:
            await asyncio.sleep(self.heartbeat / parts)
            self.listener.beat(tick % parts, parts)
            tick += 1

    def end_streams(self) -> None:
        """Every open stream returns now (shutdown: streams end first)."""
        self.stopping = True
        self.listener.wake("*")

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
        return web.json_response({"ok": True, "streams": self.listener.count, "listening": self.listener.connected,
                                  "max_streams": self.max_streams})

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
        from flask_login.utils import _create_identifier
        from itsdangerous import BadSignature

        from .context import SESSION_PROTECTION

        try:
            data = self._sessions.loads(cookie, max_age=self._session_max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not data.get("_user_id"):
            return None
        if SESSION_PROTECTION == "strong":
            # flask-login's "strong" protection: a cookie used from another address or browser than the
            # one it was issued to signs nobody in.  Its own identifier function, on this request's headers.
            environ = {"REMOTE_ADDR": request.remote or ""}
            headers = {k: v for k, v in request.headers.items() if k.lower() in ("user-agent", "x-forwarded-for")}
            with self._flask.test_request_context("/", headers=headers, environ_base=environ):
                if data.get("_id") != _create_identifier():
                    return None
        with self.auth_db.connection() as conn:
            principal = load_session_principal(conn, str(data["_user_id"]))
        return principal.id if principal is not None else None

    @staticmethod
    def _cursor(request: web.Request) -> int | None:
        raw = request.headers.get("Last-Event-ID") or request.query.get("since")
        if raw is None or raw == "":
            return None
        try:
            value = int(raw)
        except ValueError:
            return -1
        return value if 0 <= value <= inbox.MAX_CURSOR else -1

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
        s = Stream(key)
        self.listener.add(s)
        try:
            await resp.prepare(request)
            if cursor is None:
                async with self.pool.connection() as conn:
                    cur = await conn.execute(dbmod.queries["inbox_latest_seq"], {"user_id": user_id})
                    cursor = (await cur.fetchone())["seq"]
            await resp.write(f"retry: 3000\n: connected at cursor {cursor}\n\n".encode())
            while not self.stopping:
                s.woken.clear()  # before the read: a wake-up during it is kept for the next turn
                rows = await self.reader.since(key, cursor)
                if rows:
                    cursor = rows[-1]["seq"]
                    await resp.write("".join(sse.event_text(r) for r in rows).encode())
                if len(rows) == inbox.MAX_LIMIT:
                    continue
                await s.woken.wait()
                if s.beat:
                    s.beat = False
                    await resp.write(b": heartbeat\n\n")
        except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
            pass
        except psycopg.Error as exc:
            log.warning("streams: a stream ended on a database error (%s)", type(exc).__name__)
        finally:
            self.listener.remove(s)
        return resp


async def serve(config: Config, url: str, host: str, port: int, *, heartbeat: float = sse.HEARTBEAT) -> None:
    """Run the stream server until SIGTERM or SIGINT; streams end first, then the server closes."""
    server = StreamServer(config, url, heartbeat=heartbeat)
    await server.start()
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=2.0, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096, shutdown_timeout=2.0)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bound = runner.addresses[0]
    print(f"opsboard streams listening on http://{bound[0]}:{bound[1]} (at most {server.max_streams} streams)",
          flush=True)
    try:
        await stop.wait()
    finally:
        log.info("streams: stopping (%d open)", server.listener.count)
        server.end_streams()
        await runner.cleanup()
        await server.close()


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0: any free port) -> (host, port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--bind wants HOST:PORT, got {text!r}")
    return host, int(port)


def run(config: Config, url: str, bind: str) -> int:
    host, port = parse_bind(bind)
    try:
        asyncio.run(serve(config, url, host, port))
    except OSError as exc:
        from ..errors import UsageError
        raise UsageError(f"cannot listen on {bind}: {exc.strerror or exc}") from None
    return 0

