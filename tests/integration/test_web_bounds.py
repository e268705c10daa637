"""The web's transactions are bounded (issue 51): ``lock_timeout`` and ``statement_timeout`` set per
transaction (``set_config(..., true)``, so they hold behind PgBouncer), configurable and validated;
a held table lock answers 503 with Retry-After within the lock timeout, never a wait as long as the lock."""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from opsboard import apikeys, audit, auth
from opsboard.config import Config, ConfigError
from opsboard.db import Database
from tests.conftest import CATALOGUE, connect, make_config


def test_the_timeouts_are_configured_and_validated():
    c = Config.from_env({"OPSBOARD_ENV": "test"})
    assert c.web_bounds() == {"lock_timeout": "2000ms", "statement_timeout": "10000ms"}
    c = Config.from_env({"OPSBOARD_ENV": "test", "OPSBOARD_WEB_LOCK_TIMEOUT": "0.25",
                         "OPSBOARD_WEB_STATEMENT_TIMEOUT": "3"})
    assert c.web_bounds() == {"lock_timeout": "250ms", "statement_timeout": "3000ms"}
    for env, message in [({"OPSBOARD_WEB_LOCK_TIMEOUT": "soon"}, "is not a number"),
                         ({"OPSBOARD_WEB_STATEMENT_TIMEOUT": "0"}, "must be between"),
                         ({"OPSBOARD_WEB_LOCK_TIMEOUT": "5", "OPSBOARD_WEB_STATEMENT_TIMEOUT": "1"}, "is longer than")]:
        with pytest.raises(ConfigError, match=message):
            Config.from_env({"OPSBOARD_ENV": "test", **env})


@pytest.mark.parametrize("pooler", ["none", "transaction"])
def test_every_transaction_carries_the_bounds_and_they_end_with_it(db_url, pooler):
    database = Database(db_url, min_size=1, max_size=1, pooler=pooler,
                        bounds={"lock_timeout": "250ms", "statement_timeout": "3000ms"}).open()
    try:
        with database.connection() as conn:
            with conn.transaction():
                row = conn.execute("SELECT current_setting('lock_timeout') AS l, "
                                   "current_setting('statement_timeout') AS s").fetchone()
                assert (row["l"], row["s"]) == ("250ms", "3s")
                with conn.transaction():  # a savepoint keeps them
                    assert conn.execute("SELECT current_setting('lock_timeout') AS l").fetchone()["l"] == "250ms"
            with conn.pipeline(), conn.transaction():
                cur = conn.execute("SELECT current_setting('statement_timeout') AS s")
            assert cur.fetchone()["s"] == "3s"
            outside = conn.execute("SELECT current_setting('lock_timeout') AS l").fetchone()["l"]
            # Direct: also the session's default (the startup packet); behind a pooler: nothing
            # outside a transaction (the role's settings), so nothing leaks to the next client.
            assert outside == ("250ms" if pooler == "none" else "0")
    finally:
        database.close()


def test_a_held_table_lock_answers_503_within_the_lock_timeout(db_url):
    from opsboard.web.app import create_app
    config = make_config(database_url=db_url).replace(web_lock_timeout=0.3, web_statement_timeout=2.0)
    database = Database(db_url, min_size=1, max_size=4, bounds=config.web_bounds()).open()
    app = create_app({"OPSBOARD": config, "DATABASE": database, "TESTING": True, "CATALOGUE": CATALOGUE})
    client = app.test_client()
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, f"lock-{uuid.uuid4().hex[:6]}")
        key, _ = apikeys.create(c, t["id"], "lock", audit.Actor("test"))
    h = {"Authorization": f"Bearer {key}"}
    assert client.post("/api/v1/jobs", json={"type": "diag.noop", "payload": {}}, headers=h).status_code == 202
    blocker = connect(db_url)
    try:
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        # Without the bounds a request would wait as long as the lock: released after 5 s, so that the
        # test then fails on the time taken instead of hanging.
        release = threading.Timer(5.0, lambda: blocker.execute("ROLLBACK"))
        release.start()
        for headers in (h, {**h, "Idempotency-Key": f"k-{uuid.uuid4().hex}"}):
            started = time.monotonic()
            r = client.post("/api/v1/jobs", json={"type": "diag.noop", "payload": {}}, headers=headers)
            took = time.monotonic() - started
            assert r.status_code == 503 and r.get_json()["error"] == "unavailable", r.get_data(as_text=True)
            assert r.headers["Retry-After"].isdigit()
            assert took < 2.0, took
    finally:
        release.cancel()
        release.join()
        blocker.execute("ROLLBACK")  # a no-op (a server warning) when the timer already rolled back
        blocker.close()
        database.close()
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'diag.noop'").fetchone()["n"] == 1
