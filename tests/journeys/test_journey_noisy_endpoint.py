"""Journey (issue 50): one tenant's slow webhook endpoint never delays another tenant's, through gunicorn,
``python -m worker`` (8 default slots) and two receivers of the test's own on 127.0.0.1.

The noisy tenant's endpoint answers 200 after 3 s (more than half the journey's 5 s webhook timeout, and
never a failure: its breaker never opens).  Its events fill its limit per endpoint (4 in flight) and no
more; the healthy tenant's deliveries then arrive before any slow answer has freed a slot.  After its first
slow answers the slow endpoint is slowed down further: one delivery in flight at a time.  Without the
per-endpoint limit the slow deliveries take all 8 slots and the healthy ones wait for a slow answer.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opsboard import auth
from opsboard.deliveries import WEBHOOK_ENDPOINT_CONCURRENCY
from opsboard.deliveries.handlers import SLOW_ENDPOINT_CONCURRENCY
from tests.conftest import wait_for
from tests.journeys.helpers import api_key

SLOW_SECONDS = 3.0
NOISY_EVENTS = 2 * WEBHOOK_ENDPOINT_CONCURRENCY + 2   # more than the worker's 8 slots
HEALTHY_EVENTS = 3


class Receiver:
    """A webhook receiver on 127.0.0.1 that answers 200 after ``delay`` seconds and records, per request,
    its arrival and answer (monotonic) and how many requests were open when it arrived."""

    def __init__(self, delay: float):
        self.delay, self.lock = delay, threading.Lock()
        self.open, self.log = 0, []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.open += 1
                    entry = {"at": time.monotonic(), "open": receiver.open, "answered": None,
                             "event": json.loads(body)["data"].get("order_id")}
                    receiver.log.append(entry)
                time.sleep(receiver.delay)
                with receiver.lock:
                    receiver.open -= 1
                    entry["answered"] = time.monotonic()
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def records(self) -> list[dict]:
        with self.lock:
            return [dict(e) for e in self.log]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_slow_endpoint_holds_at_most_its_limit_and_the_healthy_tenant_never_waits(stack):
    slow, healthy = Receiver(SLOW_SECONDS), Receiver(0.0)
    try:
        with stack.db() as c:
            noisy_t = auth.ensure_tenant(c, "noisy")
            calm_t = auth.ensure_tenant(c, "calm")
            noisy_key, calm_key = api_key(c, noisy_t["id"]), api_key(c, calm_t["id"])
        stack.web()
        stack.worker("--queues", "critical=2,default=8,bulk=2")
        endpoints = {}
        for key, receiver, name in ((noisy_key, slow, "slow"), (calm_key, healthy, "healthy")):
            r = stack.api("POST", "/api/v1/webhooks", key, {"url": receiver.url, "event_types": ["order.paid"]},
                          headers={"Idempotency-Key": f"hook-{name}"})
            assert r.status == 201, r.body
            endpoints[name] = r.body["id"]

        def publish(key, n):
            r = stack.api("POST", "/api/v1/events", key,
                          {"type": "order.paid", "aggregate": {"type": "order", "id": str(uuid.uuid4())},
                           "payload": {"order_id": str(uuid.uuid4()), "amount_cents": n, "currency": "EUR"}})
            assert r.status == 202, r.body

        for n in range(NOISY_EVENTS):
            publish(noisy_key, n)
        # The slow endpoint fills its limit per endpoint, and no more, while 8 slots could take 8.
        wait_for(lambda: len(slow.records()) >= WEBHOOK_ENDPOINT_CONCURRENCY, timeout=30,
                 message="the slow endpoint's first deliveries")
        for n in range(HEALTHY_EVENTS):
            publish(calm_key, n)
        wait_for(lambda: len(healthy.records()) == HEALTHY_EVENTS, timeout=30, message="the healthy deliveries")
        first_slow_answer = min((e["answered"] for e in slow.records() if e["answered"]), default=None)
        # Every healthy delivery arrived before any slow answer freed a slot: none waited behind them.
        assert first_slow_answer is None or max(e["at"] for e in healthy.records()) < first_slow_answer, \
            (healthy.records(), slow.records())

        wait_for(lambda: len(slow.records()) == NOISY_EVENTS and all(e["answered"] for e in slow.records()),
                 timeout=120, interval=0.2, message="every slow delivery")
        recs = sorted(slow.records(), key=lambda e: e["at"])
        # The limit per endpoint held: never more than 4 open at once.
        assert max(e["open"] for e in recs) == WEBHOOK_ENDPOINT_CONCURRENCY, recs
        # Once its first answers came (each slower than half the timeout), the endpoint was slowed down:
        # the deliveries that started after the first wave ended ran one at a time.
        wave_end = max(e["answered"] for e in recs[:WEBHOOK_ENDPOINT_CONCURRENCY])
        later = [e for e in recs if e["at"] > wave_end]
        assert later and max(e["open"] for e in later) == SLOW_ENDPOINT_CONCURRENCY, recs

        with stack.db() as c:
            row = c.execute("SELECT max_running, reason FROM concurrency_key_limits WHERE key = %s",
                            (f"webhook:{endpoints['slow']}",)).fetchone()
            assert row["max_running"] == SLOW_ENDPOINT_CONCURRENCY and row["reason"].startswith("slow_answer:")
            # Every delivery succeeded once, each in one attempt: the limit delays, it never fails a job.
            counts = c.execute("SELECT status, count(*) AS n, max(attempts) AS a FROM jobs"
                               " WHERE type = 'webhook.deliver' GROUP BY status").fetchall()
            assert [(r["status"], r["n"], r["a"]) for r in counts] == [
                ("succeeded", NOISY_EVENTS + HEALTHY_EVENTS, 1)], counts
    finally:
        slow.close()
        healthy.close()
