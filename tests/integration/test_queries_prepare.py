"""Every named query parses, names existing tables and columns, and type-checks
against the migrated schema: PostgreSQL plans it with ``PREPARE``.

The ``%(name)s`` placeholders (and psycopg's binary ``%(name)b``) become ``$1..$n`` with untyped parameters, which
is what psycopg sends for ``None`` (and for ``str``), so a query that cannot
infer a parameter's type here would also fail at run time.
"""
from __future__ import annotations

import re

import psycopg
import pytest

from opsboard import db
from opsboard.tools import demo_domain

_TOKEN = re.compile(r"%%|%\((\w+)\)[sbt]")


def to_positional(sql: str) -> tuple[str, list[str]]:
    """``%(a)s ... %(b)s ... %(a)s`` -> ``$1 ... $2 ... $1`` and ``%%`` -> ``%``."""
    names: list[str] = []

    def replace(m: re.Match) -> str:
        if m.group(0) == "%%":
            return "%"
        name = m.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _TOKEN.sub(replace, sql), names


def test_conversion():
    sql, names = to_positional("SELECT %(a)s, '%%x', %(b)s, %(a)s::int, %(c)b::int[]")
    assert sql == "SELECT $1, '%x', $2, $1::int, $3::int[]"
    assert names == ["a", "b", "c"]


#: What psycopg may send for a parameter whose Python value carries a type
#: (int -> int2/int4/int8, float -> float8, ...), tried in this order for a
#: parameter PostgreSQL cannot type from an untyped NULL alone.
CANDIDATE_TYPES = ("int2", "int4", "int8", "float8", "numeric", "text", "bool", "timestamptz", "uuid", "jsonb",
                   "interval")
_PARAM_TYPE_ERROR = re.compile(r"(?:inconsistent types deduced|could not determine data type) for parameter \$(\d+)")


def prepare(conn, name: str, sql: str, types: list[str]) -> str | None:
    """PREPARE then DEALLOCATE; the error text, or ``None`` when it planned."""
    statement = f"opsboard_check_{name}"
    try:
        with conn.transaction():  # a savepoint: a failure leaves the outer transaction usable
            conn.execute(f"PREPARE {statement} ({', '.join(types)}) AS {sql}" if types
                         else f"PREPARE {statement} AS {sql}")
            conn.execute(f"DEALLOCATE {statement}")
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


def check_query(conn, name: str, named_sql: str) -> str | None:
    """``None`` when the query plans, else PostgreSQL's error."""
    sql, names = to_positional(named_sql)
    types = ["unknown"] * len(names)
    error = prepare(conn, name, sql, types)
    # A parameter used in two differently typed places (``least(%(n)s, ...)``
    # and ``%(n)s::float8``) cannot be typed from an untyped NULL, but is fine
    # with the typed value psycopg sends: give it the first type that plans.
    for _ in range(len(names)):
        m = error and _PARAM_TYPE_ERROR.search(error)
        if not m:
            break
        index = int(m.group(1)) - 1
        for candidate in CANDIDATE_TYPES:
            types[index] = candidate
            error = prepare(conn, name, sql, types)
            m2 = error and _PARAM_TYPE_ERROR.search(error)
            if not error or not (m2 and int(m2.group(1)) - 1 == index):
                break
    return error


@pytest.mark.parametrize("name", sorted(db.queries))
def test_named_query_prepares(conn, name):
    error = check_query(conn, name, db.queries[name])
    if error:
        pytest.fail(f"query {name!r} does not prepare against the migrated schema: {error}")


@pytest.mark.parametrize("name", sorted(demo_domain.DEMO_QUERIES))
def test_demo_query_prepares(conn, name):
    """The demo plug-in's queries, against the product schema plus the demo's (the test template has both)."""
    error = check_query(conn, name, demo_domain.DEMO_QUERIES[name])
    if error:
        pytest.fail(f"demo query {name!r} does not prepare against the demo schema: {error}")


def test_the_check_catches_broken_queries(conn):
    assert "no_such_column" in check_query(conn, "c1", "SELECT no_such_column FROM jobs WHERE id = %(id)s")
    assert "no_such_table" in check_query(conn, "c2", "SELECT 1 FROM no_such_table")
    assert "syntax error" in check_query(conn, "c3", "SELEC 1")
    assert "operator does not exist" in check_query(conn, "c4", "SELECT 1 FROM jobs WHERE id = %(id)s::int")
    # Wrong whatever type the parameter gets.
    assert "boolean" in check_query(conn, "c5", "SELECT 1 FROM jobs WHERE %(n)s::int AND %(n)s::uuid IS NULL")


def test_the_check_types_a_parameter_the_way_psycopg_would(conn):
    sql = "SELECT least(%(n)s, ceil(%(n)s::float8)::int)"
    assert "parameter $1" in prepare(conn, "c6", to_positional(sql)[0], ["unknown"])
    assert check_query(conn, "c6", sql) is None
    assert check_query(conn, "c7", "SELECT * FROM audit_log WHERE at > %(since)s AND action = %(a)s") is None
