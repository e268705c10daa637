"""An inbox row's and a delivery's tenant and recipient exist, as the foreign keys
notifications/deliveries.tenant_id -> tenants(id) and .recipient_id -> users(id) once
guaranteed; since migration 0047 they are checked once per inserting statement
(notifications_check_references, deliveries_check_references) and by guards on tenants,
users, notifications and deliveries, with the keys' SQLSTATE (23503) and constraint names.
"""
import threading
import uuid

import psycopg
import pytest

from tests.conftest import connect, wait_for

NOTIFICATION = ("INSERT INTO notifications (id, tenant_id, recipient_id, event_id, event_type, category, template_key, "
                "locale, title, body) VALUES (%s, %s, %s, %s, 'x.happened', 'system', 'x', 'fa', 't', 'b')")
DELIVERY = ("INSERT INTO deliveries (id, tenant_id, recipient_id, event_id, event_type, notification_id, channel, status) "
            "VALUES (%s, %s, %s, %s, 'x.happened', %s, 'inbox', 'delivered')")


def _user(c) -> uuid.UUID:
    uid = uuid.uuid4()
    c.execute("INSERT INTO users (id, email, password_hash) VALUES (%s, %s, 'x')", (uid, f"{uid.hex[:12]}@ref.test"))
    return uid


def _tenant(c) -> uuid.UUID:
    from opsboard import auth
    return auth.ensure_tenant(c, f"t-{uuid.uuid4().hex[:8]}")["id"]


def _inbox_row(c, tenant, user) -> uuid.UUID:
    """One inbox row with its delivery (one statement each, like the fan-out's)."""
    nid, event = uuid.uuid4(), uuid.uuid4()
    c.execute(NOTIFICATION, (nid, tenant, user, event))
    c.execute(DELIVERY, (uuid.uuid4(), tenant, user, event, nid))
    return nid


def _violates(excinfo, constraint):
    assert excinfo.value.sqlstate == "23503"
    assert excinfo.value.diag.constraint_name == constraint


@pytest.mark.parametrize("table", ["notifications", "deliveries"])
@pytest.mark.parametrize("column", ["tenant_id", "recipient_id"])
def test_an_unknown_tenant_or_recipient_is_refused_as_a_foreign_key_violation(conn, tenant, table, column):
    user = _user(conn)
    ghost = uuid.uuid4()
    t, u = (ghost, user) if column == "tenant_id" else (tenant["id"], ghost)
    nid = _inbox_row(conn, tenant["id"], user)  # a good row for the delivery to name
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
        if table == "notifications":
            # several rows in one statement, one of them bad
            conn.execute("INSERT INTO notifications (id, tenant_id, recipient_id, event_id, event_type, category, "
                         "template_key, locale, title, body) "
                         "SELECT gen_random_uuid(), x.t, x.u, gen_random_uuid(), 'x', 'system', 'x', 'fa', 't', 'b' "
                         "FROM (VALUES (%s::uuid, %s::uuid), (%s::uuid, %s::uuid)) AS x(t, u)",
                         (tenant["id"], user, t, u))
        else:
            conn.execute(DELIVERY, (uuid.uuid4(), t, u, uuid.uuid4(), nid))
    _violates(excinfo, f"{table}_{column}_fkey")
    assert str(ghost) in (excinfo.value.diag.message_detail or "")


def test_a_tenant_or_user_with_inbox_rows_cannot_be_deleted_nor_change_its_id(conn, tenant, make_tenant):
    user = _user(conn)
    _inbox_row(conn, tenant["id"], user)
    for sql, args, constraint in (
            ("DELETE FROM users WHERE id = %s", (user,), "notifications_recipient_id_fkey"),
            ("UPDATE users SET id = %s WHERE id = %s", (uuid.uuid4(), user), "notifications_recipient_id_fkey")):
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
            conn.execute(sql, args)
        _violates(excinfo, constraint)
    # A tenant referenced by nothing else than an inbox row (its member is another tenant's).
    other = make_tenant(conn)["id"]
    _inbox_row(conn, other, user)
    for sql, args in (("DELETE FROM tenants WHERE id = %s", (other,)),
                      ("UPDATE tenants SET id = %s WHERE id = %s", (uuid.uuid4(), other))):
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
            conn.execute(sql, args)
        _violates(excinfo, "notifications_tenant_id_fkey")
    # A delivery alone (no inbox row): refused by the deliveries' key.
    third = make_tenant(conn)["id"]
    conn.execute(DELIVERY, (uuid.uuid4(), third, user, uuid.uuid4(), None))
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
        conn.execute("DELETE FROM tenants WHERE id = %s", (third,))
    _violates(excinfo, "deliveries_tenant_id_fkey")
    # Other changes, and a user without inbox rows, are untouched.
    conn.execute("UPDATE users SET email = 'renamed@ref.test' WHERE id = %s", (user,))
    lonely = _user(conn)
    conn.execute("UPDATE users SET id = %s WHERE id = %s", (uuid.uuid4(), lonely))


@pytest.mark.parametrize("table", ["notifications", "deliveries"])
def test_a_rows_tenant_and_recipient_never_change(conn, tenant, make_tenant, table):
    user, other_user, other = _user(conn), _user(conn), make_tenant(conn)["id"]
    _inbox_row(conn, tenant["id"], user)
    for column, target in (("tenant_id", other), ("recipient_id", other_user), ("tenant_id", uuid.uuid4())):
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
            conn.execute(f"UPDATE {table} SET {column} = %s WHERE recipient_id = %s", (target, user))
        _violates(excinfo, f"{table}_{column}_fkey")
    # Updates that leave them as they are go through (reading, archiving, a delivery's status).
    conn.execute(f"UPDATE {table} SET tenant_id = tenant_id, recipient_id = recipient_id WHERE recipient_id = %s",
                 (user,))


def test_truncating_tenants_with_inbox_rows_is_refused_unless_they_go_too(db_url):
    with connect(db_url) as c:
        t = _tenant(c)
        _inbox_row(c, t, _user(c))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            c.execute("TRUNCATE tenants CASCADE")
        assert c.execute("SELECT count(*) AS n FROM tenants WHERE id = %s", (t,)).fetchone()["n"] == 1
        c.execute("TRUNCATE notifications, deliveries, tenants CASCADE")
        assert c.execute("SELECT count(*) AS n FROM notifications").fetchone()["n"] == 0


def test_users_are_deleted_only_under_read_committed(db_url):
    with connect(db_url) as c:
        u = _user(c)
        c.autocommit = False
        c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            c.execute("DELETE FROM users WHERE id = %s", (u,))
        c.rollback()


def _blocked(c, pid) -> bool:
    return c.execute("SELECT wait_event_type = 'Lock' AS w FROM pg_stat_activity WHERE pid = %s",
                     (pid,)).fetchone()["w"]


def _started(fn):
    errors: list[BaseException] = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_a_delete_racing_an_insert_waits_for_it_then_sees_its_rows(db_url):
    with connect(db_url) as producer, connect(db_url) as admin, connect(db_url) as watcher:
        t, u = _tenant(producer), _user(producer)
        with producer.transaction():
            _inbox_row(producer, t, u)
            deleter, errors = _started(lambda: admin.execute("DELETE FROM users WHERE id = %s", (u,)))
            wait_for(lambda: _blocked(watcher, admin.info.backend_pid), message="the delete to wait on the user")
        deleter.join(30)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.ForeignKeyViolation)
        assert producer.execute("SELECT count(*) AS n FROM notifications").fetchone()["n"] == 1


def test_an_insert_racing_a_delete_waits_for_it_then_is_refused(db_url):
    with connect(db_url) as producer, connect(db_url) as admin, connect(db_url) as watcher:
        t, u = _tenant(producer), _user(producer)
        with admin.transaction():
            admin.execute("DELETE FROM users WHERE id = %s", (u,))
            inserter, errors = _started(lambda: _inbox_row(producer, t, u))
            wait_for(lambda: _blocked(watcher, producer.info.backend_pid), message="the insert to wait on the user")
        inserter.join(30)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.ForeignKeyViolation)
        assert admin.execute("SELECT count(*) AS n FROM notifications").fetchone()["n"] == 0


def test_an_insert_under_repeatable_read_racing_a_delete_waits_for_it_then_is_refused(db_url):
    """Under REPEATABLE READ the check cannot see a delete committed while it waited (its snapshot is the
    transaction's), so it locks the recipients' rows as before migration 0057."""
    with connect(db_url) as producer, connect(db_url) as admin, connect(db_url) as watcher:
        t, u = _tenant(producer), _user(producer)

        def insert():
            with producer.transaction():
                producer.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                producer.execute("SELECT 1")  # the snapshot: taken before the delete commits
                _inbox_row(producer, t, u)

        with admin.transaction():
            admin.execute("DELETE FROM users WHERE id = %s", (u,))
            inserter, errors = _started(insert)
            wait_for(lambda: _blocked(watcher, producer.info.backend_pid), message="the insert to wait on the user")
        inserter.join(30)
        assert len(errors) == 1
        assert isinstance(errors[0], (psycopg.errors.SerializationFailure, psycopg.errors.ForeignKeyViolation))
        assert admin.execute("SELECT count(*) AS n FROM notifications").fetchone()["n"] == 0


def test_an_insert_leaves_its_recipients_rows_unlocked(db_url):
    """Migration 0057: the recipient check takes no row lock (a broadcast's lock per recipient was a WAL
    record and a dirtied users page each); what a delete must wait for is the advisory lock."""
    with connect(db_url) as producer, connect(db_url) as other:
        t, u = _tenant(producer), _user(producer)
        with producer.transaction():
            _inbox_row(producer, t, u)
            with other.transaction():
                assert other.execute("SELECT id FROM users WHERE id = %s FOR UPDATE NOWAIT", (u,)).fetchone()
