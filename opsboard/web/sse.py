"""Server-Sent Events of a user's inbox, shared by /api/v1/inbox/stream and /inbox/stream.

No database connection is held while a stream waits: each stream registers a
waiter with the process's one LISTEN connection (:class:`opsboard.pgnotify.Hub`)
and borrows a pooled connection only to read the inbox after a wake-up.
Event ids are inbox cursors; ``Last-Event-ID`` (or ``?since=``) resumes from
the inbox, so a lost stream is made up by the sync.  A comment line every
``SSE_HEARTBEAT`` seconds (15) keeps proxies from closing an idle stream and
detects gone clients.  At most ``SSE_MAX_PER_USER`` (5) streams per user and
process: the next one gets 429.

Where streams run: with ``OPSBOARD_STREAMS_URL`` set, both routes answer at once
with a 307 to the stream server (:mod:`opsboard.web.streams`, ``opsboard
streams``), where a waiting stream costs no thread.  Without it the web serves
streams itself, but each holds a gunicorn thread: at most
``OPSBOARD_SSE_MAX_STREAMS`` (default 2) per process, so pages always keep
threads; the next stream gets 503 with ``Retry-After`` and the inbox page polls
instead.  See docs/notifications.md.
"""
from __future__ import annotations

import json
import threading

from flask import Response, current_app, request, session
from flask_login import current_user

from .. import pgnotify, tenancy
from ..notifications import inbox
from .context import CLIENT_KEY, bind_session_to_client, get_config, get_db

HEARTBEAT = 15.0
MAX_PER_USER = 5
#: Seconds a refused stream client is told to wait (503 and 429).
RETRY_AFTER = 30
_lock = threading.Lock()
_open = [0]  # streams this process serves now (all users)


class TooManyStreams(Exception):
    """The user's own streams are at their cap (429)."""


class StreamsFull(Exception):
    """This process serves as many streams as it may (503 + Retry-After: the page polls)."""


def redirect_response() -> Response | None:
    """A 307 to the stream server when ``OPSBOARD_STREAMS_URL`` is set (same path and query), else None.

    Nothing is looked up first: the stream server authenticates, so the redirect holds no thread
    and no connection.  Only a dashboard session signed in before sessions carried their client's
    fingerprint (:func:`opsboard.web.context.client_fingerprint`, which the stream server checks) is
    loaded once, as any page loads it, and gets its fingerprint here (the cookie the redirect sets).
    """
    base = get_config().streams_url
    if not base:
        return None
    if CLIENT_KEY not in session and "_user_id" in session and current_user.is_authenticated:
        bind_session_to_client()
    query = request.query_string.decode("latin-1")
    resp = Response(status=307)
    resp.headers["Location"] = base + request.path + (f"?{query}" if query else "")
    resp.headers["Cache-Control"] = "no-store"
    return resp


def hub() -> pgnotify.Hub:
    """The process's hub, created on first use (after gunicorn forked, so the thread is ours)."""
    with _lock:
        h = current_app.extensions.get("opsboard_pgnotify")
        if h is None:
            # LISTEN needs one server session: the direct URL, never a transaction pooler.
            url = (current_app.extensions.get("test_db_url") or current_app.extensions.get("opsboard_direct_url")
                   or get_config().database_url)
            h = current_app.extensions["opsboard_pgnotify"] = pgnotify.Hub(url, name="sse-hub")
            current_app.extensions["opsboard_sse_streams"] = {}
        return h


def _cursor_from_request() -> int | None:
    return inbox.parse_cursor(request.headers.get("Last-Event-ID") or request.args.get("since"))


def event_data(row: dict) -> dict:
    """An inbox row as a stream event's data (the inbox page's polling gets the same)."""
    return {"id": str(row["id"]), "cursor": row["seq"], "event_type": row["event_type"],
            "category": row["category"], "title": row["title"], "body": row["body"],
            "locale": row.get("locale"), "created_at": row["created_at"].isoformat(),
            "read": row["read_at"] is not None, "link": inbox_link(row.get("data"))}


def inbox_link(data) -> str | None:
    """The page an inbox row is about (its ``data.link``: a path on this site, issue 43), or None."""
    from ..notifications.render import safe_path
    return safe_path((data or {}).get("link")) if isinstance(data, dict) else None


def event_text(row: dict) -> str:
    return f"id: {row['seq']}\nevent: notification\ndata: {json.dumps(event_data(row), ensure_ascii=False)}\n\n"


def stream_response(user_id) -> Response:
    """The SSE response for ``user_id`` (raises :class:`TooManyStreams`, :class:`StreamsFull`,
    ValueError on a bad cursor)."""
    cursor = _cursor_from_request()
    if cursor == -1:
        raise ValueError("Last-Event-ID must be an inbox cursor (a non-negative integer)")
    if request.method == "HEAD":
        # No body will be read, so the generator below would never run and never release its slot
        # and waiter: answer the headers only, holding nothing.
        return _headers(Response(mimetype="text/event-stream"))
    h = hub()
    streams = current_app.extensions["opsboard_sse_streams"]
    key = str(user_id)
    limit = current_app.config.get("SSE_MAX_PER_USER", MAX_PER_USER)
    heartbeat = current_app.config.get("SSE_HEARTBEAT", HEARTBEAT)
    process_limit = current_app.config.get("SSE_MAX_STREAMS", get_config().sse_max_streams)
    with _lock:
        if _open[0] >= process_limit:
            raise StreamsFull()
        if streams.get(key, 0) >= limit:
            raise TooManyStreams()
        streams[key] = streams.get(key, 0) + 1
        _open[0] += 1
    database = get_db()
    waiter = h.waiter(inbox.CHANNEL, key)

    released = []

    def release():
        # Idempotent: called by the generator's end and by the response's close, whichever comes first.
        # A response closed before its first chunk (client gone) never starts the generator, so its
        # ``finally`` alone would leak the slot.
        with _lock:
            if released:
                return
            released.append(True)
            _open[0] -= 1
            streams[key] = streams.get(key, 1) - 1
            if streams[key] <= 0:
                streams.pop(key, None)
        waiter.close()

    # The generator runs after the request's teardown: it reads in the scope the request had.
    scope = tenancy.current()

    def generate():
        last = cursor
        try:
            if last is None:
                with tenancy.kept(scope), database.connection() as conn:
                    last = inbox.latest_cursor(conn, user_id)
            yield f"retry: 3000\n: connected at cursor {last}\n\n"
            while True:
                with tenancy.kept(scope), database.connection() as conn:
                    rows = inbox.since(conn, user_id, last)
                for row in rows:
                    last = row["seq"]
                    yield event_text(row)
                if len(rows) == inbox.MAX_LIMIT:
                    continue
                if not waiter.wait(heartbeat):
                    yield ": heartbeat\n\n"
        finally:
            release()

    resp = _headers(Response(generate(), mimetype="text/event-stream"))
    resp.call_on_close(release)
    return resp


def _headers(resp: Response) -> Response:
    resp.headers["Cache-Control"] = "no-cache"
    resp.headers["X-Accel-Buffering"] = "no"
    return resp
