"""Traces across every hop (issue 46): W3C trace context from POST /api/v1/events, stored with the
event, copied by the relay to the webhook delivery job, continued by the worker's executor (a span
per attempt, one per provider call) and sent on to the receiver as ``traceparent``.

How the worker part runs here: the first journey runs the worker's own executor in this process
(``tests.support.delivery.Runner``: ``Executor.prepare`` and ``run_job``, the project's way of running
one job through the real worker code), so that its spans land in the SDK's InMemorySpanExporter
beside the web app's.  A separate ``python -m worker`` process cannot share that exporter: the
production path (OTLP/HTTP out of gunicorn and a real worker process) is checked apart, by a local
HTTP receiver that decodes what they export with opentelemetry-proto (the last test).
"""
from __future__ import annotations

import http.server
import signal
import threading
import uuid

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from opsboard import apikeys, audit, auth, jobqueue, outbox, tracing
from opsboard.db import Database
from opsboard.deliveries import webhooks
from tests.conftest import CATALOGUE, connect, make_config, wait_for
from tests.support.delivery import provider_settings, runner  # noqa: F401
from tests.integration.test_outbox import sql_routed  # noqa: F401
from tests.support.processes import stack  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401
from worker.services.relay import Relay

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
ORDER = {"type": "order.paid", "aggregate": {"type": "order", "id": "o-1"},
         "payload": {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}}


@pytest.fixture
def spans(monkeypatch):
    """Tracing on in this process, into the SDK's in-memory exporter; off again after the test."""
    monkeypatch.delenv(tracing.ENDPOINT_VAR, raising=False)
    mem = InMemorySpanExporter()
    assert tracing.setup("test", exporter=mem, simple=True)
    yield mem
    tracing.shutdown()


@pytest.fixture
def web(db_url):
    """The web app built after the test's tracing set-up (create_app reads it), and an API key."""
    from opsboard.web.app import create_app

    database = Database(db_url, min_size=1, max_size=4).open()
    app = create_app({"OPSBOARD": make_config(database_url=db_url), "DATABASE": database, "TESTING": True,
                      "CATALOGUE": CATALOGUE})
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, f"t-{uuid.uuid4().hex[:6]}")
        secret, _ = apikeys.create(c, tenant["id"], "test", audit.Actor("test"))
    yield app, {"Authorization": f"Bearer {secret}"}, tenant
    database.close()


def _stored(db_url, event_id: str) -> str | None:
    with connect(db_url) as c:
        return c.execute("SELECT trace_context FROM outbox_events WHERE id = %s", (event_id,)).fetchone()[
            "trace_context"]


def test_one_journey_from_the_api_to_the_webhook_request_is_one_trace(db_url, spans, web, sandbox, runner,
                                                                       provider_settings):
    app, key, tenant = web
    with connect(db_url) as c:
        webhooks.create_endpoint(c, tenant["id"], f"{sandbox.url}/hooks/a", ["order.paid"])
        Relay().run_once(c)
    incoming = f"00-{TRACE}-{PARENT}-01"
    r = app.test_client().post("/api/v1/events", json=ORDER,
                               headers={**key, "traceparent": incoming, "tracestate": "vendor=abc"})
    assert r.status_code == 202, r.get_data(as_text=True)
    event_id = r.json["id"]

    (server,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert format(server.context.trace_id, "032x") == TRACE
    assert format(server.parent.span_id, "016x") == PARENT and server.parent.is_remote
    # Stored with the event: the API's own span, with the caller's tracestate.
    assert _stored(db_url, event_id) == f"00-{TRACE}-{server.context.span_id:016x}-01 vendor=abc"

    with connect(db_url) as c:
        assert Relay().run_once(c) == 1
        (job,) = c.execute("SELECT * FROM jobs WHERE event_id = %s AND type = 'webhook.deliver'",
                           (event_id,)).fetchall()
    assert job["trace_context"] == _stored(db_url, event_id)  # the relay carried it to the job
    assert runner.run(job["id"])["status"] == "succeeded"

    finished = spans.get_finished_spans()
    (attempt,) = [s for s in finished if s.name == "job webhook.deliver"]
    (call,) = [s for s in finished if s.name == "webhook send"]
    assert {format(s.context.trace_id, "032x") for s in finished} == {TRACE}
    assert attempt.parent.span_id == server.context.span_id and attempt.kind == SpanKind.CONSUMER
    assert call.parent.span_id == attempt.context.span_id and call.kind == SpanKind.CLIENT
    assert dict(attempt.attributes) == {
        "opsboard.job.type": "webhook.deliver", "opsboard.job.id": str(job["id"]), "opsboard.job.attempt": 1,
        "opsboard.tenant.id": str(tenant["id"]), "opsboard.job.queue": job["queue"],
        "opsboard.outcome": "success"}
    assert attempt.status.status_code != StatusCode.ERROR
    assert call.attributes["http.response.status_code"] == 200
    # The receiver got the provider call's span as its parent, in the same trace.
    (rec,) = sandbox.records("webhook")
    assert rec["headers"]["traceparent"] == f"00-{TRACE}-{call.context.span_id:016x}-01"
    assert rec["headers"]["tracestate"] == "vendor=abc"


def test_both_relay_routes_carry_the_events_trace_context_to_its_jobs(conn, tenant, sql_routed):
    """The set-based statement (outbox_relay_plain) and Python's routing (jobs_for) alike."""
    ctx = f"00-{TRACE}-{PARENT}-01 vendor=abc"
    traced = outbox.publish(conn, "test.sql_routed", 1, aggregate=("thing", "t-0"), tenant=tenant["id"],
                            payload={"n": 1}, trace_context=ctx)
    plain = outbox.publish(conn, "test.sql_routed", 1, aggregate=("thing", "t-1"), tenant=tenant["id"],
                           payload={"n": 2})
    own = outbox.publish(conn, "test.py_routed", 1, aggregate=("thing", "t-2"), tenant=tenant["id"],
                         payload={"n": 3}, trace_context=ctx)
    assert "test.sql_routed/1" in outbox.sql_routes()[0] and "test.py_routed/1" not in outbox.sql_routes()[0]
    assert outbox.relay_events(conn, 10).jobs == 5
    got = {(r["event_id"], r["idempotency_key"].split(":")[1]): r["trace_context"]
           for r in conn.execute("SELECT * FROM jobs WHERE tenant_id = %s", (tenant["id"],))}
    assert got == {(traced["id"], "plain"): ctx, (traced["id"], "in-order"): ctx, (plain["id"], "plain"): None,
                   (plain["id"], "in-order"): None, (own["id"], "own"): ctx}


def test_a_failed_attempt_and_its_provider_call_carry_an_error_status(db_url, spans, web, sandbox, runner,
                                                                      provider_settings):
    app, key, tenant = web
    with connect(db_url) as c:
        webhooks.create_endpoint(c, tenant["id"], f"{sandbox.url}/hooks/a", ["order.paid"])
        Relay().run_once(c)
    sandbox.fault("/hooks/a", status=503)
    r = app.test_client().post("/api/v1/events", json=ORDER, headers=key)  # no traceparent: a new trace
    assert r.status_code == 202
    with connect(db_url) as c:
        Relay().run_once(c)
        (job,) = c.execute("SELECT id FROM jobs WHERE type = 'webhook.deliver'").fetchall()
    assert runner.run(job["id"])["status"] == "retryable"
    finished = spans.get_finished_spans()
    (server,) = [s for s in finished if s.kind == SpanKind.SERVER]
    (attempt,) = [s for s in finished if s.name == "job webhook.deliver"]
    (call,) = [s for s in finished if s.name == "webhook send"]
    assert server.parent is None and attempt.parent.span_id == server.context.span_id
    assert attempt.context.trace_id == call.context.trace_id == server.context.trace_id
    for s in (attempt, call):
        assert s.status.status_code == StatusCode.ERROR and s.attributes["opsboard.outcome"] == "retryable"
        assert s.attributes["opsboard.error_code"] == "http_503"
    assert call.attributes["http.response.status_code"] == 503


@pytest.mark.parametrize("bad", ["00-zz-yy-01", f"00-{'0' * 32}-{PARENT}-01", f"00-{TRACE}-{'0' * 16}-01",
                                 f"ff-{TRACE}-{PARENT}-01", f"00-{TRACE}-{PARENT}", "x" * 55, ""])
def test_a_bad_traceparent_starts_a_new_trace_and_is_never_an_error(db_url, spans, web, bad):
    app, key, _ = web
    r = app.test_client().post("/api/v1/events", json=ORDER, headers={**key, "traceparent": bad})
    assert r.status_code == 202, r.get_data(as_text=True)
    (server,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert server.parent is None and server.context.is_valid
    assert format(server.context.trace_id, "032x") != TRACE
    ctx = server.context
    assert _stored(db_url, r.json["id"]) == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def test_tracing_off_installs_no_exporter_and_stores_the_callers_context(db_url, web, monkeypatch):
    monkeypatch.delenv(tracing.ENDPOINT_VAR, raising=False)
    assert tracing.setup("web") is False
    assert not tracing.enabled() and tracing.provider() is None
    # No SDK provider anywhere: the API's global is still its proxy, and the app is not instrumented.
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    app, key, _ = web
    assert not getattr(app, "_is_instrumented_by_opentelemetry", False)
    # The worker's helpers are the shared no-op: no span, no processor, nothing read per job.
    assert tracing.attempt({"type": "x"}) is tracing._NO_SPAN and tracing.provider_call("webhook") is tracing._NO_SPAN
    row = {"id": uuid.uuid4()}
    tracing.load_contexts(None, [row])  # would fail on the None pool if it tried
    assert "trace_context" not in row
    headers = {}
    tracing.inject(headers)
    assert headers == {}

    client = app.test_client()
    good = f"00-{TRACE}-{PARENT}-01"
    r = client.post("/api/v1/events", json=ORDER, headers={**key, "traceparent": good, "tracestate": "a=1,b=2"})
    assert r.status_code == 202 and _stored(db_url, r.json["id"]) == f"{good} a=1,b=2"
    # A tracestate longer than W3C asks a hop to pass is dropped, the traceparent kept.
    long_state = ",".join(f"k{i}=" + "v" * 20 for i in range(30))
    r = client.post("/api/v1/events", json=ORDER, headers={**key, "traceparent": good, "tracestate": long_state})
    assert r.status_code == 202 and _stored(db_url, r.json["id"]) == good
    r = client.post("/api/v1/events", json=ORDER, headers={**key, "traceparent": "00-nonsense"})
    assert r.status_code == 202 and _stored(db_url, r.json["id"]) is None
    r = client.post("/api/v1/events", json=ORDER, headers=key)
    assert r.status_code == 202 and _stored(db_url, r.json["id"]) is None
    # POST /api/v1/jobs stores it with the job too.
    r = client.post("/api/v1/jobs", json={"type": "diag.noop", "payload": {}}, headers={**key, "traceparent": good})
    assert r.status_code == 202, r.get_data(as_text=True)
    with connect(db_url) as c:
        assert c.execute("SELECT trace_context FROM jobs WHERE id = %s", (r.json["id"],)).fetchone()[
            "trace_context"] == good


def test_a_malformed_otlp_endpoint_is_one_line_at_start(monkeypatch):
    from opsboard.config import ConfigError
    monkeypatch.setenv(tracing.ENDPOINT_VAR, "collector:4318")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT must be an http"):
        tracing.setup("worker")
    assert not tracing.enabled()


class _Collector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP receiver on 127.0.0.1: keeps every span it is sent (decoded with opentelemetry-proto)."""

    def __init__(self):
        self.spans: list = []
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
                    for ss in rs.scope_spans:
                        collector.spans.extend((self.path, service, s) for s in ss.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_a_worker_process_exports_its_attempt_spans_over_otlp(db_url, start_worker):
    collector = _Collector()
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    try:
        with connect(db_url) as c:
            t = auth.ensure_tenant(c, "otlp")["id"]
            job = jobqueue.enqueue(c, "diag.noop", {}, tenant=t, trace_context=f"00-{TRACE}-{PARENT}-01")
        # Batches every minute: what reaches the collector is sent by the flush when the worker stops.
        p = start_worker(db_url, "--queues", "default=2", "--no-services",
                         OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.server_address[1]}",
                         OTEL_BSP_SCHEDULE_DELAY="60000")
        with connect(db_url) as c:
            wait_for(lambda: c.execute("SELECT status FROM jobs WHERE id = %s", (job["id"],)).fetchone()["status"]
                     == "succeeded", timeout=30, message="the job to succeed")
        assert collector.spans == []
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
        got = [s for s in collector.spans if s[2].name == "job diag.noop"]
        assert len(got) == 1, collector.spans
        path, service, span = got[0]
        assert path == "/v1/traces" and service == "opsboard-worker"
        assert span.trace_id.hex() == TRACE and span.parent_span_id.hex() == PARENT
        attrs = {a.key: a.value for a in span.attributes}
        assert attrs["opsboard.job.id"].string_value == str(job["id"])
        assert attrs["opsboard.job.attempt"].int_value == 1
    finally:
        collector.shutdown()
        collector.server_close()


def test_a_worker_with_a_malformed_otlp_endpoint_stops_with_one_line(db_url, start_worker):
    p = start_worker(db_url, OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318")
    assert p.wait(30) == 2
    lines = p.log_path.read_text().strip().splitlines()
    assert len(lines) == 1 and "OTEL_EXPORTER_OTLP_ENDPOINT must be an http" in lines[0], lines


def test_the_journey_through_gunicorn_and_a_worker_process_is_one_trace_at_the_collector(stack, sandbox):
    """The production path end to end: gunicorn (its worker builds the app and the tracer after the
    fork) and ``python -m worker`` (relay and delivery) both export over OTLP/HTTP to a receiver in the
    test; one event's request, attempt and webhook call arrive as one trace, and the sandbox got the
    webhook call's span as ``traceparent``."""
    from tests.journeys.helpers import api_key

    collector = _Collector()
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    try:
        otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
                "OTEL_BSP_SCHEDULE_DELAY": "100"}
        with stack.db() as c:
            tenant = auth.ensure_tenant(c, "traced")
            key = api_key(c, tenant["id"])
            webhooks.create_endpoint(c, tenant["id"], f"{sandbox.url}/hooks/traced", ["order.paid"])
        stack.web(**otlp)
        stack.worker(**otlp)
        r = stack.api("POST", "/api/v1/events", key, ORDER, headers={"traceparent": f"00-{TRACE}-{PARENT}-01"})
        assert r.status == 202, r.body
        wait_for(lambda: sandbox.records("webhook"), timeout=30, message="the webhook delivery")

        def names():
            return {(svc, s.name): s for _, svc, s in collector.spans if s.trace_id.hex() == TRACE}
        got = wait_for(lambda: (lambda n: n if {("opsboard-worker", "webhook send"),
                                                ("opsboard-worker", "job webhook.deliver")} <= set(n)
                                and any(svc == "opsboard-web" for svc, _ in n) else None)(names()),
                       timeout=30, message="the web's and the worker's spans at the collector")
        (server,) = [s for (svc, _), s in got.items() if svc == "opsboard-web"]
        attempt, call = got[("opsboard-worker", "job webhook.deliver")], got[("opsboard-worker", "webhook send")]
        assert server.parent_span_id.hex() == PARENT
        assert attempt.parent_span_id == server.span_id and call.parent_span_id == attempt.span_id
        (rec,) = sandbox.records("webhook")
        assert rec["headers"]["traceparent"] == f"00-{TRACE}-{call.span_id.hex()}-01"
    finally:
        collector.shutdown()
        collector.server_close()
