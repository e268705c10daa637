"""The named-query loader and the small pure helpers of opsboard.db."""
from __future__ import annotations

import re

import psycopg
import pytest

from opsboard import db


def write(directory, name, text):
    (directory / name).write_text(text, encoding="utf-8")


def test_blocks_are_split_by_name_and_descriptions_dropped(tmp_path):
    write(tmp_path, "things.sql", """-- A file header that belongs to no query.

-- name: thing_get
-- One thing by id.
-- (two description lines)
SELECT * FROM things WHERE id = %(id)s;

-- name: thing_list
SELECT id FROM things
-- a comment inside the body stays
WHERE name LIKE 'a%%'
ORDER BY id;
""")
    queries = db.load_queries(tmp_path)
    assert list(queries) == ["thing_get", "thing_list"]
    assert queries["thing_get"] == "SELECT * FROM things WHERE id=%(id)s"  # spaces around = are not sent
    # Whole-line comments inside the body are not sent (see test_query_text.py).
    assert queries["thing_list"] == "SELECT id FROM things\nWHERE name LIKE 'a%%'\nORDER BY id"
    assert "A file header" not in queries["thing_get"]


def test_files_are_merged(tmp_path):
    write(tmp_path, "a.sql", "-- name: a_one\nSELECT 1;\n")
    write(tmp_path, "b.sql", "-- name: b_one\nSELECT 2;\n")
    write(tmp_path, "notes.txt", "-- name: ignored\nSELECT 3;\n")
    assert db.load_queries(tmp_path) == {"a_one": "SELECT 1", "b_one": "SELECT 2"}


def test_duplicate_name_is_an_error(tmp_path):
    write(tmp_path, "a.sql", "-- name: same\nSELECT 1;\n")
    write(tmp_path, "b.sql", "-- name: same\nSELECT 2;\n")
    with pytest.raises(ValueError, match=r"query 'same' is defined twice \(b.sql\)"):
        db.load_queries(tmp_path)


def test_empty_block_is_an_error(tmp_path):
    write(tmp_path, "a.sql", "-- name: nothing\n-- just a description\n\n-- name: other\nSELECT 1;\n")
    with pytest.raises(ValueError, match="query 'nothing' in a.sql is empty"):
        db.load_queries(tmp_path)


def test_shipped_queries_are_loaded_and_well_formed():
    queries = db.load_queries()
    assert queries == db.queries
    for name in ("audit_insert", "audit_list", "user_get_by_email", "login_failure_counts", "job_claim_many"):
        assert name in queries
    for name, sql in queries.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name)
        assert not sql.rstrip().endswith(";"), name
        assert not sql.lstrip().startswith("--"), name
        # A lone % would break psycopg's parameter parsing: literals are written %%.
        assert not re.search(r"%(?!%|\(\w+\)[sbt])", re.sub(r"%%", "", sql)), name


@pytest.mark.parametrize("url, expected", [
    ("postgresql://bob:hunter2@db.example:6543/app", "db.example:6543/app"),
    ("postgresql://bob@localhost/app", "localhost:5432/app"),
    ("host=/var/run/postgresql dbname=app user=bob password=hunter2", "socket /var/run/postgresql/app"),
    ("postgresql://u:p@[::1:broken", "an unparsable DATABASE_URL"),
])
def test_describe_target_never_shows_credentials(url, expected):
    text = db.describe_target(url)
    assert text == expected
    assert "hunter2" not in text and "bob" not in text


def test_connect_failure_reason_keeps_the_cause():
    refused = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?")
    assert db.connect_failure_reason(refused) == "Connection refused"
    missing = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
        'FATAL:  database "nope" does not exist')
    assert db.connect_failure_reason(missing) == 'database "nope" does not exist'
    assert db.connect_failure_reason(psycopg.OperationalError("")) == "OperationalError"


def test_connect_with_unparsable_url_does_not_echo_it():
    with pytest.raises(db.DatabaseUnavailable) as info:
        db.connect("postgresql://user:hunter2@[::1:broken/db")
    assert "hunter2" not in str(info.value)
    assert "not a valid PostgreSQL connection string" in str(info.value)
