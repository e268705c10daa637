"""What blueprints take from the running app: the database, the configuration
and the request id.  Blueprints import this module, never the factory
(:mod:`opsboard.web.app`), so the factory can import them without a cycle.
"""
from __future__ import annotations

import hashlib
from contextlib import contextmanager
from datetime import timedelta
from typing import Iterator

import psycopg
from flask import current_app, g, request, session

from .. import db as dbmod
from ..config import Config
from ..replica import ReadRouter

#: The dashboard's session cookie and its lifetime; the stream server (opsboard.web.streams) reads the same cookie.
SESSION_COOKIE = "opsboard_session"
SESSION_LIFETIME = timedelta(hours=12)
#: flask-login's session protection; the stream server applies the same check (:data:`CLIENT_KEY`).
SESSION_PROTECTION = "strong"
#: Session key of :func:`client_fingerprint`: the browser a dashboard session was issued to.
CLIENT_KEY = "_client"

#: Session key: the primary's WAL position after this session's last write (read your own writes).
WRITE_LSN = "_wlsn"


def get_db() -> dbmod.Database:
    return current_app.extensions["opsboard_db"]


def get_reads() -> ReadRouter:
    return current_app.extensions["opsboard_reads"]


@contextmanager
def read_connection() -> Iterator[psycopg.Connection]:
    """A connection for a heavy read: the replica's when it is usable and has
    replayed this session's last write, else the primary's (opsboard.replica)."""
    with get_reads().connection(min_lsn=session.get(WRITE_LSN)) as conn:
        yield conn


class RequestReads:
    """:func:`read_connection` as an object with ``connection()``, for code that takes a database."""

    def connection(self):
        return read_connection()


def get_config() -> Config:
    return current_app.extensions["opsboard_config"]


def request_id() -> str:
    return getattr(g, "request_id", "")


def client_fingerprint(forwarded_for: str | None, remote_addr: str | None, user_agent: str | None) -> str:
    """What ties a dashboard session to its browser: SHA-256 of the client's address (the first
    ``X-Forwarded-For`` entry, else the peer's) and its ``User-Agent``, as hex.

    Stored in the signed session under :data:`CLIENT_KEY` when the user signs in; the stream server
    (:mod:`opsboard.web.streams`), which reads the same cookie outside Flask, computes it again from its
    own request and opens nothing for a cookie carried to another address or browser.  The inputs are
    those of flask-login's "strong" session protection (:data:`SESSION_PROTECTION`), which guards the
    web's own requests: the two agree on which client a session belongs to, without the stream server
    calling flask-login's internals.
    """
    address = (forwarded_for.split(",")[0].strip() if forwarded_for else remote_addr) or ""
    text = f"{address}|{user_agent or ''}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def bind_session_to_client() -> None:
    """Record this request's :func:`client_fingerprint` in the session (at sign-in, or for a session
    signed in before the fingerprint existed: see :func:`opsboard.web.sse.redirect_response`)."""
    session[CLIENT_KEY] = client_fingerprint(request.headers.get("X-Forwarded-For"), request.remote_addr,
                                             request.headers.get("User-Agent"))
