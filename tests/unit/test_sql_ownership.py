"""Every named query lives in the file of the feature that owns its table, and
every one is used (issue 22).

The rule: a query's name is ``noun_verb`` (CONVENTIONS 2) and its noun says
which table or area it works on; :data:`OWNERS` maps each noun prefix to the
one ``opsboard/sql/*.sql`` file where queries with that prefix live.  The
longest matching prefix wins, so that a narrower noun can belong elsewhere
(``user_`` is auth.sql, ``user_token_`` is the inbox's user_tokens table in
notifications.sql).  A new query whose noun has no owner here fails until its
owner is written down.

Pure: the test reads the SQL files and the Python sources, no database.
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from opsboard import db

ROOT = Path(__file__).resolve().parents[2]
SQL_DIR = db.SQL_DIR
#: Python that may run a query: the core (with its tools) and the worker.
CODE_DIRS = [ROOT / "opsboard", ROOT / "worker"]

#: noun prefix -> the file that owns it (its table or area).
OWNERS: dict[str, str] = {
    "admission_": "limits.sql",                   # tenants' enqueue limits x queue_depth, in one statement
    "alert_": "alerts.sql",                       # alerts
    "api_idempotency_": "api.sql",                # api_idempotency (the HTTP API's Idempotency-Key)
    "api_key_": "apikeys.sql",                    # api_keys
    "audit_": "audit.sql",                        # audit_log
    "bulk_": "bulk.sql",                          # jobs: bulk actions bound to their preview, ticked jobs (issue 44)
    "breaker_": "deliveries.sql",                 # circuit breakers of provider endpoints
    "clock_": "clock.sql",                        # the database's clock
    "dashboard_": "dashboard.sql",                # the ops dashboard's read models
    "delivery_": "notifications.sql",             # deliveries
    "effect_": "jobs.sql",
    "event_export_": "event_export.sql",          # the event stream's export marks and lag (issue 46)                        # effects (a job's external effect records)
    "inbox_": "notifications.sql",                # notifications (the in-app inbox)
    "job_": "jobs.sql",                           # jobs, job_attempts, job_stats
    "workflow_": "workflows.sql",                 # workflows, workflow_tasks, workflow_deps, jobs.result
    "job_resolution_": "dashboard.sql",           # job_resolutions (the dead-letter page's decisions)
    "login_": "auth.sql",                         # login attempts and locks
    "membership_": "auth.sql",                    # memberships
    "metrics_": "metrics.sql",                    # the metrics' read models
    "notification_": "notifications.sql",         # notifications and their settings
    "notification_digest": "digests.sql",         # notification_digests (issue 43)
    "outbound_message_": "deliveries.sql",        # outbound_messages (SMS)
    "otp_request_": "otp.sql",                    # otp_requests (the product's one-time passwords)
    "outbox_": "outbox.sql",                      # outbox_events
    "pause_": "pauses.sql",                       # pauses (incident controls: held queues, types, tenants, providers)
    "push_subscription_": "deliveries.sql",       # push_subscriptions
    "queue_depth_": "limits.sql",
    "rate_limit_portal_": "tickets.sql",          # the customer pages' write buckets (issue 43)                 # queue_depth (the sampled depth backpressure reads)
    "quiet_hours_": "notifications.sql",          # quiet_hours
    "rate_limit_": "limits.sql",
    "replica_": "replica.sql",                    # the read replica's position (no table: WAL positions)                  # token buckets
    "report_": "reports.sql",                     # report_runs (chunks: their workflow)
    "schedule_": "schedules.sql",                 # schedule_state
    "service_error_": "workers.sql",              # service_errors (the worker's maintenance services)
    "session_": "auth.sql",                       # sessions
    "sla_policy_": "tickets.sql",                 # sla_policies
    "template_": "notifications.sql",             # notification_templates
    "tenant_": "auth.sql",                        # tenants
    "tenant_enqueue_limits": "limits.sql",        # the tenants' enqueue rate columns, read by backpressure
    "ticket_": "tickets.sql",                     # tickets and their messages, attachments, categories
    "user_": "auth.sql",                          # users
    "user_push_subscription": "deliveries.sql",   # push_subscriptions, by the user who registered them
    "user_token_": "notifications.sql",           # user_tokens (end users' bearer tokens for the inbox API)
    "webhook_": "deliveries.sql",                 # webhook_endpoints, webhook deliveries
    "worker_": "workers.sql",                     # workers
}

#: The demo's queries live with the demo (opsboard/tools/demo_sql): none is the product's, so
#: ``demo_`` has no owner here and a demo query in opsboard/sql fails the rule.

_NAME_RE = db._NAME_RE


def definitions(directory: Path = SQL_DIR) -> dict[str, list[str]]:
    """``{query name: [file, ...]}`` over every ``*.sql`` file of ``directory``."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(directory.glob("*.sql")):
        for m in _NAME_RE.finditer(path.read_text(encoding="utf-8")):
            found[m.group(1)].append(path.name)
    return dict(found)


def owner(name: str) -> str | None:
    """The file that owns ``name``'s noun (longest prefix), or None."""
    matches = [prefix for prefix in OWNERS if name.startswith(prefix)]
    return OWNERS[max(matches, key=len)] if matches else None


def misplaced(defs: dict[str, list[str]]) -> list[str]:
    """``"name in file (belongs in owner)"`` for every query outside its owner's file."""
    wrong = []
    for name, files in sorted(defs.items()):
        for file in files:
            want = owner(name)
            if want is None:
                wrong.append(f"{name} in {file} (no owner for its noun: add its prefix to OWNERS)")
            elif want != file:
                wrong.append(f"{name} in {file} (belongs in {want})")
    return wrong


def string_literals(dirs: list[Path]) -> set[str]:
    """Every string constant in the Python files under ``dirs``.

    Query names are passed as literals (``db.one(conn, "job_get", ...)``, or a
    literal in a dict or conditional that picks one); none is built with an
    f-string or concatenation, which this check would not see.
    """
    found: set[str] = set()
    for d in dirs:
        for path in sorted(d.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            found.update(node.value for node in ast.walk(tree)
                         if isinstance(node, ast.Constant) and isinstance(node.value, str))
    return found


def test_every_query_is_used():
    used = string_literals(CODE_DIRS)
    unused = sorted(name for name in definitions() if name not in used)
    assert not unused, f"named queries no code in opsboard/ or worker/ uses: {unused}"


def test_every_query_lives_in_its_owners_file():
    wrong = misplaced(definitions())
    assert not wrong, "misplaced queries:\n  " + "\n  ".join(wrong)


def test_no_query_is_defined_twice():
    twice = {name: files for name, files in definitions().items() if len(files) > 1}
    assert not twice, f"queries defined more than once: {twice}"


def test_every_owner_file_exists():
    files = {p.name for p in SQL_DIR.glob("*.sql")}
    assert set(OWNERS.values()) <= files


def test_rule_catches_a_misplaced_unowned_or_doubled_query(tmp_path):
    (tmp_path / "reports.sql").write_text("-- name: report_run_get\nSELECT 1;\n\n"
                                          "-- name: schedule_state_get\nSELECT 1;\n")
    (tmp_path / "schedules.sql").write_text("-- name: report_run_get\nSELECT 1;\n\n"
                                            "-- name: gadget_get\nSELECT 1;\n")
    (tmp_path / "auth.sql").write_text("-- name: user_token_insert\nSELECT 1;\n\n"
                                       "-- name: demo_thing_get\nSELECT 1;\n")
    defs = definitions(tmp_path)
    assert defs["report_run_get"] == ["reports.sql", "schedules.sql"]
    assert misplaced(defs) == [
        "demo_thing_get in auth.sql (no owner for its noun: add its prefix to OWNERS)",
        "gadget_get in schedules.sql (no owner for its noun: add its prefix to OWNERS)",
        "report_run_get in schedules.sql (belongs in reports.sql)",
        "schedule_state_get in reports.sql (belongs in schedules.sql)",
        "user_token_insert in auth.sql (belongs in notifications.sql)",
    ]
