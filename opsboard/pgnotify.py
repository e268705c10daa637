"""One LISTEN connection per process, fanned out to many waiters.

A browser's SSE stream (or a worker thread) must never hold a database
connection while it waits: it registers a :class:`Waiter` with the process's
:class:`Hub` and blocks on it; the hub's single thread LISTENs on the
channels its waiters asked for and wakes the waiters whose key matches a
notification's payload (a payload of ``*`` wakes every waiter of the
channel).

A wake-up is a hint, not the data: the waiter re-reads its source of truth
(the inbox, the jobs table).  So the hub may lose nothing important when its
connection drops -- it reconnects with backoff and, once it LISTENs again,
wakes every waiter of the channel (a *resync*), who re-read.  The same resync
follows the first LISTEN of a channel, so what a waiter read before LISTEN
took effect is looked at again.  Waiters count wake-ups (``generation``), so a
notification that arrives between two waits is not missed.

Waiters still poll (their ``wait`` has a timeout): the hub makes pick-up fast,
never necessary.

A waiter may instead (or as well) take a callback, ``on_wake``, run on the
hub's thread at each wake-up; it must be quick and must not block (the
worker's listener sets a fetcher's ``threading.Event``).  The worker gives the
hub its own backoff and outage reporting (``retry_delay``, ``on_connect``,
``on_error``), so one process has exactly one LISTEN connection, web or worker.

Usage::

    hub = Hub(database_url).start()
    with hub.waiter("opsboard_inbox", key=str(user_id)) as w:
        while True:
            ...read what is new...
            w.wait(timeout=15)          # True when woken, False on timeout

A channel that a waiter asks for while the hub already listens is LISTENed
at the hub's next turn (within ``poll`` seconds) and its waiters are then
resynced; register a process's fixed waiters with ``start=False`` before
:meth:`Hub.start` to have them all LISTENed by the first statement.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Callable

import psycopg

log = logging.getLogger("opsboard.pgnotify")

_CHANNEL_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
BROADCAST = "*"


class Waiter:
    """One registration: woken when its channel gets its key (or ``*``).

    After each :meth:`wait`, :attr:`notified` says whether a notification
    woke it and :attr:`resynced` whether the hub (re)started listening on its
    channel meanwhile (a notification may have been missed: re-read).
    """

    def __init__(self, hub: "Hub", channel: str, key: str, on_wake: Callable[[], None] | None = None):
        self.hub, self.channel, self.key = hub, channel, key
        self.on_wake = on_wake
        self._cond = threading.Condition()
        self._generation = self._seen = 0
        self._notifies = self._seen_notifies = 0
        self._resyncs = self._seen_resyncs = 0
        self.notified = self.resynced = False
        self.closed = False

    def _wake(self, kind: str | None = None) -> None:
        with self._cond:
            self._generation += 1
            if kind == "notify":
                self._notifies += 1
            elif kind == "resync":
                self._resyncs += 1
            self._cond.notify_all()
        if self.on_wake is not None:
            self.on_wake()

    def wait(self, timeout: float) -> bool:
        """Block until woken since the last call (True) or ``timeout`` seconds pass (False)."""
        with self._cond:
            if self._generation == self._seen:
                self._cond.wait_for(lambda: self._generation != self._seen or self.closed, timeout)
            woken = self._generation != self._seen
            self.notified = self._notifies != self._seen_notifies
            self.resynced = self._resyncs != self._seen_resyncs
            self._seen, self._seen_notifies, self._seen_resyncs = self._generation, self._notifies, self._resyncs
            return woken

    def close(self) -> None:
        self.closed = True
        self.hub._remove(self)
        self._wake()

    def __enter__(self) -> "Waiter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _default_retry_delay(failures: int) -> float:
    return min(10.0, 0.5 * 2 ** max(0, failures - 1))


def _default_connect(url: str) -> psycopg.Connection:
    # A short connect timeout: during an outage the hub probes the server, and
    # a probe must not hang for libpq's default (forever).
    return psycopg.connect(url, autocommit=True, connect_timeout=2)


class Hub:
    """The process's single LISTEN connection and its waiters (thread-safe).

    ``poll``: seconds between the hub's looks at its stop flag and at newly
    wanted channels.  ``retry_delay(failures)``: seconds to wait before the
    next connection attempt (default: 0.5 s doubling to 10 s).
    ``on_connect()`` runs each time the connection is (re)made and LISTENs;
    ``on_error(exc)`` each time it fails (the worker reports outages through
    these).  The hub logs one line when it loses its connection and one when
    it has it back, not one per attempt.
    """

    def __init__(self, url: str, *, connect: Callable[[str], psycopg.Connection] | None = None,
                 poll: float = 1.0, name: str = "pgnotify",
                 retry_delay: Callable[[int], float] | None = None,
                 on_connect: Callable[[], None] | None = None,
                 on_error: Callable[[BaseException], None] | None = None):
        self.url, self.poll, self.name = url, poll, name
        self._connect = connect or _default_connect
        self._retry_delay = retry_delay or _default_retry_delay
        self._on_connect, self._on_error = on_connect, on_error
        self._lock = threading.Lock()
        self._waiters: dict[str, dict[str, set[Waiter]]] = {}
        self._listening: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost_at: float | None = None
        self.connected = threading.Event()
        self.notifications = 0
        #: Times a connection was made and LISTENed (1 after the first).
        self.connections = 0

    # ------------------------------------------------------------ waiters

    def waiter(self, channel: str, key: str = BROADCAST, *, on_wake: Callable[[], None] | None = None,
               start: bool = True) -> Waiter:
        """Register a waiter for ``key`` on ``channel`` (starting the hub's thread unless ``start`` is false)."""
        if not _CHANNEL_RE.match(channel):
            raise ValueError(f"bad channel name {channel!r}")
        w = Waiter(self, channel, key, on_wake)
        with self._lock:
            self._waiters.setdefault(channel, {}).setdefault(key, set()).add(w)
        if start:
            self.start()
        return w

    def _remove(self, w: Waiter) -> None:
        with self._lock:
            keys = self._waiters.get(w.channel, {})
            group = keys.get(w.key)
            if group is not None:
                group.discard(w)
                if not group:
                    del keys[w.key]

    def count(self, channel: str | None = None, key: str | None = None) -> int:
        """Registered waiters (of a channel, of a key)."""
        with self._lock:
            chans = [self._waiters.get(channel, {})] if channel else list(self._waiters.values())
            return sum(len(g) for keys in chans for k, g in keys.items() if key is None or k == key)

    def dispatch(self, channel: str, payload: str) -> int:
        """Wake the waiters a notification concerns; returns how many."""
        with self._lock:
            keys = self._waiters.get(channel, {})
            targets = [w for g in keys.values() for w in g] if payload == BROADCAST else \
                list(keys.get(payload, ())) + list(keys.get(BROADCAST, ()))
        for w in targets:
            w._wake("notify")
        return len(targets)

    def _resync(self, channel: str) -> None:
        """Wake every waiter of ``channel``: the hub (re)started listening, so what they read may be stale."""
        with self._lock:
            targets = [w for g in self._waiters.get(channel, {}).values() for w in g]
        for w in targets:
            w._wake("resync")

    def _wake_all(self) -> None:
        with self._lock:
            targets = [w for keys in self._waiters.values() for g in keys.values() for w in g]
        for w in targets:
            w._wake()

    # ------------------------------------------------------------ the thread

    def start(self) -> "Hub":
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wake every waiter; waits up to ``timeout`` seconds for the thread
        (``0``: do not wait; it ends within ``poll`` seconds)."""
        self._stop.set()
        self._wake_all()
        if self._thread is not None and timeout > 0:
            self._thread.join(timeout)

    def _trouble(self, exc: BaseException) -> None:
        self.connected.clear()
        if self._lost_at is None:
            self._lost_at = time.monotonic()
            log.warning("pgnotify hub %s has no connection (%s); reconnecting", self.name, type(exc).__name__)
        if self._on_error is not None:
            try:
                self._on_error(exc)
            except Exception:  # noqa: BLE001  (a reporting hook must not stop the hub)
                log.exception("pgnotify hub %s: on_error failed", self.name)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                conn = self._connect(self.url)
            except Exception as exc:  # noqa: BLE001  (the hub must outlive a database restart)
                failures += 1
                self._trouble(exc)
                self._stop.wait(self._retry_delay(failures))
                continue
            try:
                with conn:
                    self._listen(conn)
            except Exception as exc:  # noqa: BLE001
                if self._stop.is_set():
                    break
                failures = 1
                self._trouble(exc)
                self._stop.wait(self._retry_delay(failures))
            else:
                failures = 0
        self.connected.clear()

    def _listen(self, conn: psycopg.Connection) -> None:
        """LISTEN on every wanted channel (and on each new one), dispatch notifications until stopped."""
        self._listening = set()
        first = True
        while not self._stop.is_set():
            with self._lock:
                wanted = set(self._waiters)
            new = sorted(wanted - self._listening)
            if new:
                # One statement for all of them (channel names are checked by waiter()).
                conn.execute("; ".join(f'LISTEN "{ch}"' for ch in new))
                self._listening.update(new)
            if first:
                first = False
                self.connections += 1
                if self._lost_at is not None:
                    log.warning("pgnotify hub %s has its connection back after %.1f s", self.name,
                                time.monotonic() - self._lost_at)
                    self._lost_at = None
                self.connected.set()
                if self._on_connect is not None:
                    self._on_connect()
            for ch in new:
                # Anything may have happened before LISTEN took (or while we were away): re-read.
                self._resync(ch)
            for n in conn.notifies(timeout=self.poll):
                self.notifications += 1
                self.dispatch(n.channel, n.payload)
