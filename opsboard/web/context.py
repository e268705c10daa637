"""What blueprints take from the running app: the database, the configuration
and the request id.  Blueprints import this module, never the factory
(:mod:`opsboard.web.app`), so the factory can import them without a cycle.
"""
from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta
from typing import Iterator

import psycopg
from flask import current_app, g, session

from .. import db as dbmod
from ..config import Config
from ..replica import ReadRouter

#: The dashboard's session cookie and its lifetime; the stream server (opsboard.web.streams) reads the same cookie.
SESSION_COOKIE = "opsboard_session"
SESSION_LIFETIME = timedelta(hours=12)
#: flask-login's session protection; the stream server applies the same check.
SESSION_PROTECTION = "strong"

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
