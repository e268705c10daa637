"""Migrations: applied in version order, once, atomically, under an advisory lock."""
from __future__ import annotations

import threading

import psycopg
import pytest

from opsboard import migrate as m
from opsboard.config import resource_dir
from tests.conftest import connect, wait_for

MIGRATIONS_DIR = resource_dir("migrations")


def write(directory, name, sql):
    path = directory / name
    path.write_text(sql, encoding="utf-8")
    return path


@pytest.fixture
def empty_url(databases):
    url = databases.empty()
    yield url
    databases.drop(url)


@pytest.fixture
def mdir(tmp_path):
    d = tmp_path / "migrations"
    d.mkdir()
    return d


def applied(url) -> list[tuple[int, str]]:
    with connect(url) as c:
        return [(r["version"], r["name"]) for r in
                c.execute("SELECT version, name FROM schema_migrations ORDER BY applied_at, version")]


def table_exists(url, name) -> bool:
    with connect(url) as c:
        return c.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (name,)).fetchone()["e"]


def quiet(*_):
    pass


def test_applied_in_version_order(empty_url, mdir):
    # Written out of order on purpose, and each file needs the one before it.
    write(mdir, "0010_gamma.sql", "ALTER TABLE beta ADD COLUMN note text; INSERT INTO log VALUES (10);")
    write(mdir, "0002_beta.sql", "CREATE TABLE beta (alpha_id int REFERENCES alpha (id)); INSERT INTO log VALUES (2);")
    write(mdir, "0001_alpha.sql", "CREATE TABLE alpha (id int PRIMARY KEY);\nCREATE TABLE log (v int, at timestamptz DEFAULT clock_timestamp());\nINSERT INTO log VALUES (1);")
    write(mdir, "README.md", "not a migration")
    lines = []
    done = m.migrate(empty_url, mdir, log=lines.append)
    assert [x.version for x in done] == [1, 2, 10]
    assert lines == ["applied 0001_alpha.sql", "applied 0002_beta.sql", "applied 0010_gamma.sql"]
    assert applied(empty_url) == [(1, "alpha"), (2, "beta"), (10, "gamma")]
    with connect(empty_url) as c:
        assert [r["v"] for r in c.execute("SELECT v FROM log ORDER BY at")] == [1, 2, 10]
        row = c.execute("SELECT checksum FROM schema_migrations WHERE version = 2").fetchone()
    assert row["checksum"] == m.discover(mdir)[1].checksum


def test_rerun_is_a_no_op_and_new_files_are_picked_up(empty_url, mdir):
    write(mdir, "0001_alpha.sql", "CREATE TABLE alpha (id int)")
    assert len(m.migrate(empty_url, mdir, log=quiet)) == 1
    with connect(empty_url) as c:
        first_at = c.execute("SELECT applied_at FROM schema_migrations").fetchone()["applied_at"]
    lines = []
    assert m.migrate(empty_url, mdir, log=lines.append) == []
    assert lines == []
    with connect(empty_url) as c:
        assert c.execute("SELECT applied_at FROM schema_migrations").fetchone()["applied_at"] == first_at
        st = m.status(c, mdir)
    assert st.current and st.applied == [1]

    write(mdir, "0002_beta.sql", "CREATE TABLE beta (id int)")
    assert [x.name for x in m.migrate(empty_url, mdir, log=quiet)] == ["beta"]
    assert applied(empty_url) == [(1, "alpha"), (2, "beta")]


def test_changed_applied_file_is_refused(empty_url, mdir):
    path = write(mdir, "0001_alpha.sql", "CREATE TABLE alpha (id int);")
    m.migrate(empty_url, mdir, log=quiet)
    path.write_text("CREATE TABLE alpha (id bigint);", encoding="utf-8")
    write(mdir, "0002_beta.sql", "CREATE TABLE beta (id int)")
    with pytest.raises(m.MigrationError) as info:
        m.migrate(empty_url, mdir, log=quiet)
    assert "0001_alpha.sql" in str(info.value)
    assert "append-only" in str(info.value)
    # Nothing after the changed file runs either.
    assert not table_exists(empty_url, "beta")
    with connect(empty_url) as c:
        st = m.status(c, mdir)
    assert [x.path.name for x in st.changed] == ["0001_alpha.sql"]
    assert [x.path.name for x in st.pending] == ["0002_beta.sql"]
    assert not st.current


def test_failing_migration_leaves_nothing_behind(empty_url, mdir):
    write(mdir, "0001_alpha.sql", "CREATE TABLE alpha (id int);")
    write(mdir, "0002_broken.sql", "CREATE TABLE half (id int);\nINSERT INTO alpha VALUES (1);\nSELECT 1/0;")
    write(mdir, "0003_after.sql", "CREATE TABLE after_broken (id int);")
    with pytest.raises(m.MigrationError) as info:
        m.migrate(empty_url, mdir, log=quiet)
    assert str(info.value).startswith("0002_broken.sql failed: division by zero")
    assert applied(empty_url) == [(1, "alpha")]
    assert not table_exists(empty_url, "half")
    assert not table_exists(empty_url, "after_broken")
    with connect(empty_url) as c:
        assert c.execute("SELECT count(*) AS n FROM alpha").fetchone()["n"] == 0
        # The advisory lock was released: another session can take it at once.
        assert c.execute("SELECT pg_try_advisory_lock(%s) AS ok", (m.MIGRATE_LOCK_KEY,)).fetchone()["ok"]
        c.execute("SELECT pg_advisory_unlock(%s)", (m.MIGRATE_LOCK_KEY,))

    # Fixing the file (it never landed) lets the run continue where it stopped.
    write(mdir, "0002_broken.sql", "CREATE TABLE half (id int);")
    assert [x.version for x in m.migrate(empty_url, mdir, log=quiet)] == [2, 3]


def test_no_migration_files_is_an_error_and_touches_nothing(empty_url, mdir):
    """An install that lost its migrations must never say "up to date"."""
    write(mdir, "README.md", "not a migration")
    with pytest.raises(m.MigrationError, match="no migration files in"):
        m.migrate(empty_url, mdir, log=quiet)
    assert not table_exists(empty_url, "schema_migrations")


@pytest.mark.parametrize("bad", ["1_short.sql", "0001-dash.sql", "0001_Upper.sql", "00001_five.sql",
                                 "0001_.sql", "abcd_name.sql", "0001_name.sql.sql"])
def test_bad_file_names_are_rejected(empty_url, mdir, bad):
    write(mdir, "0001_good.sql", "CREATE TABLE good (id int)")
    write(mdir, bad, "CREATE TABLE bad (id int)")
    with pytest.raises(m.MigrationError, match=f"^{bad}: migration files are named NNNN_name.sql"):
        m.migrate(empty_url, mdir, log=quiet)
    assert not table_exists(empty_url, "good")


def test_duplicate_version_is_rejected(mdir):
    write(mdir, "0001_one.sql", "SELECT 1")
    write(mdir, "0001_other.sql", "SELECT 1")
    with pytest.raises(m.MigrationError, match="version 1 is used twice"):
        m.discover(mdir)


def test_status_of_a_fresh_database_lists_everything_pending(empty_url):
    with connect(empty_url) as c:
        st = m.status(c)
        # status() only reads: it does not create schema_migrations.
        assert c.execute("SELECT to_regclass('schema_migrations') AS t").fetchone()["t"] is None
    assert [x.path.name for x in st.pending] == [p.name for p in sorted(MIGRATIONS_DIR.glob("*.sql"))]
    assert st.applied == [] and not st.current


def test_status_reports_versions_unknown_to_this_code(empty_url, mdir):
    write(mdir, "0001_alpha.sql", "SELECT 1")
    m.migrate(empty_url, mdir, log=quiet)
    with connect(empty_url) as c:
        c.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (99, 'future', 'x')")
        st = m.status(c, mdir)
    assert st.unknown == [99]
    assert st.current  # a newer database does not make this code unready


def lock_waiters(c) -> int:
    """Sessions of this database waiting for the migration lock (pg_locks is cluster-wide)."""
    return c.execute(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND ((classid::bigint << 32) | objid::bigint) = %s",
        (m.MIGRATE_LOCK_KEY,)).fetchone()["n"]


def test_concurrent_runs_apply_each_file_once(empty_url):
    """Two migrate calls held at the advisory lock, released together: both succeed,
    the real migrations are applied exactly once."""
    results, errors = {}, []

    def run(tag):
        try:
            results[tag] = m.migrate(empty_url, log=quiet)
        except Exception as exc:  # reported below
            errors.append(exc)

    with connect(empty_url) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (m.MIGRATE_LOCK_KEY,))
        threads = [threading.Thread(target=run, args=(t,)) for t in ("a", "b")]
        for t in threads:
            t.start()
        wait_for(lambda: lock_waiters(holder) == 2, timeout=20, message="both runs to wait on the lock")
        holder.execute("SELECT pg_advisory_unlock(%s)", (m.MIGRATE_LOCK_KEY,))
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert sorted(len(r) for r in results.values()) == [0, len(list(MIGRATIONS_DIR.glob("*.sql")))]
    with connect(empty_url) as c:
        rows = c.execute("SELECT version, count(*) AS n FROM schema_migrations GROUP BY version").fetchall()
        assert rows and all(r["n"] == 1 for r in rows)
        assert m.status(c).current


# ---------------------------------------------------------------- readiness (/readyz)

def make_app(url):
    from opsboard.web.app import create_app
    from opsboard.db import Database
    from tests.conftest import make_config
    database = Database(url, min_size=0, max_size=2).open(check=False)
    return create_app({"OPSBOARD": make_config(database_url=url), "DATABASE": database, "TESTING": True}), database


@pytest.fixture
def probe():
    opened = []

    def client_for(url):
        app, database = make_app(url)
        opened.append(database)
        return app.test_client()

    yield client_for
    for database in opened:
        database.close()


def test_healthz_needs_no_database(probe):
    r = probe("postgresql://postgres@127.0.0.1:1/x").get("/healthz")
    assert r.status_code == 200
    assert r.json == {"status": "ok"}


def test_readyz_when_current(db_url, probe):
    r = probe(db_url).get("/readyz")
    assert r.status_code == 200
    versions = sorted(int(p.name[:4]) for p in MIGRATIONS_DIR.glob("*.sql"))
    assert r.json == {"status": "ready", "schema_version": versions[-1]}


def test_readyz_when_a_migration_is_behind(db_url, probe):
    with connect(db_url) as c:
        last = c.execute("DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations) "
                         "RETURNING version, name").fetchone()
    r = probe(db_url).get("/readyz")
    assert r.status_code == 503
    assert r.json["error"] == "migrations_pending"
    assert r.json["pending"] == [f"{last['version']:04d}_{last['name']}.sql"]


def test_readyz_when_an_applied_migration_changed(db_url, probe):
    with connect(db_url) as c:
        c.execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1")
    r = probe(db_url).get("/readyz")
    assert r.status_code == 503
    assert r.json["error"] == "migrations_pending"
    assert r.json["changed"] == [sorted(p.name for p in MIGRATIONS_DIR.glob("*.sql"))[0]]


def test_readyz_on_an_empty_database(empty_url, probe):
    r = probe(empty_url).get("/readyz")
    assert r.status_code == 503
    assert r.json["error"] == "migrations_pending"
    assert len(r.json["pending"]) == len(list(MIGRATIONS_DIR.glob("*.sql")))


def test_readyz_when_the_database_is_unreachable(probe):
    r = probe("postgresql://postgres@127.0.0.1:1/x").get("/readyz")
    assert r.status_code == 503
    assert r.json["status"] == "unavailable"
    assert r.json["error"] == "database_unreachable"


def test_readyz_when_the_migration_files_are_invalid(db_url, probe, monkeypatch):
    def broken(directory=MIGRATIONS_DIR):
        raise m.MigrationError("0003-oops.sql: migration files are named NNNN_name.sql")

    monkeypatch.setattr(m, "discover", broken)
    r = probe(db_url).get("/readyz")
    assert r.status_code == 503
    assert r.json["error"] == "migrations_invalid"  # not blamed on the database
    assert "0003-oops.sql" in r.json["detail"]


def test_a_database_that_applied_the_mistaken_0012_edit_upgrades_to_the_same_schema(db_url):
    """0012 shipped for a while without ticket_user_tokens; both histories end alike."""
    with connect(db_url) as c:
        assert m.status(c).current  # fresh history: the file as it first landed, then 0023
        assert c.execute("SELECT to_regclass('ticket_user_tokens') AS t").fetchone()["t"] is None
        # The other history: 0012 applied from the edited file (its checksum) is not "changed"...
        c.execute("UPDATE schema_migrations SET checksum = %s WHERE version = 12",
                  (next(iter(m.SUPERSEDED_CHECKSUMS[12])),))
        assert m.status(c).current
        # ...while any other checksum still is.
        c.execute("UPDATE schema_migrations SET checksum = 'x' WHERE version = 12")
        assert [x.version for x in m.status(c).changed] == [12]
