"""The audit log: append-only, idempotent by request key, filterable and
keyset-paginated, in the core and on the /audit/ page."""
from __future__ import annotations

import html
import re
import threading
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from opsboard import audit, auth
from opsboard.auth import TenantScope
from opsboard.schema import new_id
from tests.conftest import connect, wait_for

ALL = TenantScope(all=True)


def insert_raw(c, *, at, action="seed.row", actor="seeder@example.test", tenant_id=None, reason=None):
    """Rows with a chosen time (the audit_insert query always stamps now())."""
    rid = new_id()
    c.execute("INSERT INTO audit_log (id, at, actor_label, action, tenant_id, reason) VALUES (%s, %s, %s, %s, %s, %s)",
              (rid, at, actor, action, tenant_id, reason))
    return rid


# ---------------------------------------------------------------- append-only

@pytest.mark.parametrize("statement", [
    "UPDATE audit_log SET reason = 'rewritten' WHERE id = %(id)s",
    "DELETE FROM audit_log WHERE id = %(id)s",
    "TRUNCATE audit_log",
])
def test_rows_cannot_be_changed(conn, statement):
    row = audit.record(conn, audit.SYSTEM, "test.append_only", reason="original")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="audit_log is append-only"):
        with conn.transaction():
            conn.execute(statement, {"id": row["id"]})
    again = conn.execute("SELECT reason FROM audit_log WHERE id = %s", (row["id"],)).fetchone()
    assert again == {"reason": "original"}


def test_record_stores_everything(conn):
    tenant = auth.ensure_tenant(conn, "acme")
    actor = audit.Actor("ops@example.test", None, request_id="req-1")
    target = uuid.uuid4()
    row = audit.record(conn, actor, "job.replay", target_type="job", target_id=target, tenant_id=tenant["id"],
                       reason="provider fixed", before={"status": "dead"}, after={"status": "pending", "n": [1, 2]})
    assert row["actor_label"] == "ops@example.test"
    assert row["target_id"] == str(target)
    assert row["tenant_id"] == tenant["id"]
    assert row["before"] == {"status": "dead"} and row["after"] == {"status": "pending", "n": [1, 2]}
    assert row["request_id"] == "req-1"
    assert row["request_key"] is None
    assert row["at"] is not None
    # Without a key, the same action may be recorded any number of times.
    assert audit.record(conn, actor, "job.replay", target_type="job", target_id=target) is not None


# ---------------------------------------------------------------- idempotency

def test_request_key_records_once(conn):
    first = audit.record(conn, audit.SYSTEM, "job.replay", target_id="a", request_key="click-1")
    assert first is not None
    second = audit.record(conn, audit.SYSTEM, "job.replay", target_id="b", request_key="click-1")
    assert second is None
    found = audit.find_by_request_key(conn, "job.replay", "click-1")
    assert found["id"] == first["id"] and found["target_id"] == "a"
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE request_key = 'click-1'").fetchone()["n"] == 1
    # The key is scoped to the action.
    other = audit.record(conn, audit.SYSTEM, "job.resolve", request_key="click-1")
    assert other is not None and other["id"] != first["id"]
    assert audit.find_by_request_key(conn, "job.replay", "never-used") is None


def test_request_key_holds_across_concurrent_connections(db_url):
    """Two sessions racing with the same key: the second waits on the unique
    index until the first commits, then records nothing."""
    result = {}
    with connect(db_url) as a, connect(db_url) as b, connect(db_url) as watcher:
        b_pid = b.info.backend_pid
        with a.transaction():
            first = audit.record(a, audit.SYSTEM, "job.replay", request_key="race")
            thread = threading.Thread(
                target=lambda: result.update(second=audit.record(b, audit.SYSTEM, "job.replay", request_key="race")))
            thread.start()
            wait_for(lambda: watcher.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                             (b_pid,)).fetchone()["wait_event_type"] == "Lock",
                     timeout=20, message="the second insert to wait on the first")
        thread.join(20)
        assert first is not None
        assert result == {"second": None}
        assert audit.find_by_request_key(b, "job.replay", "race")["id"] == first["id"]


# ---------------------------------------------------------------- core listing

def test_list_filters_and_scope(conn):
    a = auth.ensure_tenant(conn, "tenant-a")
    b = auth.ensure_tenant(conn, "tenant-b")
    day = datetime(2026, 3, 10, 12, tzinfo=timezone.utc)
    insert_raw(conn, at=day, action="job.replay", actor="alice@example.test", tenant_id=a["id"])
    insert_raw(conn, at=day + timedelta(days=1), action="job.resolve", actor="bob@example.test", tenant_id=b["id"])
    insert_raw(conn, at=day + timedelta(days=2), action="jobs.other", actor="100%_sure@example.test")
    insert_raw(conn, at=day + timedelta(days=3), action="alert.ack", actor="alice@example.test", tenant_id=a["id"])

    def actions(scope=ALL, **filters):
        return [r["action"] for r in audit.list_records(conn, scope, **filters)]

    assert actions() == ["alert.ack", "jobs.other", "job.resolve", "job.replay"]
    assert actions(actor="ALICE") == ["alert.ack", "job.replay"]
    assert actions(action="job") == ["job.resolve", "job.replay"]  # a prefix at a dot, not "jobs.other"
    assert actions(action="job.replay") == ["job.replay"]
    assert actions(since=day + timedelta(days=1), until=day + timedelta(days=3)) == ["jobs.other", "job.resolve"]
    assert actions(TenantScope(all=False, ids=(a["id"],))) == ["alert.ack", "job.replay"]
    assert actions(TenantScope(all=False)) == []
    # Filter text is matched literally, never as a LIKE pattern.
    assert actions(actor="%") == ["jobs.other"]
    assert actions(actor="_") == ["jobs.other"]
    assert actions(action="%") == []
    assert actions(action="j_b") == []


def test_list_keyset_pagination_with_ties(conn):
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ids = {insert_raw(conn, at=at + timedelta(seconds=i // 7)) for i in range(60)}  # groups share a timestamp
    seen, cursor = [], None
    while True:
        page = audit.list_records(conn, ALL, action="seed.row", after=cursor, limit=8)
        if not page:
            break
        seen.extend(r["id"] for r in page)
        cursor = (page[-1]["at"], page[-1]["id"])
    assert len(seen) == len(set(seen)) == 60
    assert set(seen) == ids


def test_actions_lists_distinct_names(conn):
    audit.record(conn, audit.SYSTEM, "zz.test")
    audit.record(conn, audit.SYSTEM, "zz.test")
    names = audit.actions(conn, TenantScope(all=True))
    assert names.count("zz.test") == 1
    assert names == sorted(names)


# ---------------------------------------------------------------- the /audit/ page

ROW_RE = re.compile(r'data-audit-id="([0-9a-f-]{36})"')
NEXT_RE = re.compile(r'href="(/audit/\?[^"]*after=[^"]*)"')


def page_ids(text: str) -> list[str]:
    return ROW_RE.findall(text)


@pytest.fixture
def ops_client(client, login_as):
    login_as("ops")
    return client


def seed(db_url, rows):
    with connect(db_url) as c:
        return {str(insert_raw(c, **row)): row for row in rows}


def test_page_filters_by_actor_action_and_date(ops_client, db_url):
    day = datetime(2026, 5, 20, 12, tzinfo=timezone.utc)
    rows = seed(db_url, [
        dict(at=day, action="job.replay", actor="alice@example.test", reason="r-alice-replay"),
        dict(at=day + timedelta(days=1), action="job.resolve", actor="bob@example.test", reason="r-bob-resolve"),
        dict(at=day + timedelta(days=2), action="alert.ack", actor="alice@example.test", reason="r-alice-ack"),
    ])
    by_reason = {row["reason"]: rid for rid, row in rows.items()}

    def shown(query):
        r = ops_client.get("/audit/?" + query)
        assert r.status_code == 200, r.data
        return {rid for rid in page_ids(r.get_data(as_text=True)) if rid in rows}

    assert shown("") == set(rows)
    assert shown("actor=alice") == {by_reason["r-alice-replay"], by_reason["r-alice-ack"]}
    assert shown("action=job.resolve") == {by_reason["r-bob-resolve"]}
    assert shown("action=job") == {by_reason["r-alice-replay"], by_reason["r-bob-resolve"]}
    # A plain "until" date includes that whole day.
    assert shown("since=2026-05-21&until=2026-05-21") == {by_reason["r-bob-resolve"]}
    assert shown("since=2026-05-21") == {by_reason["r-bob-resolve"], by_reason["r-alice-ack"]}
    assert shown("until=2026-05-20") == {by_reason["r-alice-replay"]}
    assert shown("actor=alice&since=2026-05-21") == {by_reason["r-alice-ack"]}
    # The htmx partial applies the same filters, without the page around it.
    partial = ops_client.get("/audit/_rows?actor=bob", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert set(page_ids(partial)) == {by_reason["r-bob-resolve"]}
    assert "<html" not in partial
    # The action menu offers the recorded actions.
    menu = ops_client.get("/audit/").get_data(as_text=True)
    assert '<option value="alert.ack"' in menu and '<option value="auth.login"' in menu


def test_page_rejects_bad_dates_and_cursors(ops_client):
    r = ops_client.get("/audit/?since=yesterday", headers={"Accept": "application/json"})
    assert r.status_code == 400 and r.json["error"] == "invalid_date"
    r = ops_client.get("/audit/?after=garbage", headers={"Accept": "application/json"})
    assert r.status_code == 400 and r.json["error"] == "invalid_cursor"
    r = ops_client.get("/audit/?after=2026-01-01T00:00:00_not-a-uuid")
    assert r.status_code == 400 and b"invalid_cursor" in r.data


def test_page_keyset_pagination_follows_the_cursor(ops_client, db_url):
    base = datetime(2026, 2, 1, tzinfo=timezone.utc)
    rows = []
    for i in range(130):
        # Runs of rows share one timestamp so page boundaries fall inside ties.
        rows.append(dict(at=base + timedelta(minutes=i // 4), action="seed.row", reason=f"row-{i}"))
    seeded = seed(db_url, rows)
    # Rows inserted in one transaction share now() exactly: the id breaks the tie.
    with connect(db_url) as c, c.transaction():
        for i in range(25):
            seeded[str(audit.record(c, audit.SYSTEM, "seed.row", reason=f"same-now-{i}")["id"])] = {}

    seen, url, pages = [], "/audit/?action=seed.row", 0
    while url:
        r = ops_client.get(url)
        assert r.status_code == 200, r.data
        text = r.get_data(as_text=True)
        ids = page_ids(text)
        assert len(ids) <= 50
        seen.extend(ids)
        pages += 1
        m = NEXT_RE.search(text)
        url = html.unescape(m.group(1)) if m else None
        if url:
            assert "action=seed.row" in url  # filters survive paging
        assert pages < 10, "pagination does not end"
    assert pages == 4  # 155 rows: 50 + 50 + 50 + 5
    assert len(seen) == len(set(seen)) == 155
    assert set(seen) == set(seeded)


def test_page_dates_are_utc_whatever_the_database_timezone(db_url):
    """The page says "When (UTC)": filters and times must not follow the server's TimeZone."""
    from opsboard.web.app import create_app
    from opsboard.db import Database
    from tests.conftest import csrf_from
    from tests.conftest import make_config

    with connect(db_url) as c:
        name = c.execute("SELECT current_database() AS d").fetchone()["d"]
        c.execute(f'ALTER DATABASE "{name}" SET timezone = \'Asia/Tehran\'')  # UTC+03:30
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "tz@example.test", "correct horse battery", "ops", "operator")
        late = insert_raw(c, at=datetime(2026, 5, 20, 22, 0, tzinfo=timezone.utc), reason="late-on-the-20th")
    database = Database(db_url, min_size=1, max_size=2).open()
    try:
        app = create_app({"OPSBOARD": make_config(database_url=db_url), "DATABASE": database, "TESTING": True})
        client = app.test_client()
        r = client.post("/login", data={"email": "tz@example.test", "password": "correct horse battery",
                                        "csrf_token": csrf_from(client)})
        assert r.status_code == 302
        with database.connection() as c:
            assert c.execute("SHOW timezone").fetchone()["TimeZone"] == "Asia/Tehran"
        on_20th = client.get("/audit/?since=2026-05-20&until=2026-05-20").get_data(as_text=True)
        assert str(late) in page_ids(on_20th)
        assert "2026-05-20 22:00:00" in on_20th
        assert str(late) not in page_ids(client.get("/audit/?since=2026-05-21").get_data(as_text=True))
    finally:
        database.close()
