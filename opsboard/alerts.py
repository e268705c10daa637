"""Alerts: rules over the queue's state, evaluated by the leader's alert service.

Rules (each yields zero or more firing ``(rule, key)`` conditions):

==================  =========================================================  ==========
rule                fires when                                                  key
==================  =========================================================  ==========
``dead_rising``     more than ``dead_threshold`` jobs went dead in the last     ``all``
                    ``dead_window`` seconds
``error_code``      at least ``error_code_threshold`` retryable or dead jobs     the code
                    failed with the same last error code in the last
                    ``error_code_window`` seconds
``queue_age``       a queue's oldest ready job waited longer than the           the queue
                    queue's target (``queue_age_targets``)
``no_worker``       a queue has ready jobs and no running worker serving it     the queue
                    was seen in the last ``worker_silence`` seconds
``event_export_``   the oldest outbox event not yet exported to NATS JetStream  the stream
``lag``             is older than ``export_lag_seconds`` (opsboard/outbox/export.py)
==================  =========================================================  ==========

:func:`evaluate` keeps at most one open alert per (rule, key): a firing
condition opens an alert or refreshes its ``last_seen_at``; an open alert
whose condition no longer fires is closed.  A later recurrence opens a new
alert.  Opening and closing each write an audit row (actor ``system``,
``alert.open`` / ``alert.close``).

Notification: an opened alert is also an outbox event, published in the same
transaction as the alert row and its audit row (both commit or neither does):
``alert.opened`` for ``info``/``warning`` alerts, ``alert.critical`` for
``critical`` ones (v1 payload of both: ``alert_id``, ``rule``, ``severity``).
Why two event types: a notification policy has exactly one category, and the
category decides quiet hours and whether a user may turn it off.  A warning
must respect quiet hours (category ``alerts``) and a critical alert must not
(category ``alerts_critical``, critical), so each severity class gets its own
event type and policy -- the simplest design that needs no change to the
policy machinery.  Recipients are the on-call ops staff: active users holding
a role with ``alerts.view`` (ops, admin) in an operator tenant; channels inbox,
email and push, plus SMS for critical alerts.  Caveats of the critical path:
critical categories fan out and send (email, push and SMS jobs alike) on the
``critical`` queue with the 2-minute TTL of critical deliveries, so a
``no_worker`` alert about ``default`` reaches every channel, while one *about*
the critical queue is only seen on the dashboard banner (which keeps showing
every open alert).
A refreshed alert whose severity rises does not notify again.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import audit, auth, db, outbox
from .auth import TenantScope
from .config import DEFAULT_QUEUE_AGE_TARGET, Config, QUEUE_AGE_TARGETS, QUEUE_NAMES, WORKER_LIVE_SECONDS
from .errors import OpsError
from .schema import new_id

log = logging.getLogger("worker.alerts")

RULES = ("dead_rising", "error_code", "queue_age", "no_worker", "event_export_lag")
SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class AlertConfig:
    """Thresholds of the rules; the defaults are what an ops team starts with."""

    #: Seconds between evaluations by the worker's alert service.
    interval: float = 15.0
    dead_window: int = 600
    #: dead_rising fires when *more than* this many jobs went dead in the window.
    dead_threshold: int = 10
    error_code_window: int = 600
    #: error_code fires when *at least* this many jobs share a code.
    error_code_threshold: int = 20
    #: Seconds the oldest ready job of each queue may wait; queues not listed
    #: use ``default_queue_age``.
    queue_age_targets: dict[str, float] = field(default_factory=lambda: dict(QUEUE_AGE_TARGETS))
    default_queue_age: float = DEFAULT_QUEUE_AGE_TARGET
    #: A worker seen within this many seconds counts as live for no_worker.
    worker_silence: int = WORKER_LIVE_SECONDS
    queues: tuple[str, ...] = QUEUE_NAMES
    #: event_export_lag fires when the oldest event not yet exported waited longer than this (seconds).
    export_lag_seconds: float = 300.0

    def __post_init__(self):
        if min(self.dead_window, self.error_code_window, self.worker_silence) <= 0:
            raise ValueError("alert windows must be positive")
        if self.dead_threshold < 0 or self.error_code_threshold < 1:
            raise ValueError("dead_threshold >= 0 and error_code_threshold >= 1")
        if any(v <= 0 for v in self.queue_age_targets.values()) or self.default_queue_age <= 0:
            raise ValueError("queue age targets must be positive")

    @classmethod
    def from_config(cls, config: Config) -> "AlertConfig":
        """The alert service's settings from ``config`` (the thresholds are not configurable yet:
        the defaults, which take the queue age targets and the live-worker window from
        :mod:`opsboard.config`)."""
        return cls()

    def age_target(self, queue: str) -> float:
        return float(self.queue_age_targets.get(queue, self.default_queue_age))


@dataclass(frozen=True)
class Condition:
    """One firing condition: becomes (or refreshes) the open alert of (rule, key)."""

    rule: str
    key: str
    severity: str
    summary: str
    details: dict[str, Any]
    tenant_id: Any = None


def _fmt_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


def firing_conditions(conn: psycopg.Connection, config: AlertConfig = AlertConfig(),
                      now: datetime | None = None) -> list[Condition]:
    """Evaluate every rule at ``now`` (default: the database's time); no writes."""
    found: list[Condition] = []

    dead = db.one(conn, "alert_dead_recent", {"now": now, "window": config.dead_window})
    if dead["n"] > config.dead_threshold:
        found.append(Condition(
            "dead_rising", "all", "warning",
            f"{dead['n']} jobs went dead in the last {_fmt_seconds(config.dead_window)} "
            f"(threshold {config.dead_threshold})",
            {"dead": dead["n"], "window_seconds": config.dead_window, "threshold": config.dead_threshold,
             "top_types": dead["top_types"]}))

    for row in db.all_rows(conn, "alert_error_code_spread", {
            "now": now, "window": config.error_code_window, "threshold": config.error_code_threshold}):
        found.append(Condition(
            "error_code", row["error_code"], "warning",
            f"{row['jobs']} jobs failing with {row['error_code']} in the last "
            f"{_fmt_seconds(config.error_code_window)}",
            {"error_code": row["error_code"], "jobs": row["jobs"], "types": row["types"],
             "window_seconds": config.error_code_window, "threshold": config.error_code_threshold}))

    for row in db.all_rows(conn, "alert_queue_readiness", {
            "now": now, "queues": list(config.queues), "worker_seconds": config.worker_silence}):
        age = row["oldest_age"]
        if age is None:
            continue  # nothing ready in this queue
        target = config.age_target(row["queue"])
        if age > target:
            found.append(Condition(
                "queue_age", row["queue"], "critical" if row["queue"] == "critical" else "warning",
                f"the oldest ready job in {row['queue']} has waited {_fmt_seconds(age)} "
                f"(target {_fmt_seconds(target)})",
                {"queue": row["queue"], "oldest_age_seconds": round(age, 1), "target_seconds": target,
                 "oldest_ready_at": row["oldest_ready_at"].isoformat()}))
        if row["live_workers"] == 0:
            found.append(Condition(
                "no_worker", row["queue"], "critical",
                f"no live worker serves {row['queue']}, which has ready jobs",
                {"queue": row["queue"], "silence_seconds": config.worker_silence,
                 "oldest_age_seconds": round(age, 1)}))

    # Only streams an exporter ever wrote to (none: no export configured, nothing is "behind").
    for row in db.all_rows(conn, "event_export_lag", {"now": now}):
        if row["lag_seconds"] > config.export_lag_seconds:
            found.append(Condition(
                "event_export_lag", row["stream"], "warning",
                f"{row['lag_events']} events not exported to stream {row['stream']}; the oldest waited "
                f"{_fmt_seconds(row['lag_seconds'])} (threshold {_fmt_seconds(config.export_lag_seconds)})",
                {"stream": row["stream"], "lag_events": row["lag_events"],
                 "oldest_age_seconds": round(row["lag_seconds"], 1), "threshold": config.export_lag_seconds,
                 "connected": row["connected"], "last_error": row["last_error"]}))
    return found


def evaluate(conn: psycopg.Connection, config: AlertConfig = AlertConfig(),
             now: datetime | None = None) -> dict[str, int]:
    """Evaluate the rules and bring the alerts table in line, in one transaction.

    Returns counts: ``opened``, ``refreshed``, ``closed``.
    """
    counts = {"opened": 0, "refreshed": 0, "closed": 0}
    with conn.transaction():
        conditions = firing_conditions(conn, config, now)
        for c in conditions:
            row = open_alert(conn, rule=c.rule, key=c.key, tenant_id=c.tenant_id, severity=c.severity,
                             summary=c.summary, details=c.details, now=now)
            counts["opened" if row["inserted"] else "refreshed"] += 1
        closed = db.all_rows(conn, "alert_close_cleared", {
            "now": now, "rules": list(RULES), "firing_rules": [c.rule for c in conditions],
            "firing_keys": [c.key for c in conditions]})
        for row in closed:
            counts["closed"] += 1
            audit.record(conn, audit.SYSTEM, "alert.close", target_type="alert", target_id=row["id"],
                         tenant_id=row["tenant_id"], reason="the condition cleared",
                         after={"rule": row["rule"], "key": row["key"]})
    return counts


# ---------------------------------------------------------------- notifying people

#: The event type of an opened alert, by severity (see the module docstring).
EVENT_BY_SEVERITY = {"info": "alert.opened", "warning": "alert.opened", "critical": "alert.critical"}
#: The permission that makes a user on-call for alerts.
ONCALL_PERMISSION = "alerts.view"


def open_alert(conn: psycopg.Connection, *, rule: str, key: str, tenant_id, severity: str, summary: str,
               details: dict, now: datetime | None = None) -> dict:
    """Open an alert (or refresh the open one with the same rule and key), in the caller's transaction.

    A newly opened alert is audited and published (:func:`publish_opened`), so that on-call staff are
    notified; ``inserted`` in the returned row says which it was.  The rules of :func:`evaluate` and the
    features that open alerts of their own (a disabled webhook endpoint) all come through here.
    """
    row = db.one(conn, "alert_upsert", {
        "id": new_id(), "rule": rule, "key": key, "tenant_id": tenant_id, "severity": severity,
        "summary": summary, "details": Jsonb(details), "now": now})
    if row["inserted"]:
        audit.record(conn, audit.SYSTEM, "alert.open", target_type="alert", target_id=row["id"],
                     tenant_id=tenant_id, after={"rule": rule, "key": key, "severity": severity, "summary": summary})
        publish_opened(conn, row, now)
    return row


def publish_opened(conn: psycopg.Connection, alert: dict, now: datetime | None = None) -> dict | None:
    """Publish the event of a just opened ``alert`` in the caller's transaction; returns the envelope.

    The event belongs to the alert's tenant, or (a platform-wide alert) to the operator tenant; with
    no operator tenant there is nobody to notify and nothing is published.
    """
    tenant_id = alert["tenant_id"]
    if tenant_id is None:
        row = db.one(conn, "alert_operator_tenant")
        if row is None:
            return None
        tenant_id = row["id"]
    return outbox.publish(conn, EVENT_BY_SEVERITY[alert["severity"]], 1, aggregate=("alert", str(alert["id"])),
                          tenant=tenant_id, now=now,
                          payload={"alert_id": str(alert["id"]), "rule": alert["rule"],
                                   "severity": alert["severity"]})


def oncall_staff(conn: psycopg.Connection, event: dict) -> list:
    """The recipients of an alert event: active users holding ``alerts.view`` in an operator tenant."""
    roles = sorted(r.value for r, perms in auth.ROLE_PERMISSIONS.items() if ONCALL_PERMISSION in perms)
    return [r["id"] for r in db.all_rows(conn, "alert_oncall_staff", {"roles": roles})]


#: The parts an alert's text is built from, per rule, in every language (issue 43): the stored summary is
#: English; a Persian text is written from these, never around the English sentence.
_PART_DEFAULTS = {"count": 0, "threshold": 0, "window": 0, "code": "", "queue": "", "age": 0, "target": 0}


def alert_variables(conn: psycopg.Connection, event: dict, user_id) -> dict:
    """What an alert notification says: the alert's English summary, rule, key, its page (``link``), and
    the parts each language writes its own sentence from (``count``, ``threshold``, ``window``,
    ``code``, ``queue``, ``age``, ``target``; seconds for the durations)."""
    aid = _alert_uuid(event["payload"].get("alert_id"))
    alert = db.one(conn, "alert_get", {"id": aid, "scope_all": True, "scope_ids": []}) if aid else None
    if alert is None:
        return {"summary": "", "key": "", "link": "/alerts/", **_PART_DEFAULTS}
    d = alert.get("details") or {}
    parts = {"count": d.get("dead", d.get("jobs", 0)), "threshold": d.get("threshold", 0),
             "window": d.get("window_seconds", 0), "code": d.get("error_code", ""), "queue": d.get("queue", ""),
             "age": d.get("oldest_age_seconds", 0), "target": d.get("target_seconds", 0)}
    return {"summary": alert["summary"], "key": alert["key"], "link": f"/alerts/{alert['id']}", **parts}


_FA_SEVERITY = "{{ {'info': 'اطلاع', 'warning': 'هشدار', 'critical': 'بحرانی'}[severity] }}"
_FA_RULE = ("{{ {'dead_rising': 'افزایش کارهای مرده', 'error_code': 'خطای تکرارشونده', "
            "'queue_age': 'انتظار طولانی در صف', 'no_worker': 'صف بدون کارگر', "
            "'webhook_endpoint_disabled': 'وب‌هوک غیرفعال شد', "
            "'event_export_lag': 'عقب‌ماندن ارسال رویدادها'}.get(rule, rule) }}")
#: The key in Persian: "all" translated, any other (a queue, an error code, an endpoint id) a left-to-right island.
_FA_KEY = "{% if key == 'all' %}همه{% else %}{{ key|ltr }}{% endif %}"
#: The summary written in Persian from the alert's parts (the dashboard's words, opsboard.web.alerts), each id,
#: code, queue and number a left-to-right island (``ltr``: Unicode isolates in text, <bdi dir="ltr"> in HTML).
_FA_SUMMARY = (
    "{% if rule == 'dead_rising' %}{{ count|fa_digits|ltr }} کار در {{ window|duration('fa') }} گذشته مرده شد"
    " (آستانه {{ threshold|fa_digits|ltr }})"
    "{% elif rule == 'error_code' %}{{ count|fa_digits|ltr }} کار در {{ window|duration('fa') }} گذشته با "
    "{{ code|ltr }} ناموفق شد"
    "{% elif rule == 'queue_age' %}قدیمی‌ترین کار آماده در {{ queue|ltr }}، {{ age|duration('fa') }} منتظر مانده "
    "است (هدف {{ target|duration('fa') }})"
    "{% elif rule == 'no_worker' %}هیچ کارگر زنده‌ای به {{ queue|ltr }} که کار آماده دارد، سرویس نمی‌دهد"
    "{% elif rule == 'webhook_endpoint_disabled' %}نقطهٔ پایانی وب‌هوک {{ key|ltr }} غیرفعال شد"
    "{% else %}" + _FA_RULE + "{% endif %}")
_FA_TITLE = _FA_SEVERITY + ": " + _FA_RULE + " (" + _FA_KEY + ")"
_VARS = "severity, rule, key, summary, link, count, threshold, window, code, queue, age, target"
#: (key, channel, locale, subject, body, variables) shipped for both alert events.  Each language writes its
#: own sentence from the parts (issue 43): Persian never wraps the English summary.
TEMPLATES = [
    ("inbox", "fa", _FA_TITLE, _FA_SUMMARY + ". مشاهده: {{ link|ltr }}"),
    ("inbox", "en", "{{ severity|capitalize }} alert: {{ rule }} ({{ key }})", "{{ summary }}. View: {{ link }}"),
    ("email", "fa", _FA_TITLE,
     "<p><b>" + _FA_SEVERITY + "</b> — " + _FA_RULE + " (" + _FA_KEY + ")</p><p>" + _FA_SUMMARY + "</p>"
     "<p><a href=\"{{ link }}\">مشاهدهٔ هشدار</a></p>"),
    ("email", "en", "{{ severity|capitalize }} alert: {{ rule }} ({{ key }})",
     "<p><b>{{ severity|capitalize }}</b> — {{ rule }} ({{ key }})</p><p>{{ summary }}</p>"
     "<p><a href=\"{{ link }}\">View the alert</a></p>"),
    ("push", "fa", _FA_SEVERITY + ": " + _FA_RULE, _FA_SUMMARY),
    ("push", "en", "{{ severity|capitalize }} alert: {{ rule }}", "{{ summary }}"),
    ("sms", "fa", "", _FA_SEVERITY + " \u2066opsboard\u2069: " + _FA_SUMMARY),
    ("sms", "en", "", "opsboard {{ severity }}: {{ summary }}"),
]
_SAMPLE = {"severity": "critical", "rule": "no_worker", "key": "critical",
           "summary": "no live worker serves critical, which has ready jobs",
           "link": "/alerts/01900000-0000-7000-8000-000000000000",
           "count": 0, "threshold": 0, "window": 0, "code": "", "queue": "critical", "age": 95, "target": 30}



class AlertService:
    """The leader's alert service: evaluates every rule on an interval, so that one process opens
    and closes alerts (contributed to the worker through the catalogue, ``services["alerts"]``)."""

    name = "alerts"

    def __init__(self, config: AlertConfig = AlertConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        """Evaluate every rule once; returns the alerts opened plus those closed."""
        counts = evaluate(conn, self.config, now)
        if counts["opened"] or counts["closed"]:
            log.warning("alerts: %d opened, %d closed, %d still open", counts["opened"], counts["closed"],
                        counts["refreshed"])
        return counts["opened"] + counts["closed"]

def register(cat) -> None:
    """The alerts feature's events, categories, policies and shipped templates (see the module docstring).

    Imports inside, like the tickets feature: importing :mod:`opsboard.alerts` stays cheap.
    """
    from .notifications import policy
    from .outbox import EventField, define_event

    # webhook_endpoint_disabled: opened by the deliveries feature (opsboard.deliveries.webhooks), not a rule here.
    fields = {"alert_id": EventField(str, max_length=64),
              "rule": EventField(str, choices=RULES + ("webhook_endpoint_disabled",)),
              "severity": EventField(str, choices=SEVERITIES)}
    define_event(cat, "alert.opened", 1, aggregate="alert", fields=fields,
                 description="An info or warning alert opened (notifies on-call ops staff; quiet hours respected).")
    define_event(cat, "alert.critical", 1, aggregate="alert", fields=fields,
                 description="A critical alert opened (notifies on-call ops staff at once, SMS included).")
    policy.define_category(cat, "alerts", description="Queue alerts for on-call ops staff.")
    policy.define_category(cat, "alerts_critical", critical=True,
                           description="Critical queue alerts: ignore quiet hours, cannot be turned off.")
    common = dict(recipients=oncall_staff, permission=ONCALL_PERMISSION, variables=alert_variables)
    policy.declare(cat, "alert.opened", category="alerts", channels=("inbox", "email", "push"), **common)
    policy.declare(cat, "alert.critical", category="alerts_critical", channels=("inbox", "email", "push", "sms"),
                   **common)
    for key, channels in (("alert.opened", ("inbox", "email", "push")),
                          ("alert.critical", ("inbox", "email", "push", "sms"))):
        for channel, locale, subject, body in TEMPLATES:
            if channel in channels:
                sample = dict(_SAMPLE) if key == "alert.critical" else {
                    **_SAMPLE, "severity": "warning", "rule": "dead_rising", "key": "all",
                    "summary": "14 jobs went dead in the last 10 min (threshold 10)",
                    "count": 14, "threshold": 10, "window": 600, "queue": ""}
                cat.ship_template(key, channel, locale, subject, body, _VARS, sample)
    cat.services["alerts"] = lambda config: AlertService(AlertConfig.from_config(config))


# ---------------------------------------------------------------- the dashboard's side

def list_alerts(conn: psycopg.Connection, scope: TenantScope, *, closed_limit: int = 50) -> dict[str, list[dict]]:
    """Open alerts (unacknowledged first) and the most recently closed ones, inside ``scope``."""
    found = {"open": db.all_rows(conn, "alert_list_open", scope.params),
             "closed": db.all_rows(conn, "alert_list_closed", {**scope.params, "limit": closed_limit})}
    audit.hide_staff(conn, scope, found["open"] + found["closed"], id_key="acknowledged_by_id",
                     label_key="acknowledged_by")
    return found


def alert_detail(conn: psycopg.Connection, scope: TenantScope, alert_id) -> dict | None:
    """One alert and its audit history (opened, acknowledged, closed); ``None`` outside scope."""
    alert = get_alert(conn, scope, alert_id)
    if alert is None:
        return None
    history = audit.list_records(conn, scope, target_type="alert", target_id=str(alert["id"]), limit=50)
    audit.hide_staff(conn, scope, history, id_key="actor_id", label_key="actor_label")
    return {"alert": alert, "history": list(reversed(history))}


def _alert_uuid(alert_id) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(alert_id))
    except ValueError:
        return None


def get_alert(conn: psycopg.Connection, scope: TenantScope, alert_id) -> dict | None:
    """One alert inside ``scope``, or ``None`` (also for a malformed id)."""
    aid = _alert_uuid(alert_id)
    if aid is None:
        return None
    alert = db.one(conn, "alert_get", {"id": aid, **scope.params})
    audit.hide_staff(conn, scope, [alert], id_key="acknowledged_by_id", label_key="acknowledged_by")
    return alert


def acknowledge(conn: psycopg.Connection, alert_id, actor: audit.Actor, reason: str, request_key: str | None,
                *, scope: TenantScope, now: datetime | None = None) -> dict:
    """Acknowledge an open alert with a reason; audited as ``alert.ack``; idempotent on ``request_key``.

    An operator action (:func:`opsboard.audit.operator_action`).  Raises
    :class:`~opsboard.errors.OpsError`: ``reason_required``, ``not_found``,
    ``already_acknowledged``, ``alert_closed``, ``request_key_reused`` (the key
    acknowledged another alert).
    """
    aid = _alert_uuid(alert_id)
    if aid is None:
        raise OpsError("no such alert", "not_found")

    def perform(ctx: audit.ActionContext) -> dict:
        alert = get_alert(conn, scope, aid)
        if alert is None:
            raise OpsError("no such alert", "not_found")
        # The audit row first: a concurrent identical request waits on its key.
        ctx.write(tenant_id=alert["tenant_id"], before={"acknowledged": False},
                  after={"acknowledged": True, "rule": alert["rule"], "key": alert["key"]})
        row = db.one(conn, "alert_acknowledge", {"id": alert["id"], "actor": actor.label, "actor_id": actor.id,
                                                 "reason": ctx.reason, "now": now, **scope.params})
        if row is None:
            alert = get_alert(conn, scope, alert["id"]) or alert
            if alert["closed_at"] is not None:
                raise OpsError("this alert is closed already", "alert_closed")
            raise OpsError("already acknowledged by %(actor)s", "already_acknowledged",
                           params={"actor": alert["acknowledged_by"]})
        return row

    return audit.operator_action(
        conn, actor, "alert.ack", target_type="alert", target_id=aid, reason=reason, request_key=request_key,
        perform=perform, repeat=lambda previous: get_alert(conn, scope, previous["target_id"]) or {})


def count_unacknowledged(conn: psycopg.Connection, scope: TenantScope) -> dict:
    """``{"n": open unacknowledged alerts, "critical": of which critical}`` inside ``scope``."""
    return db.one(conn, "alert_count_unacknowledged", scope.params)
