"""``python -m worker --processes N``: run N worker processes and restart any that dies.

A worker process can die under a handler (``os._exit``, a segfault in a C
extension, the OOM killer).  The supervisor notices at once, looks up from
the database which jobs the dead process held, and settles them instead of
waiting for their leases:

* the **suspect** (the job most likely to have killed it) gets a counted
  attempt with code ``crashed_worker``, and is ``dead`` after its max attempts;
* the **innocent** jobs running beside it are released without counting the
  attempt (code ``crash_suspect`` in their history);
* the jobs it had claimed but **not started** (the prefetch buffer, told
  apart by the slots' running file, :mod:`worker.running_file`) go back to
  ``pending`` at once, uncounted (code ``crash_unstarted``): they cannot have
  killed it.

A job is the suspect when it was the only one running, or when it alone has
the most earlier crashes and no other kind of end (see :meth:`Supervisor.suspects`).
With several jobs in a first crash, all are released uncounted; the poison
job is the one found in the next crash too.  Released running jobs are spread
out in time (``RELEASE_STAGGER``), so that the poison job does not run beside
the same neighbours again.  Without a readable running file every held job
counts as running (the older, slower settling).  The supervisor restarts the
process with backoff (0.5 s doubling to 30 s, reset after a minute of good
health) and forwards SIGTERM / SIGINT to its children.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

import psycopg

from opsboard import db, jobqueue, jobtypes, retry
from opsboard.config import Config

from .running_file import read_running

log = logging.getLogger("worker.supervisor")

RESTART_DELAY_FIRST = 0.5
RESTART_DELAY_MAX = 30.0
#: Jobs released after a crash start this many seconds apart (by rank; longer than
#: a restart takes), so that the poison job is not claimed again beside the same
#: neighbours.
RELEASE_STAGGER = 5.0
#: Jobs tied as suspects this many crashes in a row are all blamed.
TIE_BLAME_AFTER = 3
#: A child that ran this long is healthy again: its next restart is immediate-ish.
HEALTHY_AFTER = 60.0


class Child:
    def __init__(self, n: int):
        self.n, self.generation = n, 0
        self.proc: subprocess.Popen | None = None
        self.worker_id = ""
        self.started = 0.0
        self.delay = RESTART_DELAY_FIRST
        self.restart_at = 0.0


class Supervisor:
    def __init__(self, config: Config, url: str, processes: int, child_args: list[str], base_id: str | None = None):
        self.config, self.url = config, url
        self.children = [Child(n) for n in range(processes)]
        self.child_args = child_args
        self.base_id = base_id or f"{socket.gethostname()}:{os.getpid()}"
        self.stopping = False
        self.restarts = 0
        self.files = tempfile.TemporaryDirectory(prefix="opsboard-supervisor-")

    def running_path(self, worker_id: str) -> str:
        return os.path.join(self.files.name, worker_id.replace("/", "_") + ".running")

    def spawn(self, child: Child) -> None:
        child.generation += 1
        child.worker_id = f"{self.base_id}-{child.n}.{child.generation}"
        child.proc = subprocess.Popen([sys.executable, "-m", "worker", *self.child_args, "--id", child.worker_id,
                                       "--running-file", self.running_path(child.worker_id)])
        child.started = time.monotonic()
        log.info("started worker %s (pid %d)", child.worker_id, child.proc.pid)

    def run(self) -> int:
        def on_signal(signum, frame):
            if self.stopping:
                return
            self.stopping = True
            log.info("signal %s: stopping %d worker process(es)", signal.Signals(signum).name, len(self.children))
            for c in self.children:
                if c.proc is not None and c.proc.poll() is None:
                    c.proc.send_signal(signum)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        for c in self.children:
            self.spawn(c)
        while not self.stopping:
            now = time.monotonic()
            for c in self.children:
                if c.proc is None:
                    if now >= c.restart_at and not self.stopping:
                        self.spawn(c)
                    continue
                rc = c.proc.poll()
                if rc is None or self.stopping:
                    continue
                c.proc = None
                lived = now - c.started
                c.delay = RESTART_DELAY_FIRST if lived > HEALTHY_AFTER else min(RESTART_DELAY_MAX, c.delay * 2)
                how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
                try:
                    self.settle(c.worker_id, how)
                except psycopg.Error as exc:
                    log.warning("worker %s died (%s); its jobs are left to the lease reaper (%s)",
                                c.worker_id, how, type(exc).__name__)
                try:
                    os.unlink(self.running_path(c.worker_id))
                except OSError:
                    pass
                c.restart_at = now + c.delay
                self.restarts += 1
                log.warning("restarting worker %d in %.1f s", c.n, c.delay)
            time.sleep(0.1)
        deadline = time.monotonic() + self.config.shutdown_grace_seconds + 5
        for c in self.children:
            if c.proc is not None:
                try:
                    c.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.warning("worker %s outlived its grace: killing it", c.worker_id)
                    c.proc.kill()
                    c.proc.wait()
        self.files.cleanup()
        log.info("supervisor stopped")
        return 0

    @staticmethod
    def suspects(rows: list[dict]) -> list[dict]:
        """Which of a dead worker's jobs probably killed it.

        The only job running; else the one job with the most earlier crashes
        and no other kind of end.  A tie blames none (the released jobs are
        spread out in time, so they do not run side by side again) until it
        persists for :data:`TIE_BLAME_AFTER` crashes.
        """
        if len(rows) == 1:
            return rows
        cands = [r for r in rows if r["crashes"] > 0 and r["other_ends"] == 0]
        if not cands:
            return []
        top = max(r["crashes"] for r in cands)
        best = [r for r in cands if r["crashes"] == top]
        return best if len(best) == 1 or top >= TIE_BLAME_AFTER else []

    def settle(self, worker_id: str, how: str) -> list[dict]:
        """Settle the jobs a dead worker held (see the module docstring); returns them."""
        started = read_running(self.running_path(worker_id))
        with db.connect(self.url) as conn:
            rows = db.all_rows(conn, "job_running_by_worker", {"worker": worker_id})
            ran = rows if started is None else [r for r in rows if r["id"] in started]
            suspects = self.suspects(ran)
            records, now, rank = [], datetime.now(timezone.utc), 0
            for r in rows:
                if started is not None and r["id"] not in started:
                    records.append(jobqueue.OutcomeRecord(r["id"], r["attempts"], "released", r["started_at"] or now,
                                                       code="crash_unstarted"))
                elif r in suspects:
                    try:
                        policy = jobtypes.get(r["type"], r["version"]).policy
                    except jobtypes.UnknownJobType:
                        policy = jobtypes.JobPolicy()
                    d = retry.decide(retry.Unknown("crashed_worker", f"the worker process died ({how})"),
                                     r["attempts"], r["max_attempts"], policy.backoff_base, policy.backoff_cap, now=now)
                    records.append(jobqueue.OutcomeRecord(r["id"], r["attempts"], d.kind, r["started_at"] or now,
                                                       delay=d.delay, code="crashed_worker", detail=d.detail))
                else:
                    records.append(jobqueue.OutcomeRecord(r["id"], r["attempts"], "released", r["started_at"] or now,
                                                       delay=rank * RELEASE_STAGGER, code="crash_suspect"))
                    rank += 1
            applied = jobqueue.record_outcomes(conn, worker_id, records) if records else set()
            db.execute(conn, "worker_delete", {"id": worker_id})
        unstarted = sum(1 for rec in records if rec.code == "crash_unstarted" and rec.job_id in applied)
        if unstarted:
            log.warning("worker %s died (%s): released %d job(s) it had claimed but not started", worker_id, how,
                        unstarted)
        if len(ran) == 0:
            log.warning("worker %s died (%s) while running no job", worker_id, how)
        for r, rec in zip(rows, records):
            if rec.job_id not in applied:
                continue
            if rec.code == "crash_unstarted":
                continue
            if rec.kind == "released":
                log.warning("worker %s died (%s) while running job %s (%s); released it without counting "
                            "the attempt", worker_id, how, r["id"], r["type"], extra={"job_id": r["id"]})
            else:
                log.warning("worker %s died (%s) while running job %s (%s), the suspect: attempt %d of %d "
                            "recorded as crashed_worker (%s)", worker_id, how, r["id"], r["type"], r["attempts"],
                            r["max_attempts"], rec.kind, extra={"job_id": r["id"]})
        return rows


def supervise(config: Config, url: str, processes: int, child_args: list[str], base_id: str | None = None) -> int:
    """Run ``processes`` supervised worker processes until SIGTERM; returns the exit status."""
    from opsboard import catalogue
    from opsboard.features import build_catalogue
    catalogue.activate(build_catalogue(config))  # the policies of crashed jobs' types
    return Supervisor(config, url, processes, child_args, base_id).run()
