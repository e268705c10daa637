"""Shutdown after a pause (issue 29): SIGSTOP past the lease, SIGCONT, SIGTERM.

A worker frozen (a GC pause, a stopped VM, SIGSTOP) longer than its lease
wakes up with every running handler stale: its jobs were reaped and taken over,
each handler ends ``lease_lost_before_*`` and its outcomes are refused.  A
SIGTERM that lands right after the resume must still stop it within its grace.
In an outside chaos run one worker in eleven was still running 30 s after
"signal SIGTERM: stopping (grace 20s)".

This is a liveness check with a generous deadline (grace + 15 s), repeated
over several rounds with short leases and grace so that the timing windows
(a fetcher's claim, a completer's write, the relay, the listener, a heartbeat
caught mid-flight by the pause) are crossed differently each time.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

from opsboard import auth, jobqueue
from opsboard.config import ROOT
from opsboard.jobqueue import NewJob
from tests.conftest import connect, wait_for

ROUNDS = int(os.environ.get("OPSBOARD_TEST_PAUSE_ROUNDS", "6"))
LEASE = 2
GRACE = int(os.environ.get("OPSBOARD_TEST_PAUSE_GRACE", "2"))
#: Generous: a stuck thread shows as a process still running long after its grace.
MARGIN = 15


def test_sigterm_right_after_sigcont_stops_the_worker_within_its_grace(db_url, start_worker):
    rng = random.Random(29)
    env = {"OPSBOARD_LEASE_SECONDS": str(LEASE), "OPSBOARD_SHUTDOWN_GRACE_SECONDS": str(GRACE),
           "OPSBOARD_POLL_INTERVAL": "0.2"}
    with connect(db_url) as c:
        c.execute("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, "
                  "at timestamptz DEFAULT clock_timestamp())")
        t = auth.ensure_tenant(c, "acme")["id"]
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        # A live worker beside the paused one: it reaps the stale leases and takes the jobs over,
        # so that the resumed worker's handlers and outcomes are refused, as in the chaos run.
        live = start_worker(db_url, "--queues", "default=1", "--id", "live", **env)
        for r in range(ROUNDS):
            w = start_worker(db_url, "--queues", "default=6", "--id", f"paused-{r}", **env)
            wait_for(lambda: n("SELECT count(*) AS n FROM workers WHERE id = %s", f"paused-{r}"), timeout=60,
                     message="the worker to start")
            # Stale-to-be handlers (slow, guarded: they begin an effect after the pause) and a stream
            # of quick jobs, so that claims and outcome writes are in flight when the pause lands.
            jobqueue.enqueue_many(c, [NewJob("test.slow", {"key": f"s{r}-{i}", "ms": 4000}, t) for i in range(4)]
                                  + [NewJob("test.guarded", {"key": f"g{r}-{i}"}, t) for i in range(2)]
                                  + [NewJob(rng.choice(["test.hang", "test.slow_query"]), {}, t) for i in range(2)]
                                  + [NewJob("test.record", {"key": f"q{r}-{i}", "ms": 5}, t) for i in range(150)])
            wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE status = 'running' AND locked_by = %s "
                               "AND type <> 'test.record'", f"paused-{r}") >= 1, timeout=60,
                     message="the worker to run a slow job")
            time.sleep(rng.uniform(0.0, 0.5))
            w.send_signal(signal.SIGSTOP)
            try:
                time.sleep(LEASE + 2)  # past the lease: the live worker reaps and takes over
            finally:
                w.send_signal(signal.SIGCONT)
            time.sleep(rng.choice([0.0, 0.0, 0.05, 0.2, 0.5]))
            w.send_signal(signal.SIGTERM)
            try:
                code = w.wait(GRACE + MARGIN)
            except subprocess.TimeoutExpired:
                print(stacks(w.pid))
                raise AssertionError(f"round {r}: the worker was still running {GRACE + MARGIN} s after SIGTERM "
                                     f"(grace {GRACE} s); log: {w.log_path}") from None
            assert code == 0, w.log_path.read_text()[-3000:]
            assert "signal SIGTERM: stopping" in w.log_path.read_text()
        assert live.poll() is None
        live.send_signal(signal.SIGTERM)
        assert live.wait(GRACE + MARGIN) == 0


def stacks(pid: int) -> str:
    """The threads of a stuck worker, when py-spy is at hand (a diagnostic for the failure message)."""
    spy = shutil.which("py-spy") or ("/work/venv/bin/py-spy" if os.path.exists("/work/venv/bin/py-spy") else None)
    if spy is None:
        return "(py-spy not found: no stacks)"
    out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


#: A worker whose main thread holds its ``stopping`` event's lock, as it does for a few bytecodes
#: of every ``Event.wait``, when SIGTERM arrives: the handler runs right there, in that thread.
SIGNAL_IN_WAIT = """
import os, signal, sys
from opsboard.config import Config
from opsboard.logs import configure
from worker.runner import Worker

configure("text")
w = Worker(Config(mode="test"), "postgresql://127.0.0.1:9/none", queues={"default": 1}, worker_id="sig")
w.install_signals()
with w.stopping._cond:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10000):
        pass
print("handler returned", flush=True)
assert w._pause(5) and w.stopping.is_set()
print("stopping", flush=True)
"""


def test_the_signal_handler_takes_no_lock_the_main_thread_may_hold():
    """The cause of the stuck shutdown: the handler called ``stopping.set()``, which waits for the lock
    that ``stopping.wait()`` in the main thread holds between two bytecodes (a deadlock, for ever)."""
    try:
        out = subprocess.run([sys.executable, "-c", SIGNAL_IN_WAIT], cwd=ROOT, capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        raise AssertionError("the SIGTERM handler deadlocked on the lock its own thread held") from None
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["handler returned", "stopping"]
    assert "signal SIGTERM: stopping (grace 20s)" in out.stderr
