"""Server-Sent Events of a user's inbox, shared by /api/v1/inbox/stream and /inbox/stream.

No database connection is held while a stream waits: each stream registers a
waiter with the process's one LISTEN connection (:class:`opsboard.pgnotify.Hub`)
and borrows a pooled connection only to read the inbox after a wake-up.
Event ids are inbox cursors; ``Last-Event-ID`` (or ``?since=``) resumes from
the inbox, so a lost stream is made up by the sync.  A comment line every
``SSE_HEARTBEAT`` seconds (15) keeps proxies from closing an idle stream and
detects gone clients.  At most ``SSE_MAX_PER_USER`` (5) streams per user and
process: the next one gets 429.

Deployment: each open stream occupies one gunicorn thread, so run the web with
the ``gthread`` worker and enough threads (``gunicorn -k gthread --threads 100
--timeout 0 ...`` or a separate gunicorn for ``/api/v1/inbox/stream``), see docs/notifications.md.
"""
from __future__ import annotations

import json
import threading

from flask import Response, current_app, request

from .. import pgnotify
from ..notifications import inbox
from .context import get_config, get_db

HEARTBEAT = 15.0
MAX_PER_USER = 5
_lock = threading.Lock()


class TooManyStreams(Exception):
    pass


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
    raw = request.headers.get("Last-Event-ID") or request.args.get("since")
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        return -1
    return value if 0 <= value <= inbox.MAX_CURSOR else -1


def event_text(row: dict) -> str:
    data = {"id": str(row["id"]), "cursor": row["seq"], "event_type": row["event_type"],
            "category": row["category"], "title": row["title"], "body": row["body"],
            "locale": row.get("locale"), "created_at": row["created_at"].isoformat(),
            "read": row["read_at"] is not None}
    return f"id: {row['seq']}\nevent: notification\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def stream_response(user_id) -> Response:
    """The SSE response for ``user_id`` (raises :class:`TooManyStreams`, ValueError on a bad cursor)."""
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
    with _lock:
        if streams.get(key, 0) >= limit:
            raise TooManyStreams()
        streams[key] = streams.get(key, 0) + 1
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
            streams[key] = streams.get(key, 1) - 1
            if streams[key] <= 0:
                streams.pop(key, None)
        waiter.close()

    def generate():
        last = cursor
        try:
            if last is None:
                with database.connection() as conn:
                    last = inbox.latest_cursor(conn, user_id)
            yield f"retry: 3000\n: connected at cursor {last}\n\n"
            while True:
                with database.connection() as conn:
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
