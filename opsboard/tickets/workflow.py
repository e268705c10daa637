"""The ticket workflow, declared as data.

Statuses (what moves a ticket in and out):

* ``new`` -- created by a requester (API) or an agent; left by ``triage``, ``start`` or ``cancel``.
* ``triaged`` -- an agent looked at it (category, priority); left by ``start``, ``resolve``, ``cancel``.
* ``in_progress`` -- an agent works on it; ``wait_on_customer`` pauses the SLA clock.
* ``waiting_on_customer`` -- the clock is paused; ``resume`` (an agent, or the requester's reply) restarts it.
* ``resolved`` -- needs a resolution code and summary (and a decision on a request); ``close`` ends it,
  ``reopen`` (within :data:`REOPEN_WINDOW`) brings it back to ``in_progress``.
* ``closed``, ``cancelled`` -- final.

Roles: ``admin`` and ``support_agent`` of the ticket's tenant (or operator staff holding
``tickets.work``), and ``requester`` (the customer who opened the ticket).  Anyone else is
refused before the workflow is asked.  Non-status actions (assign, reply, note, decide) are
declared the same way, with the statuses they are allowed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

STATUSES = ("new", "triaged", "in_progress", "waiting_on_customer", "resolved", "closed", "cancelled")
OPEN_STATUSES = ("new", "triaged", "in_progress", "waiting_on_customer")
PRIORITIES = ("low", "normal", "high", "urgent")
ROLES = ("admin", "support_agent", "requester")
AGENTS = frozenset({"admin", "support_agent"})
EVERYONE = frozenset(ROLES)

#: How long after resolution the requester (or an agent) may reopen a ticket.
REOPEN_WINDOW = timedelta(days=7)
DECISIONS = ("approved", "rejected")


@dataclass(frozen=True)
class Transition:
    """One action: the statuses it starts from, the status it leads to (None: unchanged), who may."""

    action: str
    sources: frozenset[str]
    target: str | None
    roles: frozenset[str]
    #: Guard names checked by the service (see :func:`guard_errors`).
    guards: tuple[str, ...] = field(default=())
    label: str = ""


def _t(action, sources, target, roles, guards=(), label=""):
    return Transition(action, frozenset(sources), target, frozenset(roles), tuple(guards), label or action)


#: Status-changing actions.
TRANSITIONS: dict[str, Transition] = {t.action: t for t in (
    _t("triage", {"new"}, "triaged", AGENTS, label="Triage"),
    _t("start", {"new", "triaged"}, "in_progress", AGENTS, label="Start work"),
    _t("wait_on_customer", {"in_progress"}, "waiting_on_customer", AGENTS, label="Wait on customer"),
    _t("resume", {"waiting_on_customer"}, "in_progress", EVERYONE, label="Resume"),
    _t("resolve", {"triaged", "in_progress", "waiting_on_customer"}, "resolved", AGENTS,
       guards=("resolution", "decision_if_request"), label="Resolve"),
    _t("close", {"resolved"}, "closed", AGENTS, label="Close"),
    _t("reopen", {"resolved"}, "in_progress", EVERYONE, guards=("reopen_window",), label="Reopen"),
    _t("cancel", {"new", "triaged", "in_progress", "waiting_on_customer"}, "cancelled",
       {"admin", "requester"}, label="Cancel"),
)}

#: Actions that leave the status as it is.
ACTIONS: dict[str, Transition] = {t.action: t for t in (
    _t("assign", OPEN_STATUSES, None, AGENTS, label="Assign"),
    _t("reply", OPEN_STATUSES, None, EVERYONE, label="Reply"),
    _t("note", set(STATUSES), None, AGENTS, label="Internal note"),
    _t("decide", OPEN_STATUSES, None, AGENTS, guards=("is_request", "decision"), label="Decide"),
    _t("set_priority", OPEN_STATUSES, None, AGENTS, label="Change priority"),
)}

ALL = {**TRANSITIONS, **ACTIONS}


def allowed(status: str, role: str) -> list[str]:
    """The actions ``role`` may take on a ticket in ``status`` (guards not checked)."""
    return [a for a, t in ALL.items() if status in t.sources and role in t.roles]


def allowed_transitions(status: str, role: str) -> list[str]:
    return [a for a, t in TRANSITIONS.items() if status in t.sources and role in t.roles]


def check(action: str, status: str, role: str) -> Transition:
    """The declared transition, or :class:`~opsboard.errors.OpsError`.

    Unknown action: ``unknown_action`` (400); a role that may never take it: ``forbidden`` (403);
    a status it cannot start from: ``invalid_transition`` (409), listing what is allowed.
    """
    from ..errors import OpsError

    t = ALL.get(action)
    if t is None:
        raise OpsError("unknown ticket action %(action)s", "unknown_action", params={"action": repr(action)})
    if role not in t.roles:
        raise OpsError("a %(role)s may not %(action)s a ticket", "forbidden", status=403,
                       params={"role": role, "action": t.label.lower()})
    if status not in t.sources:
        ok = allowed_transitions(status, role)
        err = OpsError("cannot %(action)s a %(status)s ticket; allowed: %(names)s", "invalid_transition",
                       params={"action": action, "status": status, "names": ", ".join(ok) or "none"})
        err.allowed = ok
        raise err
    return t
