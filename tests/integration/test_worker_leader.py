"""The leader: one worker of several runs the services; a raising service stops nothing."""
import threading

from opsboard import auth, jobqueue, metrics
from opsboard.db import Database
from tests.conftest import connect, make_config, wait_for
from worker.runner import Worker


class Counting:
    """A service that records which worker ran it."""

    interval = 0.05

    def __init__(self, name: str, worker_id: str, runs: list):
        self.name, self.worker_id, self.runs = name, worker_id, runs

    def run_once(self, conn, now=None) -> int:
        conn.execute("SELECT 1")
        self.runs.append(self.worker_id)
        return 0


class Raising:
    name = "boom"
    interval = 0.05

    def __init__(self):
        self.calls = 0

    def run_once(self, conn, now=None) -> int:
        self.calls += 1
        raise ZeroDivisionError("a bug in a maintenance service")


def make_worker(db_url, worker_id, services):
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 2}, worker_id=worker_id)
    w.services = services
    return w


def test_only_the_leader_runs_services_and_another_takes_over(db_url):
    runs: list = []
    a = make_worker(db_url, "w-a", [Counting("count", "w-a", runs)]).start()
    wait_for(lambda: runs, timeout=20, message="the first worker to lead")
    b = make_worker(db_url, "w-b", [Counting("count", "w-b", runs)]).start()
    try:
        # b is up and trying (every 2 s) while a leads: only a runs services.
        wait_for(lambda: b.leader is not None and len(runs) > 20, timeout=20, message="services to run")
        seen = len(runs)
        assert set(runs) == {"w-a"} and a.is_leader and not b.is_leader
        a.stop()
        a.shutdown()  # closes a's lock connection: b takes over
        wait_for(lambda: "w-b" in runs[seen:], timeout=20, message="the second worker to take over")
        assert b.is_leader
        with connect(db_url) as c:
            wait_for(lambda: c.execute("SELECT is_leader FROM workers WHERE id = 'w-b'").fetchone()["is_leader"],
                     timeout=20, message="the workers page to show the new leader")
    finally:
        for w in (a, b):
            w.stop()
            w.shutdown()


def test_a_raising_service_is_counted_backed_off_and_stops_nothing(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
    runs: list = []
    boom = Raising()
    w = make_worker(db_url, "w-iso", [boom, Counting("count", "w-iso", runs)]).start()
    try:
        wait_for(lambda: boom.calls >= 3 and len(runs) >= 10, timeout=30, message="both services to run again")
        # Backed off: far fewer tries than the other service's runs at the same interval.
        assert boom.calls < len(runs)
        with connect(db_url) as c:
            # Claims go on.
            ids = jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(20)])
            wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'succeeded'",
                                       (ids,)).fetchone()["n"] == 20, timeout=30, message="jobs to succeed")
            errors = c.execute("SELECT errors FROM service_errors WHERE service = 'boom'").fetchone()["errors"]
        assert errors >= 3
        assert w.fatal is None and not w.stopping.is_set()
        assert {t.name for t in threading.enumerate()} >= {"leader", "fetch-default", "completer"}
        database = Database(db_url).open()
        try:
            text = metrics.prometheus_text(database).decode()
        finally:
            database.close()
        line = next(x for x in text.splitlines() if x.startswith('opsboard_service_errors_total{service="boom"}'))
        assert float(line.split()[-1]) >= 3
    finally:
        w.stop()
        w.shutdown()
