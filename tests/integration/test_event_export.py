"""The export of outbox events to NATS JetStream (opsboard/outbox/export.py), against the real PostgreSQL
and a real nats-server: the shared one at 127.0.0.1:4222 (a stream and prefix of each test's own), and
a throwaway one that a test stops and starts again."""
from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta

import pytest

from opsboard import alerts, metrics, outbox
from opsboard.outbox.export import EventExporter, ExportConfig, NatsLink, message_body
from tests.conftest import connect, wait_for
from tests.support.natsbox import NatsServer, delete_stream, free_port, read_stream, shared_nats, unique_names


@pytest.fixture
def stream():
    url = shared_nats()
    name, prefix = unique_names()
    yield url, name, prefix
    delete_stream(url, name)


def _exporter(url, name, prefix, **kw) -> EventExporter:
    return EventExporter(ExportConfig(url=url, stream=name, prefix=prefix, **kw))


def _drain(exporter, c, expected: int, timeout: float = 30.0) -> int:
    """Run passes (the leader's loop, by hand) until ``expected`` events are marked exported."""
    done = [0]

    def step():
        done[0] += exporter.run_once(c)
        return done[0] >= expected
    wait_for(step, timeout, message=f"{expected} events exported")
    return done[0]


def _publish(c, tenant, n, aggregates=3, start=0):
    out = []
    with c.transaction():
        for i in range(start, start + n):
            out.append(outbox.publish(c, "order.paid", 1, aggregate=("order", f"o-{i % aggregates}"),
                                      tenant=tenant["id"],
                                      payload={"order_id": f"o-{i % aggregates}", "amount_cents": i, "currency": "EUR"}))
    return out


def test_every_event_on_its_subject_with_its_id_and_envelope_in_order(db_url, stream, make_tenant):
    url, name, prefix = stream
    with connect(db_url) as c:
        t1, t2 = make_tenant(c), make_tenant(c)
        events = _publish(c, t1, 12) + _publish(c, t2, 5, aggregates=2)
        exporter = _exporter(url, name, prefix, batch=4)  # several batches and waves
        assert _drain(exporter, c, 17) == 17
        msgs = read_stream(url, name)
        assert len(msgs) == 17
        slugs = {t1["id"]: t1["slug"], t2["id"]: t2["slug"]}
        stored = {str(r["id"]): r for r in c.execute(
            "SELECT e.*, t.slug AS tenant_slug FROM outbox_events e JOIN tenants t ON t.id = e.tenant_id "
            "WHERE e.id = ANY(%s)", ([e["id"] for e in events],)).fetchall()}
        for m in msgs:
            ev = stored[m["headers"]["Nats-Msg-Id"]]
            assert m["subject"] == f"{prefix}.{slugs[ev['tenant_id']]}.order.paid"
            # The body: the API's envelope of the stored event, with its tenant and payload.
            assert m["body"] == {**outbox.envelope(ev), "tenant": slugs[ev["tenant_id"]], "payload": ev["payload"]}
            assert m["body"]["id"] == str(ev["id"]) and m["body"]["type"] == "order.paid"
        # Each aggregate's events in id order in the stream.
        by_agg: dict = {}
        for m in msgs:
            by_agg.setdefault((m["body"]["tenant"], m["body"]["aggregate"]["id"]), []).append(m["body"]["id"])
        assert all(ids == sorted(ids) for ids in by_agg.values()) and len(by_agg) == 5
        # The position in PostgreSQL: every event marked, counted on the state row, no lag.
        assert c.execute("SELECT count(*) AS n FROM outbox_events WHERE exported_at IS NULL").fetchone()["n"] == 0
        [lag] = metrics.event_export_lag(c)
        assert (lag["stream"], lag["exported"], lag["lag_events"], lag["connected"]) == (name, 17, 0, True)
        exporter.link.close()


def test_the_api_answer_is_the_message_envelope(client, app, stream):
    """The body carries exactly what POST /api/v1/events answers (plus tenant and payload)."""
    from opsboard import apikeys, audit, auth
    url, name, prefix = stream
    with connect(app.extensions["test_db_url"]) as c:
        tenant = auth.ensure_tenant(c, f"t-{uuid.uuid4().hex[:6]}")
        key, _ = apikeys.create(c, tenant["id"], "test", audit.Actor("test"))
    r = client.post("/api/v1/events", json={"type": "order.paid", "aggregate": {"type": "order", "id": "o-9"},
                                              "payload": {"order_id": "o-9", "amount_cents": 5, "currency": "EUR"}},
                    headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 202, r.get_data(as_text=True)
    answer = r.get_json()
    with connect(app.extensions["test_db_url"]) as c:
        exporter = _exporter(url, name, prefix)
        _drain(exporter, c, 1)
        exporter.link.close()
    [m] = read_stream(url, name)
    body = dict(m["body"])
    assert body.pop("payload") == {"order_id": "o-9", "amount_cents": 5, "currency": "EUR"}
    body.pop("tenant")
    assert body == answer


def test_a_restarted_exporter_resumes_and_resends_are_dropped(db_url, stream, make_tenant):
    url, name, prefix = stream
    with connect(db_url) as c:
        t = make_tenant(c)
        _publish(c, t, 10)
        first = _exporter(url, name, prefix, batch=4, budget=0.0)  # one batch per pass
        _drain(first, c, 4)
        # A crash between JetStream's acknowledgement and the mark: the next four are sent, not marked.
        unmarked = [dict(r) for r in c.execute(
            "SELECT e.*, t.slug AS tenant_slug FROM outbox_events e JOIN tenants t ON t.id = e.tenant_id "
            "WHERE exported_at IS NULL ORDER BY e.id LIMIT 4").fetchall()]
        acked, dups, err = first.link.publish(unmarked)
        assert err is None and len(acked) == 4 and dups == 0
        first.link.close()
        # A new exporter (a new process: nothing in memory) starts at the stored position.
        second = _exporter(url, name, prefix)
        _drain(second, c, 6)
        second.link.close()
        msgs = read_stream(url, name)
        ids = [m["headers"]["Nats-Msg-Id"] for m in msgs]
        assert len(ids) == 10 == len(set(ids))  # the four re-sent were dropped by the duplicate window
        assert c.execute("SELECT duplicates FROM event_export_state").fetchone()["duplicates"] == 4


def test_nats_down_backs_off_and_catches_up(db_url, tmp_path, make_tenant, caplog):
    server = NatsServer(tmp_path).start()
    name, prefix = unique_names()
    try:
        with connect(db_url) as c:
            t = make_tenant(c)
            _publish(c, t, 5)
            exporter = _exporter(server.url, name, prefix, backoff_max=1.0)
            _drain(exporter, c, 5)
            server.stop()
            wait_for(lambda: not exporter.link.ready, 10, message="the exporter to see NATS gone")
            _publish(c, t, 7, start=5)
            caplog.set_level(logging.INFO, logger="worker.event_export")
            started = time.monotonic()
            for _ in range(20):  # the leader's passes go on; each returns at once, exporting nothing
                assert exporter.run_once(c) == 0
            assert time.monotonic() - started < 5
            [lag] = metrics.event_export_lag(c)
            assert lag["lag_events"] == 7 and lag["connected"] is False
            server.start()
            _drain(exporter, c, 7, timeout=60)
            exporter.link.close()
            ids = [m["headers"]["Nats-Msg-Id"] for m in read_stream(server.url, name)]
            assert len(ids) == 12 == len(set(ids))
            assert metrics.event_export_lag(c)[0]["lag_events"] == 0
    finally:
        server.stop()


def test_an_unreachable_server_at_start_is_one_line(db_url, make_tenant, caplog):
    caplog.set_level(logging.DEBUG, logger="worker.event_export")
    name, prefix = unique_names()
    exporter = _exporter(f"nats://127.0.0.1:{free_port()}", name, prefix, backoff_max=0.2)
    with connect(db_url) as c:
        _publish(c, make_tenant(c), 2)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert exporter.run_once(c) == 0
            time.sleep(0.05)
        state = c.execute("SELECT connected, last_error FROM event_export_state").fetchone()
    exporter.link.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "cannot reach NATS JetStream at 127.0.0.1:" in warnings[0].getMessage()
    assert warnings[0].exc_info is None
    assert state["connected"] is False and "cannot reach" in state["last_error"]


def test_the_lag_in_metrics_and_its_alert(db_url, make_tenant):
    with connect(db_url) as c:
        assert metrics.event_export_lag(c) == []  # no exporter ever ran: no lag, no alert
        t = make_tenant(c)
        _publish(c, t, 3)
        c.execute("INSERT INTO event_export_state (stream, subject_prefix, server) VALUES ('S1', 'p', 'h:1')")
        now = c.execute("SELECT now() AS n").fetchone()["n"]
        [lag] = metrics.event_export_lag(c, now + timedelta(seconds=400))
        assert lag["lag_events"] == 3 and lag["lag_seconds"] >= 400
        cfg = alerts.AlertConfig(export_lag_seconds=300)
        assert [x.key for x in alerts.firing_conditions(c, cfg, now + timedelta(seconds=400))
                if x.rule == "event_export_lag"] == ["S1"]
        assert not [x for x in alerts.firing_conditions(c, cfg, now + timedelta(seconds=200))
                    if x.rule == "event_export_lag"]
        alerts.evaluate(c, cfg, now + timedelta(seconds=400))
        assert c.execute("SELECT count(*) AS n FROM alerts WHERE rule = 'event_export_lag' AND closed_at IS NULL"
                         ).fetchone()["n"] == 1


def test_metrics_text_has_the_export_gauges(db_url, make_tenant):
    from opsboard.db import Database
    with connect(db_url) as c:
        _publish(c, make_tenant(c), 2)
        c.execute("INSERT INTO event_export_state (stream, subject_prefix, server) VALUES ('S2', 'p', 'h:1')")
    database = Database(db_url, min_size=1, max_size=2).open()
    try:
        text = metrics.prometheus_text(database).decode()
    finally:
        database.close()
    assert 'opsboard_event_export_lag_events{stream="S2"} 2.0' in text
    assert 'opsboard_event_export_lag_seconds{stream="S2"}' in text


def test_the_pruner_keeps_unexported_events_while_an_export_runs(db_url, make_tenant):
    from opsboard import db
    with connect(db_url) as c:
        [kept, gone] = _publish(c, make_tenant(c), 2, aggregates=2)
        c.execute("UPDATE outbox_events SET relayed_at = now() - interval '30 days' WHERE id = ANY(%s)",
                  ([kept["id"], gone["id"]],))
        c.execute("UPDATE outbox_events SET exported_at = now() WHERE id = %s", (gone["id"],))
        c.execute("INSERT INTO event_export_state (stream, subject_prefix, server) VALUES ('S3', 'p', 'h:1')")
        cutoff = c.execute("SELECT now() - interval '1 day' AS n").fetchone()["n"]
        row = db.one(c, "outbox_prune_relayed", {"after_id": uuid.UUID(int=0), "cutoff_id": uuid.UUID(int=2**128 - 1),
                                                 "cutoff": cutoff, "limit": 100})
        assert row["n"] == 1
        left = {r["id"] for r in c.execute("SELECT id FROM outbox_events").fetchall()}
        assert kept["id"] in left and gone["id"] not in left
        # An exported event stays immutable: its mark changes once.
        with pytest.raises(Exception, match="immutable"):
            c.execute("UPDATE outbox_events SET exported_at = now() + interval '1 s' WHERE id = %s", (kept["id"],))
            c.execute("UPDATE outbox_events SET exported_at = now() + interval '2 s' WHERE id = %s", (kept["id"],))


def test_message_body_is_compact_sorted_json():
    ev = {"id": uuid.UUID(int=1), "type": "x.y", "version": 1, "aggregate_type": "a", "aggregate_id": "1",
          "correlation_id": None, "occurred_at": None, "tenant_slug": "acme", "payload": {"b": 1, "a": "آ"}}
    assert message_body(ev) == (b'{"aggregate":{"id":"1","type":"a"},"correlation_id":null,'
                                b'"id":"00000000-0000-0000-0000-000000000001","payload":{"a":"\\u0622","b":1},'
                                b'"tenant":"acme","type":"x.y","version":1}')
    assert NatsLink(ExportConfig(url="nats://u:secret@h:4223")).server == "h:4223"


def test_queue_health_shows_the_export_lag_to_operator_staff(app, client, login_as, make_tenant):
    with connect(app.extensions["test_db_url"]) as c:
        _publish(c, make_tenant(c), 3)
        c.execute("INSERT INTO event_export_state (stream, subject_prefix, server, connected) "
                  "VALUES ('S4', 'p', '127.0.0.1:4222', false)")
    login_as("ops")
    html = client.get("/queues/_health").get_data(as_text=True)
    assert 'data-event-stream="S4"' in html and 'data-lag-events="3"' in html
    assert "127.0.0.1:4222" in html  # not connected: where it is trying
    # A tenant's admin sees the page, not the platform's stream.
    from opsboard import auth
    from tests.conftest import csrf_from
    other = app.test_client()
    slug, email = f"t-{uuid.uuid4().hex[:6]}", f"admin-{uuid.uuid4().hex[:6]}@example.test"
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, slug)
        auth.create_user(c, email, "correct horse battery", "admin", slug)
    r = other.post("/login", data={"email": email, "password": "correct horse battery",
                                   "csrf_token": csrf_from(other)})
    assert r.status_code == 302
    page = other.get("/queues/_health")
    assert page.status_code == 200 and "data-event-stream" not in page.get_data(as_text=True)
