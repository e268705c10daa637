"""The database or the disk away: 503 ``unavailable`` with Retry-After, never a 500 with a traceback.

Found by the chaos run (tests/chaos): across a PostgreSQL restart and an unwritable attachment
folder the API answered 500 ``internal_error`` and logged a traceback per request, although the
request was fine and its retry (same Idempotency-Key) succeeded a moment later.
"""
from __future__ import annotations

import io

import pytest

from opsboard.db import Database
from opsboard.notifications import inbox
from opsboard.web.errors import UNAVAILABLE_RETRY_AFTER
from tests.conftest import connect, make_config
from tests.support.tickets import make_desk

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def app(db_url, tmp_path):
    from opsboard.web.app import create_app
    database = Database(db_url, min_size=1, max_size=2).open()
    application = create_app({"OPSBOARD": make_config(database_url=db_url, storage_dir=tmp_path / "storage"),
                              "DATABASE": database, "TESTING": True})
    yield application
    database.close()


@pytest.fixture
def desk(db_url):
    with connect(db_url) as c:
        d = make_desk(c, "acme")
        d.token, _ = inbox.create_token(c, d.requester["id"])
    return d


def _ticket(client, desk, key="k-1"):
    return client.post("/api/v1/tickets", headers={"Authorization": f"Bearer {desk.token}", "Idempotency-Key": key},
                       data={"subject": "Screen", "body": "See", "files": [(io.BytesIO(PNG), "screen.png")]},
                       content_type="multipart/form-data")


def test_an_unwritable_attachment_folder_is_503_and_the_retry_stores_the_ticket(app, desk, db_url, tmp_path, caplog):
    (tmp_path / "storage").write_bytes(b"a file where the folder should be")   # root ignores chmod
    r = _ticket(app.test_client(), desk)
    assert r.status_code == 503, r.get_json()
    assert r.get_json()["error"] == "unavailable" and r.headers["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER)
    assert "Traceback" not in caplog.text
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM tickets").fetchone()["n"] == 0   # nothing half-stored

    (tmp_path / "storage").unlink()
    r = _ticket(app.test_client(), desk)
    assert r.status_code == 201, r.get_json()
    assert [a["size"] for a in r.get_json()["attachments"]] == [len(PNG)]


def test_connections_cut_by_the_server_are_503(app, desk, db_url):
    client = app.test_client()
    assert client.get("/api/v1/tickets", headers={"Authorization": f"Bearer {desk.token}"}).status_code == 200
    with connect(db_url) as c:   # what a restart does to every open connection
        cut = c.execute("SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()["n"]
    assert cut >= 1
    r = client.get("/api/v1/tickets", headers={"Authorization": f"Bearer {desk.token}"})
    assert r.status_code == 503, r.get_data(as_text=True)
    assert r.get_json()["error"] == "unavailable" and r.headers["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER)
    # the pool drops the broken connection: the next request is served
    assert client.get("/api/v1/tickets", headers={"Authorization": f"Bearer {desk.token}"}).status_code == 200
