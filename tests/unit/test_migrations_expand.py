"""Expand/contract (docs/operations.md, "Upgrading without stopping"): a migration that the
previous release has not shipped may not take away or change what that release's code reads,
because its workers and web processes keep running on the new schema until they are rolled.

The check is textual and deliberately narrow: it finds the contracting statements of a
migration (DROP TABLE / VIEW / COLUMN, RENAME, ALTER COLUMN ... TYPE, SET NOT NULL, and a NOT
NULL column added without a default, which the old code's INSERTs would not fill) and asks git
whether the previous release's product code (``opsboard/``, ``worker/``) names the table or
column.  A contract belongs in a release after the one that stopped reading the name.
"""
from __future__ import annotations

import re

import pytest

from opsboard.migrate import discover
from tests.support import releases

_COMMENT = re.compile(r"--[^\n]*")
_DOLLAR = re.compile(r"\$([A-Za-z_]*)\$.*?\$\1\$", re.S)
_IDENT = r'"?([A-Za-z_][A-Za-z0-9_]*)"?'
_ALTER_TABLE = re.compile(rf"^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?(?:public\.)?{_IDENT}\s+(.*)$",
                          re.S | re.I)
_DROP_RELATION = re.compile(rf"^DROP\s+(TABLE|VIEW|MATERIALIZED\s+VIEW)\s+(?:IF\s+EXISTS\s+)?(.*?)"
                            rf"(?:\s+(?:CASCADE|RESTRICT))?$", re.S | re.I)
_CLAUSES = [
    ("drop column", re.compile(rf"^DROP\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?{_IDENT}", re.I)),
    ("rename column", re.compile(rf"^RENAME\s+(?:COLUMN\s+)?{_IDENT}\s+TO\s+", re.I)),
    ("change type of", re.compile(rf"^ALTER\s+(?:COLUMN\s+)?{_IDENT}\s+(?:SET\s+DATA\s+)?TYPE\s", re.I)),
    ("set not null on", re.compile(rf"^ALTER\s+(?:COLUMN\s+)?{_IDENT}\s+SET\s+NOT\s+NULL", re.I)),
]
_ADD_COLUMN = re.compile(rf"^ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?{_IDENT}\s+(.*)$", re.S | re.I)
_NOT_CONSTRAINT = re.compile(r"^(CONSTRAINT|PRIMARY|UNIQUE|CHECK|FOREIGN|EXCLUDE)\b", re.I)


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses and quotes."""
    parts, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    return [p for p in parts if p]


def contractions(sql: str) -> list[tuple[str, str]]:
    """The contracting changes of a migration's SQL: ``(what, name)``, where ``name`` is the table
    (``drop table``, ``rename table``) or the column the change takes away or changes."""
    sql = _DOLLAR.sub("''", _COMMENT.sub("", sql))  # function bodies and DO blocks hold no DDL we check
    found = []
    for stmt in _split_top(sql, ";"):
        stmt = " ".join(stmt.split())
        if m := _DROP_RELATION.match(stmt):
            found += [("drop table", name.split(".")[-1].strip('"').lower()) for name in _split_top(m.group(2), ",")]
            continue
        m = _ALTER_TABLE.match(stmt)
        if not m:
            continue
        table, rest = m.group(1).lower(), m.group(2)
        if re.match(r"^RENAME\s+TO\s", rest, re.I):
            found.append(("rename table", table))
            continue
        for clause in _split_top(rest, ","):
            for what, pattern in _CLAUSES:
                if (c := pattern.match(clause)) and not re.match(r"^DROP\s+CONSTRAINT\b", clause, re.I):
                    found.append((what, c.group(1).lower()))
            if (a := _ADD_COLUMN.match(clause)) and not _NOT_CONSTRAINT.match(a.group(1)):
                spec = a.group(2)
                if re.search(r"\bNOT\s+NULL\b", spec, re.I) and not re.search(r"\b(DEFAULT|GENERATED)\b", spec, re.I):
                    found.append(("add a NOT NULL column without a default to", table))
    return found


def violations(commit: str, migrations) -> list[str]:
    """Each contraction in ``migrations`` whose name the product code of ``commit`` mentions."""
    out = []
    for version, name, sql in migrations:
        for what, target in contractions(sql):
            readers = releases.code_reading(commit, target)
            if readers:
                out.append(f"{version:04d}_{name}: {what} {target!r}, which the previous release ({commit[:8]}) "
                           f"still reads in {', '.join(readers[:3])}: expand now, contract in a later release")
    return out


def test_finds_the_contracting_statements():
    assert contractions("""
        -- ALTER TABLE jobs DROP COLUMN in_a_comment;
        ALTER TABLE jobs DROP COLUMN priority, ADD COLUMN note text, ALTER COLUMN queue TYPE varchar(20);
        ALTER TABLE IF EXISTS "deliveries" RENAME COLUMN provider_ref TO ref;
        ALTER TABLE tenants RENAME TO customers;
        ALTER TABLE tenants ALTER max_running SET NOT NULL;
        ALTER TABLE tenants ADD COLUMN region text NOT NULL, ADD COLUMN tier text NOT NULL DEFAULT 'free';
        ALTER TABLE deliveries DROP CONSTRAINT deliveries_status_check, ADD CONSTRAINT c CHECK (a IS NOT NULL);
        DROP TABLE IF EXISTS demo_effects, public.demo_users CASCADE;
        DROP INDEX jobs_dead_key_idx;
        DO $$ BEGIN EXECUTE 'ALTER TABLE jobs DROP COLUMN hidden'; END $$;
        CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN DROP TABLE x; END $fn$;
    """) == [("drop column", "priority"), ("change type of", "queue"), ("rename column", "provider_ref"),
             ("rename table", "tenants"), ("set not null on", "max_running"),
             ("add a NOT NULL column without a default to", "tenants"),
             ("drop table", "demo_effects"), ("drop table", "demo_users")]


def test_every_landed_migration_parses():
    """The landed contractions are the known ones (0023, 0026, 0086), found by the same parser; a
    new one is added here on purpose, in the release after the last reader of its name."""
    found = {m.version: contractions(m.sql) for m in discover()}
    assert {v: c for v, c in found.items() if c} == {
        23: [("drop table", "ticket_user_tokens")],
        26: [("drop table", "demo_effects"), ("drop table", "demo_otp_requests"), ("drop table", "demo_orders"),
             ("drop table", "demo_users")],
        # 0086 renames job_count_deltas away only to create it again under the same name, partitioned, with
        # the same columns the previous release's fold reads (and drops the renamed copy once emptied into it).
        86: [("rename table", "job_count_deltas"), ("drop table", "job_count_deltas_0044")]}


def test_new_migrations_do_not_contract_what_the_previous_release_reads():
    commit = releases.previous_release()
    shipped = releases.migration_versions(commit)
    new = [(m.version, m.name, m.sql) for m in discover() if m.version not in shipped]
    assert violations(commit, new) == []


def test_the_check_refuses_a_contract_of_a_column_the_previous_release_reads():
    """The rule above, shown failing: dropping ``jobs.priority`` or renaming ``deliveries`` now
    would break the previous release's workers; adding a nullable column would not."""
    commit = releases.previous_release()
    bad = violations(commit, [(99, "bad", "ALTER TABLE jobs DROP COLUMN priority;"),
                              (98, "worse", "ALTER TABLE deliveries RENAME TO sends;")])
    assert len(bad) == 2 and "'priority'" in bad[0] and "'deliveries'" in bad[1]
    assert violations(commit, [(97, "fine", "ALTER TABLE jobs ADD COLUMN note text;")]) == []


@pytest.mark.parametrize("sql", ["DROP TABLE legacy_exports;", "ALTER TABLE tickets DROP COLUMN legacy_ref;"])
def test_names_the_previous_release_never_reads_may_go(sql):
    """Names absent from the previous release's code may go (a mention in a comment counts as a
    read: the check errs towards keeping things)."""
    assert violations(releases.previous_release(), [(96, "contract", sql)]) == []
