"""Events exported to NATS JetStream, for services outside opsboard and for replay (issue 46).

Turned on by ``OPSBOARD_EVENT_STREAM_URL=nats://host:port`` (:class:`opsboard.config.EventStreamSettings`);
the stream is ``OPSBOARD_EVENT_STREAM_NAME`` (default ``OPSBOARD_EVENTS``, made when missing, with a
duplicate window), every event goes to ``<OPSBOARD_EVENT_SUBJECT_PREFIX>.<tenant slug>.<event type>``
with header ``Nats-Msg-Id`` = the event id and, as its body, the event's envelope exactly as the API
answers it (:func:`opsboard.outbox.envelope`) plus its ``payload`` and ``tenant`` (the API's caller
knows both; a stream's consumer has nothing else to act on).

**On the leader, not sharded.**  The exporter is a maintenance service (``catalogue.services``,
registered by :func:`register`, run by the elected worker like the alert service): one writer keeps
each aggregate's order without coordinating shards, and one exporter does thousands of events a
second (``opsboard bench --scenario event_export``), far above what one database's producers commit.
A second exporter for a moment (a leader hand-over) only re-sends what JetStream's duplicate window
drops.

**At least once, nothing lost.**  The position is kept in PostgreSQL, per event (``exported_at``,
migration 0071, set only after JetStream acknowledged the event), so a killed exporter, a restarted
NATS or a restarted PostgreSQL resumes at the first unacknowledged event; what was sent but not yet
marked is sent again with the same ``Nats-Msg-Id`` and dropped by the stream's duplicate window
(:data:`DUPLICATE_WINDOW`).  The outbox pruner keeps unexported events while any export runs.

**Order per aggregate.**  Events go in id order (the relay's order); a batch is sent in waves of
at most one event per aggregate, each wave pipelined and acknowledged before the next, so a failure
can never let a later event of an aggregate be stored before an earlier one.

**Nothing else slows down.**  nats-py runs on an asyncio loop in a thread of its own
(:class:`NatsLink`), which connects, reconnects and backs off (up to ``backoff_max``) in the
background; while it is not
connected :meth:`EventExporter.run_once` returns at once, and a pass exports for at most
``budget`` seconds, so the leader's other services keep their intervals.  An unreachable server is
one log line when the trouble starts and one when it ends; a bad URL stops start-up in
:mod:`opsboard.config`.

The lag (events not yet exported, and the oldest one's age) is :func:`opsboard.metrics.event_export_lag`: in ``/metrics``
(``opsboard_event_export_lag_events``/``_seconds``), on Queue health, and the alert rule
``event_export_lag``.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import psycopg

from .. import db
from ..config import Config, EventStreamSettings
from .publish import envelope

log = logging.getLogger("worker.event_export")

#: Seconds JetStream remembers a Nats-Msg-Id (the stream's duplicate window, when this module makes it):
#: a re-send after a killed exporter or a lost acknowledgement comes well inside it.
DUPLICATE_WINDOW = 600.0

_ENCODE = json.JSONEncoder(ensure_ascii=True, sort_keys=True, separators=(",", ":")).encode


def subject_for(prefix: str, tenant_slug: str, event_type: str) -> str:
    """``<prefix>.<tenant slug>.<event type>`` (a type's dots make more tokens: ``ticket.created``)."""
    return f"{prefix}.{tenant_slug}.{event_type}"


def message_body(event: dict) -> bytes:
    """The message of one event: the API's envelope (sorted keys, compact, as the API writes it) with
    the event's ``tenant`` (slug) and ``payload``."""
    out = envelope(event)
    out["tenant"] = event["tenant_slug"]
    out["payload"] = event["payload"]
    return _ENCODE(out).encode()


def server_of(url: str) -> str:
    """``host:port`` of a NATS URL, never its credentials (for logs and the state row)."""
    rest = url.partition("://")[2]
    return rest.rsplit("@", 1)[-1].split("/", 1)[0] or url


@dataclass(frozen=True)
class ExportConfig:
    """The exporter's settings; ``url`` empty: off."""

    url: str = ""
    stream: str = EventStreamSettings.name
    prefix: str = EventStreamSettings.subject_prefix
    #: Seconds between the leader's passes.
    interval: float = 0.2
    #: Events read and sent per round.
    batch: int = 1000
    #: Seconds one pass may export before it hands the leader back (more comes next pass).
    budget: float = 0.5
    #: Seconds JetStream may take to acknowledge a wave.
    ack_timeout: float = 2.0
    connect_timeout: float = 2.0
    #: Longest wait between connection attempts while NATS stays away.
    backoff_max: float = 30.0
    duplicate_window: float = DUPLICATE_WINDOW
    #: Seconds between heartbeats written to ``event_export_state`` while nothing is exported.
    heartbeat: float = 5.0

    @classmethod
    def from_config(cls, config: Config, **overrides) -> "ExportConfig":
        es = config.event_stream
        return cls(url=es.url, stream=es.name, prefix=es.subject_prefix, **overrides)


class ExportFailed(Exception):
    """A wave was not (entirely) acknowledged: NATS went away, or the stream refused."""


class NatsLink:
    """A NATS connection and its JetStream context on an asyncio loop in a daemon thread.

    :meth:`start` begins connecting in the background (with backoff while it fails); :attr:`ready`
    says whether a connection and the stream are there now; :meth:`publish` sends a batch and waits
    for its acknowledgements.  Callers in other threads never wait on a connection attempt.
    """

    def __init__(self, config: ExportConfig):
        self.config = config
        self.server = server_of(config.url)
        self.loop = asyncio.new_event_loop()
        self.nc = None
        self.js = None
        self.stream_ok = False
        self.error: str | None = None
        self._thread: threading.Thread | None = None
        self._trouble = False
        self._closing = False
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        nc = self.nc
        return nc is not None and nc.is_connected and self.stream_ok

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="event-export-nats", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Close the connection and stop the loop (tests; a worker's daemon thread ends with it)."""
        if self._thread is None:
            return
        self._closing = True
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)

    async def _close(self) -> None:
        self._task.cancel()
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._task = self.loop.create_task(self._keep_connected())
        self.loop.run_forever()

    def _say_trouble(self, what: str) -> None:
        self.error = what
        if not self._trouble:
            self._trouble = True
            log.warning("event export: %s; exporting resumes when it answers (events wait in the outbox)", what)
        else:
            log.debug("event export: %s", what)

    def _say_fine(self, what: str) -> None:
        self.error = None
        self._trouble = False
        log.info("event export: %s", what)

    async def _keep_connected(self) -> None:
        import nats
        from nats.js.api import StorageType, StreamConfig
        from nats.js.errors import NotFoundError

        async def error_cb(exc):  # nats-py's default logs a traceback per attempt
            log.debug("event export: NATS %s: %s", type(exc).__name__, exc)

        async def disconnected_cb():
            self.stream_ok = False
            if not self._closing:
                self._say_trouble(f"lost NATS at {self.server}")

        delay = 0.5
        while True:
            try:
                if self.nc is not None and (self.nc.is_closed or not self.nc.is_connected):
                    # nats-py's own reconnection is off: this loop reconnects, with its backoff, and a
                    # pending publish fails at once instead of waiting in a buffer for the server.
                    try:
                        await self.nc.close()
                    except Exception:
                        pass
                    self.nc = self.js = None
                    self.stream_ok = False
                if self.nc is None:
                    # One try per round (max_reconnect_attempts=1: nats-py would otherwise retry forever
                    # inside connect(), silently).
                    self.nc = await nats.connect(
                        self.config.url, connect_timeout=self.config.connect_timeout, allow_reconnect=False,
                        max_reconnect_attempts=1, reconnect_time_wait=0.1, name="opsboard-event-export",
                        error_cb=error_cb, disconnected_cb=disconnected_cb)
                    self.js = self.nc.jetstream(timeout=self.config.ack_timeout)
                if not self.stream_ok:
                    try:
                        await self.js.stream_info(self.config.stream)
                    except NotFoundError:
                        await self.js.add_stream(StreamConfig(
                            name=self.config.stream, subjects=[f"{self.config.prefix}.>"],
                            storage=StorageType.FILE, duplicate_window=self.config.duplicate_window))
                        log.info("event export: made stream %s over %s.> (duplicate window %d s)",
                                 self.config.stream, self.config.prefix, self.config.duplicate_window)
                    self.stream_ok = True
                    delay = 0.5
                    self._say_fine(f"exporting to stream {self.config.stream} at NATS {self.server}")
            except Exception as exc:  # unreachable, refused, no JetStream: one line, then back off
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                self._say_trouble(f"cannot reach NATS JetStream at {self.server} "
                                  f"({type(exc).__name__}{': ' + reason[:200] if reason else ''})")
                self.stream_ok = False
                delay = min(self.config.backoff_max, delay * 2)
                await asyncio.sleep(delay)
                continue
            await asyncio.sleep(0.1)

    def publish(self, events: list[dict]) -> tuple[list, int, BaseException | None]:
        """Send ``events`` (in id order) and wait for JetStream; returns the ids acknowledged, how many
        of them were duplicates, and the error that stopped the batch (None: all acknowledged)."""
        timeout = self.config.ack_timeout * (1 + len(events) / 200) + 1
        try:
            return asyncio.run_coroutine_threadsafe(self._publish(events), self.loop).result(timeout)
        except Exception as exc:  # the loop's own timeout: report nothing acknowledged
            return [], 0, exc

    async def _publish(self, events: list[dict]):
        js, cfg = self.js, self.config
        acked: list = []
        duplicates = 0
        i = 0
        while i < len(events):
            # A wave: at most one event per aggregate, so that no later event of an aggregate is in
            # flight with an earlier one (a lost earlier one must not be overtaken).
            wave, seen = [], set()
            while i < len(events):
                e = events[i]
                key = (e["tenant_id"], e["aggregate_type"], e["aggregate_id"])
                if key in seen:
                    break
                seen.add(key)
                wave.append(e)
                i += 1
            try:
                futures = [await js.publish_async(subject_for(cfg.prefix, e["tenant_slug"], e["type"]),
                                                  message_body(e), wait_stall=cfg.ack_timeout,
                                                  stream=cfg.stream, headers={"Nats-Msg-Id": str(e["id"])})
                           for e in wave]
            except Exception as exc:
                return acked, duplicates, exc
            results = await asyncio.gather(*(asyncio.wait_for(f, cfg.ack_timeout) for f in futures),
                                           return_exceptions=True)
            failed = None
            for e, res in zip(wave, results):
                if isinstance(res, BaseException):
                    failed = failed or res
                else:
                    acked.append(e["id"])
                    duplicates += bool(res.duplicate)
            if failed is not None:
                if "stream" in str(failed).lower():
                    self.stream_ok = False
                return acked, duplicates, failed
        return acked, duplicates, None


class EventExporter:
    """The leader's export service (``catalogue.services["event_export"]``): each pass sends the
    unexported events to JetStream for at most ``budget`` seconds and marks what was acknowledged.
    Off (a pass does nothing) while ``OPSBOARD_EVENT_STREAM_URL`` is unset."""

    name = "event_export"
    quiet = True  # passes come every 0.2 s while events flow: their counts go to DEBUG

    def __init__(self, config: ExportConfig = ExportConfig(), link: NatsLink | None = None):
        self.config = config
        self.interval = config.interval if config.url else 3600.0
        self.link = link if link is not None or not config.url else NatsLink(config)
        self._beat = 0.0
        self._said: tuple | None = None
        self._failing = False

    @property
    def enabled(self) -> bool:
        return bool(self.config.url)

    def run_once(self, conn: psycopg.Connection, now: datetime | None = None) -> int:
        """Export what is waiting, for at most ``budget`` seconds; returns the events marked exported."""
        if not self.enabled:
            return 0
        self.link.start()
        state = (self.link.ready, self.link.error)
        mono = time.monotonic()
        if state != self._said or mono - self._beat >= self.config.heartbeat:
            with conn.transaction():
                db.execute(conn, "event_export_state_touch", {
                    "stream": self.config.stream, "prefix": self.config.prefix, "server": self.link.server,
                    "connected": state[0], "error": state[1], "now": now})
            self._said, self._beat = state, mono
        if not self.link.ready:
            return 0
        total, deadline = 0, mono + self.config.budget
        while True:
            with conn.transaction():
                events = db.all_rows(conn, "event_export_batch", {"limit": self.config.batch})
            if not events:
                break
            acked, duplicates, error = self.link.publish(events)
            if acked:
                with conn.transaction():
                    total += db.one(conn, "event_export_mark", {
                        "ids": acked, "duplicates": duplicates, "stream": self.config.stream, "now": now})["marked"]
                self._beat = time.monotonic()
            if error is not None:
                if not self._failing:
                    self._failing = True
                    log.warning("event export: JetStream did not acknowledge (%s: %s); backing off",
                                type(error).__name__, str(error)[:200] or "timeout")
                with conn.transaction():
                    db.execute(conn, "event_export_state_touch", {
                        "stream": self.config.stream, "prefix": self.config.prefix, "server": self.link.server,
                        "connected": self.link.ready, "error": f"{type(error).__name__}: {str(error)[:200]}",
                        "now": now})
                self._said = None
                break
            if self._failing:
                self._failing = False
                log.info("event export: JetStream acknowledges again")
            if len(events) < self.config.batch or time.monotonic() >= deadline:
                break
        return total


def register(cat) -> None:
    """The outbox feature's export service (leader-only; idle unless ``OPSBOARD_EVENT_STREAM_URL`` is set)."""
    cat.services["event_export"] = lambda config: EventExporter(ExportConfig.from_config(config))
