"""The reports feature's entries in the catalogue.
"""
from __future__ import annotations

import uuid

from .. import catalogue as _catalogue
from ..jobtypes import Field, define
from ..persian import marked as _l
from ..schedules import define_schedule
from .kinds import define_kind, Param, ReportKind
from .activity import _activity_plan, _activity_rows, _activity_validate, _nightly_activity_payload


def register(cat: _catalogue.Catalogue) -> None:
    """Report kinds, the report job types and the nightly schedule."""
    define_kind(cat, ReportKind(
        name="job_activity",
        title=_l("Tenant job activity"),
        columns=("day", "job_type", "status", "jobs"),
        params=(Param("date_from", _l("From (day)"), "date"), Param("date_to", _l("To (day, inclusive)"), "date"),
                Param("time_zone", _l("Time zone"), "time_zone", required=False, default="UTC")),
        validate=_activity_validate,
        plan=_activity_plan,
        rows=_activity_rows,
        filename=lambda p: f"job-activity-{p['date_from']}-{p['date_to']}.csv",
        description=_l("Jobs per day, type and status created in the range (days in the chosen time zone)."),
    ))

    define(cat, "reports.request", handler="opsboard.reports.handlers:request", queue="bulk", long_running=True,
           fields={"run_id": Field(uuid.UUID)}, max_attempts=5, timeout=600, backoff_base=2,
           backoff_cap=60, description="Plans a report run into keyset slices and inserts its workflow: a chunk "
                                       "task per slice, the assembly after every chunk.")
    define(cat, "reports.chunk", handler="opsboard.reports.handlers:chunk", queue="bulk", long_running=True,
           fields={"run_id": Field(uuid.UUID), "seq": Field(int), "lower": Field(dict, required=False),
                   "upper": Field(dict, required=False), "est_rows": Field(int, required=False)},
           max_attempts=5, timeout=900, backoff_base=2, backoff_cap=120,
           description="Writes one slice of a report run to storage (a task of the run's workflow); its result "
                       "names the part.")
    define(cat, "reports.assemble", handler="opsboard.reports.handlers:assemble", queue="bulk", long_running=True,
           fields={"run_id": Field(uuid.UUID)}, max_attempts=5, timeout=1800, backoff_base=2,
           backoff_cap=120, description="Streams a run's parts (its chunk tasks' results) into one CSV in storage; "
                                        "the run is then ready.")
    define(cat, "reports.scheduled", handler="opsboard.reports.handlers:scheduled", queue="bulk",
           fields={"kind": Field(str, max_length=100), "params": Field(dict), "source_key": Field(str, max_length=200),
                   "schedule": Field(str, max_length=100)},
           max_attempts=5, timeout=120, description="A schedule slot's report for one tenant: makes the run once.")
    define_schedule(cat, "reports.nightly_activity", "30 1 * * *", time_zone="Asia/Tehran", job_type="reports.scheduled",
                    payload=_nightly_activity_payload, per_tenant=True,
                    description=_l("Yesterday's job activity report for every tenant, at 01:30 Tehran time."))
