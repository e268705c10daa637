"""The worker process: :class:`Worker` composes one module per concern.

Threads, all daemon, in one process:

* one **fetcher** per queue (:mod:`worker.fetcher`) claims jobs in one short
  transaction, for the free slots and a bounded prefetch buffer, and hands
  them to that queue's slots;
* **slots** (:mod:`worker.executor`, ``N`` threads per queue) run handlers,
  each given a :class:`~worker.context.JobContext`;
* the **completer** (:mod:`worker.completer`) writes outcomes in batches and
  flushes per-minute stats; its input queue is bounded, so a slow database
  holds the slots back;
* the **hub** (:class:`opsboard.pgnotify.Hub`, made by :func:`worker.listener.make_hub`)
  is the process's one LISTEN connection: through it the **listener**
  (:mod:`worker.listener`) wakes the fetcher of the queue named in a
  notification on ``opsboard_jobs`` and the relay wakes on ``opsboard_outbox``;
  fetchers and the relay also poll;
* the **keeper** (:mod:`worker.keeper`) enforces handler timeouts, heartbeats
  the leases of long-running jobs and refreshes this worker's row;
* the **leader** (:mod:`worker.leader`) holds an advisory lock and runs the
  maintenance services while it does, each isolated from the others.

Shutdown (SIGTERM or SIGINT): stop claiming, give running handlers the grace
period, then release what is still running back to ``pending`` without
counting the attempt.  A second signal exits at once; leases cover the rest.
"""
from __future__ import annotations

import logging
import os
import queue as queue_mod
import random
import signal
import socket
import threading
import time
import uuid

import psycopg
from psycopg_pool import PoolTimeout
from psycopg.types.json import Jsonb

import opsboard
from opsboard import db, jobtypes, worker_commands
from opsboard.catalogue import Catalogue, activate
from opsboard.config import QUEUE_SLOTS_MAX, Config
from opsboard.features import build_catalogue
from opsboard.db import connect

from .commands import CommandWatcher
from .completer import Completer
from .executor import Executor, Running, RunningJobs
from .fetcher import Fetcher, HoldsCache, QueueState
from .keeper import Keeper
from .leader import Leader
from .listener import Listener, make_hub
from .parts import Lifecycle, OutageLog
from .running_file import RunningFile
from .services import relay

log = logging.getLogger("worker")


class Worker:
    """One worker process: ``start()`` its threads, ``run()`` until a signal, ``shutdown()``.

    It builds the parts and hands each exactly its collaborators (see :mod:`worker.parts`);
    none of them sees the ``Worker``.
    """

    def __init__(self, config: Config, url: str, *, queues: dict[str, int] | None = None,
                 worker_id: str | None = None, run_services: bool = True, running_file: str | None = None,
                 catalogue: Catalogue | None = None, direct_url: str | None = None):
        self.config = config
        #: What this worker can run (the active catalogue of the process from ``start()`` on).
        self.catalogue = catalogue if catalogue is not None else build_catalogue(config)
        self.url = url
        #: What ``url`` goes through (``OPSBOARD_DATABASE_POOLER``): the pools' settings follow it.
        self.pooler = config.database_pooler
        #: Past any pooler: the LISTEN connection and the leader's session advisory lock.
        self.direct_url = direct_url or config.direct_database_url or url
        self.queues = {name: QueueState(name, n) for name, n in (queues or config.worker_queues).items()}
        #: The slots this worker was started with, per queue (an operator's live change overrides them).
        self.configured_slots = {name: qs.slots for name, qs in self.queues.items()}
        self._slots_lock = threading.Lock()
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease = float(config.lease_seconds)
        self.run_services = run_services
        # Two pools.  The worker's own work (claims, outcomes, heartbeats,
        # services) has connections handlers can never take; handlers draw
        # from theirs, each job at most HANDLER_CONNECTIONS_PER_SLOT at a time.
        self.pool = db.make_pool(url, min_size=min(4, len(self.queues) + 2), max_size=len(self.queues) + 5,
                                 name=f"worker-{self.id}", timeout=5, pooler=self.pooler, configure=db.fast_jsonb)
        handler_max = min(64, sum(q.slots + q.abandoned_max for q in self.queues.values()))
        self.handler_pool = db.make_pool(url, min_size=1, max_size=max(2, handler_max),
                                         name=f"handlers-{self.id}", timeout=10, pooler=self.pooler)
        #: Under a supervisor: the file that tells it which jobs the slots run (see worker.running_file).
        # Room for the most slots an operator may set live (issue 28): a record is 16 bytes.
        self.running_file = RunningFile(running_file, sum(max(q.slots, QUEUE_SLOTS_MAX) + q.abandoned_max
                                                          for q in self.queues.values()) + 16) if running_file else None
        self.lifecycle = Lifecycle()
        self.stopping = self.lifecycle.stopping
        self.stopped = self.lifecycle.stopped
        #: The database's health as this process sees it (one log line per outage, the retries' backoff).
        self.outages = OutageLog((self.pool, self.handler_pool))
        #: The jobs the slots run now.
        self.running = RunningJobs()
        self.fatal: BaseException | None = None
        #: Maintenance services the leader runs; ``None`` means the defaults from the config.
        self.services: list | None = None
        #: The holds in force (issue 28), re-read on notification and every second.
        self.holds = HoldsCache()
        self.completer = Completer(self.pool, queues=self.queues, lifecycle=self.lifecycle, outages=self.outages,
                                   worker_id=self.id)
        self.executor = Executor(self.completer, self.holds, self.handler_pool, worker_id=self.id,
                                 lease=self.lease, settings=config.providers,
                                 transaction_pooler=self.pooler == db.TRANSACTION_POOLER, running=self.running,
                                 running_file=self.running_file, stopping=self.stopping,
                                 result_max_bytes=config.job_result_max_bytes)
        self.keeper = Keeper(self.executor, self.running, self.queues, pool=self.pool, lifecycle=self.lifecycle,
                             outages=self.outages, is_leader=lambda: self.is_leader, worker_id=self.id,
                             lease=self.lease)
        self.listener = Listener(self.queues, self.holds)
        #: The operator's asks on the Workers page (issue 44): quiet, stop, this worker's slots.
        self.slot_overrides: dict[str, int] = {}
        self._stop_command = False
        self.commands = CommandWatcher(pool=self.pool, lifecycle=self.lifecycle, outages=self.outages,
                                       request_stop=self._command_stop, apply_slots=self._command_slots,
                                       worker_id=self.id, wake_fetchers=self.listener.wake_all)
        #: The process's one LISTEN connection (started by :meth:`start`).
        self.hub = make_hub(self.direct_url, self.outages)
        self.leader: Leader | None = None
        self._signals = 0
        #: The signal that asked this worker to stop, noted by the handler (see install_signals).
        self._signal: int | None = None
        self._threads: list[threading.Thread] = []
        #: Wait for an unreachable database at start (with backoff); ``False``
        #: exits at once instead, for supervisors that prefer to restart.
        self.wait_for_database = True

    @property
    def stats(self):
        """Per-minute counters not yet flushed (see :class:`worker.completer.Stats`)."""
        return self.completer.stats

    @property
    def is_leader(self) -> bool:
        """This worker holds the leader's lock (and runs the maintenance services)."""
        return self.leader is not None and self.leader.is_leader

    @property
    def shutdown_deadline(self) -> float | None:
        """``time.monotonic()`` by which shutdown must be done (set by :meth:`shutdown`)."""
        return self.lifecycle.shutdown_deadline

    # ------------------------------------------------------------ lifecycle

    def start(self) -> "Worker":
        """Register this worker and start its threads; returns at once."""
        activate(self.catalogue)
        # Every handler resolved now: a type this worker may claim but cannot run stops the start
        # (ConfigError: one line, exit status 2), not each of its jobs later.
        jobtypes.resolve_handlers(self.catalogue)
        self.executor.limited_types = frozenset(
            t for q in self.queues for t in jobtypes.concurrency_limits(q).types)
        # The pool's own per-attempt warnings would say the same thing many
        # times a second during an outage: the worker logs one line instead.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        if not self._wait_for_database() or not self._wait_for_schema():
            return self
        self.pool.open(wait=True, timeout=30)
        self.handler_pool.open(wait=False)
        if not self._register():
            return self
        for qs in self.queues.values():
            for _ in range(qs.slots):
                self.executor.spawn_slot(qs)
            fetcher = Fetcher(qs, self.executor, pool=self.pool, holds=self.holds,
                              keeping_up=self.completer.keeping_up, apply_slots=self.apply_slots,
                              outages=self.outages, stopping=self.stopping, worker_id=self.id, lease=self.lease,
                              poll_interval=self.config.poll_interval, quiet=self.lifecycle.quiet)
            self._thread(fetcher.run, f"fetch-{qs.name}")
        self._thread(self.completer.run, "completer")
        self._thread(self.keeper.run, "keeper")
        # Every subscriber registers before the hub starts: its first LISTEN takes all channels.
        self.listener.subscribe(self.hub)
        self.commands.subscribe(self.hub)
        self._thread(self.commands.run, "commands")
        self._threads.append(relay.start(self.hub, self.pool, self.stopping, self.config.poll_interval))
        self.hub.start()
        if self.run_services:
            if self.services is None:
                from .services import default_services
                self.services = default_services(self.config, self.catalogue)
            self.leader = Leader(self.services, pool=self.pool, direct_url=self.direct_url, stopping=self.stopping,
                                 outages=self.outages)
            self._thread(self.leader.run, "leader")
        log.info("worker started", extra={"worker_id": self.id})
        log.info("queues: %s", ", ".join(f"{q.name}={q.slots}" for q in self.queues.values()))
        return self

    def _run_start_hooks(self, conn) -> None:
        """The features' start hooks (``catalogue.start_hooks``: publishing the shipped templates a
        deployment that skipped ``opsboard migrate``'s seeding misses); one that fails is logged."""
        for name, hook in self.catalogue.start_hooks.items():
            try:
                hook(conn)
            except psycopg.Error as exc:
                log.warning("start hook %s failed: %s", name,
                            str(exc).strip().splitlines()[0] if str(exc) else exc)

    def _register(self) -> bool:
        """Announce this worker (route, live slots, presence row, start hooks); ``False`` if stopped.

        A database that cannot take the write now (read-only after a failover, a held lock: see
        :func:`opsboard.db.unavailable`) is waited out like any outage, one line when it begins and
        one when it ends, never a traceback that ends the process.
        """
        failures = 0
        while True:
            try:
                with self.pool.connection() as conn:
                    db.announce_route(conn, self.pooler, self.direct_url, "worker")
                    db.check_app_role(conn, self.config.mode, "the worker")
                    # An operator's live slot change (issue 28) binds a worker started later too:
                    # read before the first slot starts.
                    self._resize_to(self.holds.get(conn), spawn=False)
                    db.execute(conn, "worker_upsert", {
                        "id": self.id, "hostname": socket.gethostname(), "pid": os.getpid(),
                        "queues": Jsonb({q.name: q.slots for q in self.queues.values()}),
                        "version": opsboard.__version__})
                    self._run_start_hooks(conn)
                self.outages.ok()
                return True
            except (psycopg.Error, PoolTimeout) as exc:
                if not db.unavailable(exc):
                    raise
                self.outages.trouble(exc, "registering the worker")
                failures += 1
                if self._pause(self.outages.retry_delay(failures)):
                    return False

    def _wait_for_database(self) -> bool:
        """Block until the database answers; ``False`` if stopped meanwhile.

        With :attr:`wait_for_database` off, an unreachable database raises
        :class:`~opsboard.db.DatabaseUnavailable` at once (one clear line).
        """
        failures, since = 0, time.monotonic()
        while True:
            try:
                connect(self.url, pooler=self.pooler).close()
                if failures:
                    log.warning("database is back after %.1f s; starting", time.monotonic() - since)
                return True
            except db.DatabaseUnavailable as exc:
                if not self.wait_for_database:
                    raise
                if not failures:
                    log.warning("%s; waiting for it (SIGTERM to give up)", exc)
                failures += 1
                if self._pause(min(5.0, 0.2 * 2 ** min(failures, 5)) * random.uniform(0.5, 1.0)):
                    return False

    def _wait_for_schema(self) -> bool:
        """Block until every migration this release ships is applied; ``False`` if stopped meanwhile.

        A worker of a newer release started before ``opsboard migrate`` (a rolling upgrade that
        migrates as it rolls) would otherwise fail on a table or column its code needs; it waits
        instead, holding nothing, and starts when the migrations land.  A database that is ahead
        (migrations this release does not know) is fine: migrations only expand until a later
        release contracts.  With :attr:`wait_for_database` off it raises at once (one clear line).
        """
        from opsboard import migrate

        logged = False
        while True:
            try:
                with connect(self.url, pooler=self.pooler) as conn:
                    pending = migrate.status(conn).pending
            except (db.DatabaseUnavailable, psycopg.Error):
                pending = None  # gone again: ask again shortly
            if pending == []:
                if logged:
                    log.warning("the migrations are applied; starting")
                return True
            if pending:
                names = ", ".join(m.path.name for m in pending[:3]) + (" ..." if len(pending) > 3 else "")
                message = (f"the database lacks {len(pending)} migration(s) this release needs ({names}): "
                           "run `opsboard migrate`")
                if not self.wait_for_database:
                    raise db.DatabaseUnavailable(message)
                if not logged:
                    log.warning("%s; waiting for them (SIGTERM to give up)", message)
                    logged = True
            if self._pause(1.0):
                return False

    def _pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; ``True`` as soon as the worker is stopping (or a signal asked it to).

        Used where the main thread waits: it sleeps and reads flags, and never waits on a
        lock that the signal handler could need (see :meth:`install_signals`).
        """
        deadline = time.monotonic() + seconds
        while not self._stop_requested():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(0.1, left))
        return True

    def _stop_requested(self) -> bool:
        """Whether to stop; a signal noted by the handler, or a stop asked on the Workers page, is
        acted on here (the main thread), outside the handler."""
        signum = self._signal
        if signum is not None and not self.stopping.is_set():
            log.info("signal %s: stopping (grace %ss)", signal.Signals(signum).name,
                     self.config.shutdown_grace_seconds)
            self.stop()
        elif self._stop_command and not self.stopping.is_set():
            log.info("stop asked on the Workers page: stopping (grace %ss)", self.config.shutdown_grace_seconds)
            self.stop()
        return self.stopping.is_set()

    def _command_stop(self) -> None:
        """A stop asked on the Workers page: noted, then acted on by the main thread as a SIGTERM."""
        self._stop_command = True

    def _command_slots(self, overrides: dict[str, int]) -> None:
        """This worker's slots set on the Workers page: applied now (the holds as last read)."""
        self.slot_overrides = {q: n for q, n in overrides.items() if q in self.queues}
        holds = self.holds.fresh()
        if holds is None:
            with self.pool.connection(timeout=2.0) as conn:
                holds = self.holds.get(conn)
        self.apply_slots(holds)

    def _thread(self, target, name, *args) -> threading.Thread:
        t = threading.Thread(target=self._guard, args=(target, name) + args, name=name, daemon=True)
        self._threads.append(t)
        t.start()
        return t

    def _guard(self, target, name, *args):
        try:
            target(*args)
        except Exception as exc:  # a dead loop must stop the worker loudly
            log.exception("worker thread %s died", name)
            self.fatal = exc
            self.stopping.set()

    def install_signals(self) -> None:
        """SIGTERM or SIGINT stops the worker (within its grace); a second one exits at once.

        The handler only notes the signal: the main thread acts on it (logs, :meth:`stop`)
        within a tenth of a second.  Python runs a handler in the main thread between two
        bytecodes, and that thread may be inside ``Event.wait`` holding the event's lock;
        the handler used to call ``stopping.set()``, which waited for that same lock forever.
        The window is a few bytecodes wide, but right after SIGCONT (a worker paused past
        its lease) every thread wakes at once and the main thread gives up the interpreter
        in it: an outside chaos run saw "signal SIGTERM: stopping" and the worker still
        running well past its grace, now and then (issue 29).
        """
        def handler(signum, frame):
            self._signals += 1
            if self._signals > 1:
                try:
                    os.write(2, b"second signal: exiting now; leases will recover running jobs\n")
                finally:
                    os._exit(130)
            self._signal = signum

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> int:
        """Start, serve until a signal (or a fatal error), shut down; returns the exit status."""
        self.start()
        if not self._threads:  # stopped while waiting for the database
            log.info("stopped before the database came back")
            return 0
        while not self._pause(0.5):
            pass
        return self.shutdown()

    def stop(self) -> None:
        """Ask every loop to stop (non-blocking); :meth:`shutdown` does the rest."""
        self.stopping.set()
        for qs in self.queues.values():
            qs.wake.set()
            qs.slot_freed.set()

    def shutdown(self) -> int:
        """Graceful stop within the configured grace, even while the database is away.

        Release unstarted jobs, wait for running ones, release the rest; what
        cannot be written before the grace ends stays for the lease reaper.
        """
        self.stop()
        grace = float(self.config.shutdown_grace_seconds)
        started = time.monotonic()
        # Not waited for here: the hub's thread ends within its poll (half a second); stopping it
        # wakes its waiters (the relay) so that they see the stop.
        self.hub.stop(timeout=0)
        self.lifecycle.shutdown_deadline = started + grace
        # Closing the pools and the last row take up to about a second: keep it for them.
        work_deadline = started + max(0.0, grace - min(1.5, grace / 3))
        left = lambda: max(0.0, work_deadline - time.monotonic())  # noqa: E731
        try:
            self.keeper.set_state("stopping", timeout=min(1.0, left()) or 0.1)
        except psycopg.Error:
            pass
        # No claim may be in flight once we start counting what to release.
        for t in self._threads:
            if t.name.startswith("fetch-"):
                t.join(timeout=left())
        # Jobs claimed but not started go back at once.
        for qs in self.queues.values():
            while True:
                try:
                    item = qs.work.get_nowait()
                except queue_mod.Empty:
                    break
                if item is not None:
                    self.executor.release(item, "shutdown", block=False)
                    with qs.lock:
                        qs.in_flight -= 1
        # Wait for every claimed job to be given back by its slot (finished, or
        # released by a slot that saw the stop), up to the grace period.
        while time.monotonic() < work_deadline:
            if all(qs.in_flight <= 0 for qs in self.queues.values()):
                break
            time.sleep(0.05)
        leftovers = [r for r in self.running_jobs() if not r.done and not r.abandoned]
        for r in leftovers:
            r.abandoned = True
            if r.ctx:
                r.ctx.cancelled.set()
            self.executor.release(r, "shutdown_grace_exceeded", block=False)
        if leftovers:
            log.warning("released %d job(s) still running after the grace period", len(leftovers))
        for qs in self.queues.values():
            for _ in qs.threads:
                qs.work.put(None)
        self.stopped.set()
        # The outcomes (the releases just queued above all) come before the worker's row and the
        # pools: the completer may use what is left of the whole grace, not only of the work part
        # (with a short grace, left() is already 0 here and the releases were dropped under load).
        outcomes_deadline = max(work_deadline, self.shutdown_deadline - 0.1)
        if not self.completer.done.wait(timeout=max(0.0, outcomes_deadline - time.monotonic())) and \
                (pending := self.completer.outcomes.qsize() + self.completer.writing):
            log.warning("could not record %d outcome(s) before the grace ended (database away?): "
                        "those jobs stay running until the lease reaper recovers them", pending)
        try:
            with self.pool.connection(timeout=min(0.5, max(0.1, self.shutdown_deadline - time.monotonic()))) as conn:
                db.execute(conn, "worker_delete", {"id": self.id})
                worker_commands.forget(conn, self.id)
        except Exception:
            pass
        for pool in (self.pool, self.handler_pool):
            pool.close(timeout=0.3)
        self.hub.stop(timeout=min(0.5, max(0.0, self.shutdown_deadline - time.monotonic())))
        log.info("worker stopped", extra={"worker_id": self.id})
        return 1 if self.fatal else 0

    # ------------------------------------------------------------ live slots (issue 28)

    def apply_slots(self, holds) -> None:
        """Grow or shrink each queue's slot threads to the slots an operator set live
        (:meth:`opsboard.pauses.Holds.queue_slots`; none: this worker's configuration).
        Called by the fetchers with every read of the holds; cheap when nothing changed."""
        if any(self._wanted_slots(holds, n) != qs.slots for n, qs in self.queues.items()):
            changed = self._resize_to(holds, spawn=True)
            if changed:
                try:
                    with self.pool.connection(timeout=1.0) as conn:
                        db.execute(conn, "worker_set_queues", {
                            "id": self.id, "queues": Jsonb({q.name: q.slots for q in self.queues.values()})})
                except psycopg.Error as exc:
                    self.outages.trouble(exc, "worker row")

    def _wanted_slots(self, holds, name: str) -> int:
        """A queue's slots: this worker's own set on the Workers page, else the queue's set live
        for every worker, else this worker's configuration."""
        return self.slot_overrides.get(name) or holds.queue_slots(name) or self.configured_slots[name]

    def _resize_to(self, holds, *, spawn: bool) -> dict[str, tuple[int, int]]:
        """Set each queue's slots to its live value; with ``spawn``, start or retire slot threads
        (a retired thread ends when it takes the ``None`` put behind the jobs already buffered).
        Returns ``{queue: (old, new)}`` of the queues changed."""
        changed: dict[str, tuple[int, int]] = {}
        with self._slots_lock:
            for name, qs in self.queues.items():
                want = self._wanted_slots(holds, name)
                with qs.lock:
                    old = qs.slots
                    if want == old:
                        continue
                    qs.slots = want
                changed[name] = (old, want)
                if spawn and not self.stopping.is_set():
                    for _ in range(want - old):
                        self.executor.spawn_slot(qs)
                    for _ in range(old - want):
                        qs.work.put(None)
            if changed:
                handlers = min(64, sum(q.slots + q.abandoned_max for q in self.queues.values()))
                if handlers > self.handler_pool.max_size:
                    self.handler_pool.resize(self.handler_pool.min_size, handlers)
        for name, (old, new) in changed.items():
            log.info("queue %s: %d slot(s) instead of %d (set live by an operator)", name, new, old)
            self.queues[name].slot_freed.set()
        return changed

    # ------------------------------------------------------------ shared helpers

    def running_jobs(self) -> list[Running]:
        return self.running.list()
