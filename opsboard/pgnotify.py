"""One LISTEN connection per process, fanned out to many waiters.

A browser's SSE stream (or a worker thread) must never hold a database
connection while it waits: it registers a :class:`Waiter` with the process's
:class:`Hub` and blocks on it; the hub's single thread LISTENs on the
channels its waiters asked for and wakes the waiters whose key matches a
notification's payload (a payload of ``*`` wakes every waiter of the
channel).

A wake-up is a hint, not the data: the waiter re-reads its source of truth
(the inbox, the jobs table).  So the hub may lose nothing important when its
connection drops -- it reconnects with backoff and then wakes everyone, who
re-read.  Waiters count wake-ups (``generation``), so a notification that
arrives between two waits is not missed.

Usage::

    hub = Hub(database_url).start()
    with hub.waiter("opsboard_inbox", key=str(user_id)) as w:
        while True:
            ...read what is new...
            w.wait(timeout=15)          # True when woken, False on timeout
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
    """One registration: woken when its channel gets its key (or ``*``)."""

    def __init__(self, hub: "Hub", channel: str, key: str):
        self.hub, self.channel, self.key = hub, channel, key
        self._cond = threading.Condition()
        self._generation = 0
        self._seen = 0
        self.closed = False

    def _wake(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """Block until woken since the last call (True) or ``timeout`` seconds pass (False)."""
        with self._cond:
            if self._generation == self._seen:
                self._cond.wait_for(lambda: self._generation != self._seen or self.closed, timeout)
            woken = self._generation != self._seen
            self._seen = self._generation
            return woken

    def close(self) -> None:
        self.closed = True
        self.hub._remove(self)
        self._wake()

    def __enter__(self) -> "Waiter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Hub:
    """The process's single LISTEN connection and its waiters (thread-safe)."""

    def __init__(self, url: str, *, connect: Callable[[str], psycopg.Connection] | None = None,
                 poll: float = 1.0, name: str = "pgnotify"):
        self.url, self.poll, self.name = url, poll, name
        self._connect = connect or (lambda u: psycopg.connect(u, autocommit=True))
        self._lock = threading.Lock()
        self._waiters: dict[str, dict[str, set[Waiter]]] = {}
        self._listening: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = threading.Event()
        self.notifications = 0

    # ------------------------------------------------------------ waiters

    def waiter(self, channel: str, key: str = BROADCAST) -> Waiter:
        """Register a waiter for ``key`` on ``channel`` (starting the hub's thread if needed)."""
        if not _CHANNEL_RE.match(channel):
            raise ValueError(f"bad channel name {channel!r}")
        w = Waiter(self, channel, key)
        with self._lock:
            self._waiters.setdefault(channel, {}).setdefault(key, set()).add(w)
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
            w._wake()
        return len(targets)

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
        self._stop.set()
        self._wake_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                with self._connect(self.url) as conn:
                    self._listening = set()
                    self.connected.set()
                    self._wake_all()  # anything may have happened while we were away: re-read
                    backoff = 0.5
                    while not self._stop.is_set():
                        with self._lock:
                            wanted = set(self._waiters)
                        for ch in sorted(wanted - self._listening):
                            conn.execute(f'LISTEN "{ch}"')  # channel names are checked by waiter()
                            self._listening.add(ch)
                            self.dispatch(ch, BROADCAST)  # what they read before LISTEN took may be stale
                        for n in conn.notifies(timeout=self.poll):
                            self.notifications += 1
                            self.dispatch(n.channel, n.payload)
            except Exception as exc:  # noqa: BLE001  (the hub must outlive a database restart)
                self.connected.clear()
                log.warning("pgnotify hub lost its connection (%s); reconnecting", type(exc).__name__)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
