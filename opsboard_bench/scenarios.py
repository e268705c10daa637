"""The scenarios of ``opsboard bench``, by name, in the order a run without ``--scenario`` takes them.

The one place that lists them: the harness (:mod:`opsboard_bench.harness`) is handed this registry and
imports no scenario.  The scenarios that start servers or reach the notification tier are imported when
they run (a ``--list`` or an ``enqueue_many`` run loads none of them); each wrapper's docstring is its
``--list`` line.
"""
from __future__ import annotations

from .claim import claim_cost, fairness
from .dashboard import dashboard
from .depth import depth
from .enqueue import enqueue_many, enqueue_single
from .harness import Bench, Registry
from .process import latency_idle, otp_flood, process_1, process_2, process_slots
from .prune import prune


def enqueue_cost(b: Bench) -> None:
    """Per job: WAL bytes and records, server and producer CPU of single enqueues (--jobs N, default 2,000)
    and enqueue_many (20 x 1,000); pgqueuer's beside them when installed."""
    from .enqueue import enqueue_cost as run
    run(b)


def webhooks(b: Bench) -> None:
    """Signed webhooks to local receivers that verify them, 100 endpoints (10% down for 60 s): deliveries/s, CPU
    per delivery, attempts on a down one."""
    from .webhooks import run
    run(b)


def relay(b: Bench) -> None:
    """Outbox relay: events -> jobs per second with one subscriber (default 20,000 events); commit->job p99."""
    from .outbox import relay as run
    run(b)


def api(b: Bench) -> None:
    """POST /api/v1/events through gunicorn (-w 4 --threads 4), 8 clients for 10 s; then 4x the admitted rate."""
    from .outbox import api as run
    run(b)


def api_worker(b: Bench) -> None:
    """POST /api/v1/events (wrk, an Idempotency-Key each) while a real worker relays, fans out and delivers
    to a sandbox; then 4x the admitted rate: each figure beside its goal (issue 27)."""
    from .api import api_worker as run
    run(b)


def fanout(b: Bench) -> None:
    """One event to 10,000 recipients x 2 channels: inbox rows/s until every delivery job is queued."""
    from .notifications import fanout as run
    run(b)


def deliver_render(b: Bench) -> None:
    """The deliver job's rendering (issue 42): an author's template in the render processes (cached, and
    per recipient) beside the shipped text in the worker's process, deliveries per second (--jobs N)."""
    from .notifications import deliver_render as run
    run(b)


def workflows(b: Bench) -> None:
    """Workflows (issue 45), 2 workers: the no-dependency rate, then fan_out_in (1 -> 10,000 -> 1), layers_20
    (20 x 500, 2 deps each) and chain_1000: jobs/s, dependent start p99, stuck tasks (--json: the issue's shape)."""
    from .workflows import run
    run(b)


def digest(b: Bench) -> None:
    """100,000 events for 10,000 recipients in one digest window (--jobs N events), then 10,000 digests with
    2 workers: the time to hand them all over and the OTP's p99 meanwhile (issue 43)."""
    from .digest import run
    run(b)


def sse(b: Bench) -> None:
    """1,000 SSE streams on one gunicorn gthread process: a new row reaching all (p99), memory per stream."""
    from .notifications import sse as run
    run(b)


def broadcast(b: Bench) -> None:
    """One notification to 600,000 members x 2 channels (2 workers), OTP and another tenant meanwhile."""
    from .broadcast import broadcast as run
    run(b)


def streams(b: Bench) -> None:
    """N inbox streams (--streams, default 2,000) on the stream server beside the demo's gunicorn: delivery
    p50/p99 to every stream, stream server RSS, /healthz and /login p99 meanwhile (issue 27)."""
    from .streams import streams as run
    run(b)


def notify_scale(b: Bench) -> None:
    """Issue 27's notification tier in one run, each figure beside its goal: streams (--streams, default
    10,000), broadcast, api, webhooks."""
    wanted = b.streams
    b.streams = wanted or 10_000
    try:
        for run in (streams, broadcast, api, webhooks):
            run(b)
    finally:
        b.streams = wanted


def tickets(b: Bench) -> None:
    """Agents' ticket queue (every filter) and detail at 100,000 tickets x 10 messages (--jobs N tickets)."""
    from .tickets import run
    run(b)


def event_export(b: Bench) -> None:
    """Outbox events to NATS JetStream (own nats-server -js): export rate beside the relay's on a backlog
    (--jobs N, default 100,000); then N events while the worker is SIGKILLed and NATS restarted: missing,
    duplicates stored."""
    from .event_export import run
    run(b)


def noisy_neighbour(b: Bench) -> None:
    """Issue 50: a healthy tenant's webhooks (4/s) quiet, then beside a noisy tenant's endpoints that answer
    after 95 % of the timeout, never, a byte a second or with endless 100 Continue (8/s), 2 workers with the
    default slots: the healthy p50/p99 quiet and beside it, running jobs per tenant, worker CPU per attempt."""
    from .noisy import run
    run(b)


def pinned_horizon(b: Bench) -> None:
    """Issue 48, on a throwaway cluster with autovacuum on: 60 s at 60 % of the clean peak, then an idle
    transaction and 4 REPEATABLE READ readers pin the horizon (--pin-seconds, default 600), then 60 s of
    recovery: throughput, enqueue->claim p99, recovery, lost, dead share of the hot tables."""
    from .pinned_horizon import run
    run(b)


def scale(b: Bench) -> None:
    """10,000,000 jobs (--jobs N) built with COPY: claim, depth, every dashboard page, pruner, beside the goals."""
    from .scale import run
    run(b)


_SCENARIOS = {
    "enqueue_single": enqueue_single,
    "enqueue_many": enqueue_many,
    "enqueue_cost": enqueue_cost,
    "process_1": process_1,
    "process_2": process_2,
    "latency_idle": latency_idle,
    "process_slots": process_slots,
    "fairness": fairness,
    "otp_flood": otp_flood,
    "claim_cost": claim_cost,
    "dashboard": dashboard,
    "webhooks": webhooks,
    "relay": relay,
    "api": api,
    "api_worker": api_worker,
    "fanout": fanout,
    "deliver_render": deliver_render,
    "digest": digest,
    "workflows": workflows,
    "sse": sse,
    "broadcast": broadcast,
    "streams": streams,
    "tickets": tickets,
    "notify_scale": notify_scale,
    "scale": scale,
    "depth": depth,
    "prune": prune,
    "event_export": event_export,
    "pinned_horizon": pinned_horizon,
    "noisy_neighbour": noisy_neighbour,
}
#: Scenarios left out when no --scenario is given: ``notify_scale`` runs others (their parts run
#: anyway); ``scale``, ``depth`` and ``prune`` build databases of millions of jobs (``scale``: about
#: 20 minutes and 6 GB on its own); ``event_export`` starts nats-servers of its own and a chaos run;
#: ``digest`` fans 100,000 events out one by one before its digests (about 30 minutes on a 2-core VM);
#: ``pinned_horizon`` starts a cluster of its own and pins it for 10 minutes; ``noisy_neighbour`` runs 40 s of
#: hostile receivers.
_GROUPS = frozenset({"notify_scale", "scale", "depth", "prune", "event_export", "digest", "pinned_horizon",
                     "noisy_neighbour"})

#: Programs a scenario runs, checked before anything starts (a missing one: exit status 2, one line).
_TOOLS = {"api_worker": (("wrk", "apt-get install wrk"),),
          "event_export": (("nats-server", "apt-get install nats-server"),)}

REGISTRY = Registry(_SCENARIOS, groups=_GROUPS, tools=_TOOLS)
