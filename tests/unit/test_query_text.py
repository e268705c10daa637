"""What is sent for the named queries: compact enough for psycopg's conversion cache."""
import psycopg._queries

from opsboard import db


def test_the_worker_hot_statements_fit_psycopgs_conversion_cache():
    # Longer texts have their %(name)s placeholders converted again on every execution.
    limit = psycopg._queries.MAX_CACHED_STATEMENT_LENGTH
    for name in ("job_claim_many", "job_record_outcomes", "job_claim_lock_limits", "job_insert",
                 "job_insert_many", "job_heartbeat_many", "outbox_relay_plain"):
        assert len(db.queries[name].encode()) <= limit, name


def test_comments_and_indentation_are_left_out_but_strings_spanning_lines_are_kept(tmp_path):
    (tmp_path / "q.sql").write_text(
        "-- name: a\n-- what it does\nSELECT 1\n    -- a note\n    FROM t  -- why\n    WHERE x = 'it''s';\n\n"
        "-- name: b\nSELECT 'one\n  -- not a comment\ntwo';\n", encoding="utf-8")
    q = db.load_queries(tmp_path)
    assert q["a"] == "SELECT 1\nFROM t  -- why\nWHERE x='it''s'"
    assert q["b"] == "SELECT 'one\n  -- not a comment\ntwo'"


def test_spaces_after_commas_and_around_comparisons_go_outside_strings_only(tmp_path):
    (tmp_path / "q.sql").write_text(
        "-- name: a\nSELECT a, b FROM t WHERE x = 'p, q = r' AND y <> %(y)s AND z >= 1 AND w = -1 AND v = @u\n"
        "AND name = E'a, b' AND \"c, d\" = 1;\n", encoding="utf-8")
    q = db.load_queries(tmp_path)
    # A neighbour that would join the operator into another one (-, @) keeps its space; a line
    # with an escape string or a quoted identifier is kept as it is.
    assert q["a"] == ("SELECT a,b FROM t WHERE x='p, q = r' AND y<>%(y)s AND z>=1 AND w = -1 AND v = @u\n"
                      "AND name = E'a, b' AND \"c, d\" = 1")
