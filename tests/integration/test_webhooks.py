"""Webhooks: Standard Webhooks signatures (the reference package is the oracle), fan-out,
classification of every fault, SSRF guard, 410 and long-failure disabling."""
from __future__ import annotations

import base64
import ipaddress
import time
from datetime import timedelta

import pytest
import standardwebhooks

from opsboard import auth
from opsboard.deliveries import webhooks
from tests.conftest import connect
from tests.support.delivery import insert_event, provider_settings, runner, sandbox_settings  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401
from opsboard.deliveries.providers import http as http_provider


def _setup(db_url, sandbox, n=1, types=("*",), path="/hooks/a", secret=None):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        eps = [webhooks.create_endpoint(c, t, f"{sandbox.url}{path}{'' if n == 1 else i}", types, secret=secret)
               for i in range(n)]
        ev = insert_event(c, t)
        jobs = webhooks.fanout(c, ev)
    return t, eps, ev, jobs


def _oracle_verify(secret, rec):
    wh = standardwebhooks.Webhook(secret)
    return wh.verify(rec["body"], rec["headers"])


def test_delivery_is_signed_and_verifies_with_the_reference_package(db_url, sandbox, runner, provider_settings):
    t, (ep,), ev, (job,) = _setup(db_url, sandbox)
    done = runner.run(job["id"])
    assert done["status"] == "succeeded"
    (rec,) = sandbox.records("webhook")
    assert rec["webhook_id"] == webhooks.message_id(ev)
    assert rec["headers"]["webhook-signature"].startswith("v1,")
    payload = _oracle_verify(ep["secrets"][0], rec)
    assert payload["type"] == "order.paid" and payload["data"] == {"id": 1}
    # Our own helper agrees with the oracle.
    assert webhooks.verify(ep["secrets"], rec["headers"], rec["body"].encode())["type"] == "order.paid"
    # A tampered body does not verify.
    tampered = dict(rec, body=rec["body"].replace('"id":1', '"id":2'))
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        _oracle_verify(ep["secrets"][0], tampered)
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(ep["secrets"], tampered["headers"], tampered["body"].encode())
    with connect(db_url) as c:
        assert c.execute("SELECT state FROM effects").fetchone()["state"] == "confirmed"


def test_an_old_timestamp_does_not_verify():
    secret = webhooks.generate_secret()
    body = b'{"type":"x","timestamp":"t","data":{}}'
    old = int(time.time()) - 3600
    headers = webhooks.sign([secret], "msg_1", old, body)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(secret).verify(body, headers)
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(secret, headers, body)
    fresh = webhooks.sign([secret], "msg_1", int(time.time()), body)
    assert standardwebhooks.Webhook(secret).verify(body, fresh) == {"type": "x", "timestamp": "t", "data": {}}


def test_rotation_signs_with_both_secrets(db_url, sandbox, runner, provider_settings):
    t, (ep,), ev, (job,) = _setup(db_url, sandbox)
    with connect(db_url) as c:
        rotated = webhooks.rotate_secret(c, t, ep["id"])
    assert len(rotated["secrets"]) == 2
    assert runner.run(job["id"])["status"] == "succeeded"
    (rec,) = sandbox.records("webhook")
    assert len(rec["headers"]["webhook-signature"].split()) == 2
    for secret in rotated["secrets"]:  # a receiver on the old or the new secret accepts it
        _oracle_verify(secret, rec)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        _oracle_verify(webhooks.generate_secret(), rec)


def test_after_the_overlap_window_only_the_new_secret_signs(db_url, sandbox, runner, provider_settings):
    t, (ep,), ev, (job,) = _setup(db_url, sandbox)
    with connect(db_url) as c:
        two_hours_ago = c.execute("SELECT now() - interval '2 hours' AS t").fetchone()["t"]
        # rotated two hours ago with a one-hour window: the window is over
        rotated = webhooks.rotate_secret(c, t, ep["id"], overlap_seconds=3600, now=two_hours_ago)
    assert rotated["secrets"][1] == ep["secrets"][0] and rotated["previous_secrets_until"] < two_hours_ago + \
        timedelta(hours=2)
    assert runner.run(job["id"])["status"] == "succeeded"
    (rec,) = sandbox.records("webhook")
    assert len(rec["headers"]["webhook-signature"].split()) == 1
    _oracle_verify(rotated["secrets"][0], rec)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        _oracle_verify(ep["secrets"][0], rec)                  # the old secret stopped signing
    with connect(db_url) as c:
        # the next rotation drops the secret whose window closed
        again = webhooks.rotate_secret(c, t, ep["id"], keep=5)
        assert again["secrets"][1:] == [rotated["secrets"][0]]
        # no overlap: the new secret alone, at once
        alone = webhooks.rotate_secret(c, t, ep["id"], overlap_seconds=0)
        assert len(alone["secrets"]) == 1 and alone["previous_secrets_until"] is None


def test_fanout_targets_enabled_subscribed_endpoints_once(db_url, sandbox):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        other = auth.ensure_tenant(c, "other")["id"]
        a = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/a", ["order.paid"])
        webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/b", ["order.refunded"])
        off = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/c", ["*"])
        webhooks.disable_endpoint(c, t, off["id"], "manual")
        star = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/d")
        webhooks.create_endpoint(c, other, f"{sandbox.url}/hooks/e")
        ev = insert_event(c, t)
        jobs = webhooks.fanout(c, ev)
        assert sorted(j["payload"]["endpoint_id"] for j in jobs) == sorted([str(a["id"]), str(star["id"])])
        assert {j["idempotency_key"] for j in jobs} == {f"{ev}:{a['id']}", f"{ev}:{star['id']}"}
        again = webhooks.fanout(c, ev)
        assert {j["id"] for j in again} == {j["id"] for j in jobs}


def test_fanout_job_enqueues_deliveries(db_url, sandbox, runner, provider_settings):
    from opsboard import jobqueue
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/a")
        ev = insert_event(c, t)
        j = jobqueue.enqueue(c, "webhook.fanout", {"event_id": str(ev)}, tenant=t)
    assert runner.run(j["id"])["status"] == "succeeded"
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'webhook.deliver'").fetchone()["n"] == 1


@pytest.mark.parametrize("fault, status, code, min_delay", [
    ({"kind": "status", "status": 503, "retry_after": "120"}, "retryable", "http_503", 110),
    ({"kind": "status", "status": 429, "retry_after": "60"}, "retryable", "http_429", 55),
    ({"kind": "status", "status": 500}, "retryable", "http_500", 4),
    ({"kind": "status", "status": 502}, "retryable", "http_502", 4),
    ({"kind": "status", "status": 408}, "retryable", "http_408", 4),
    ({"kind": "status", "status": 400}, "dead", "http_400", None),
    ({"kind": "status", "status": 401}, "dead", "http_401", None),
    ({"kind": "status", "status": 404}, "dead", "http_404", None),
    ({"kind": "status", "status": 301}, "dead", "http_301", None),
    ({"kind": "reset"}, "retryable", "http_connection_reset", 4),
    ({"kind": "drop"}, "retryable", "http_connection_dropped", 4),
    ({"kind": "timeout"}, "retryable", "http_timeout", 4),
])
def test_fault_classification(db_url, sandbox, runner, fault, status, code, min_delay):
    runner.settings = sandbox_settings(sandbox, webhook_timeout=0.5)
    t, (ep,), ev, (job,) = _setup(db_url, sandbox)
    sandbox.fault("/hooks/a", **fault)
    started = time.monotonic()
    done = runner.run(job["id"])
    assert time.monotonic() - started < 5  # timeouts are bounded
    assert (done["status"], done["last_error_code"]) == (status, code)
    if min_delay is not None:
        with connect(db_url) as c:
            delay = c.execute("SELECT extract(epoch FROM available_at - now()) AS d FROM jobs WHERE id = %s",
                              (job["id"],)).fetchone()["d"]
        assert delay >= min_delay - 1  # the schedule's 5 s step, or a longer Retry-After


def test_retry_keeps_the_webhook_id(db_url, sandbox, runner, provider_settings):
    t, (ep,), ev, (job,) = _setup(db_url, sandbox)
    sandbox.fault("/hooks/a", "drop", count=1)  # accepted, then the answer is lost
    assert runner.run(job["id"])["status"] == "retryable"
    runner.make_due(job["id"])
    assert runner.run(job["id"])["status"] == "succeeded"
    recs = sandbox.records("webhook")
    assert len(recs) == 2 and len({r["webhook_id"] for r in recs}) == 1  # the receiver acts once
    assert recs[0]["body"] == recs[1]["body"]


def test_410_disables_the_endpoint_and_alerts(db_url, sandbox, runner, provider_settings):
    t, (ep,), ev, (job,) = _setup(db_url, sandbox)
    sandbox.fault("/hooks/a", status=410)
    assert runner.run(job["id"])["status"] == "dead"
    with connect(db_url) as c:
        row = webhooks.get_endpoint(c, t, ep["id"])
        assert not row["enabled"] and row["disabled_reason"] == "http_410"
        alert = c.execute("SELECT * FROM alerts WHERE rule = 'webhook_endpoint_disabled'").fetchone()
        assert alert["tenant_id"] == t and alert["key"] == str(ep["id"])
        assert c.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'webhook_endpoint.disable'"
                         ).fetchone()["n"] == 1
        assert webhooks.fanout(c, insert_event(c, t)) == []  # never targeted again


def test_endpoint_failing_for_the_long_window_is_disabled(db_url, sandbox, runner, provider_settings):
    t, (ep,), ev, (job,) = _setup(db_url, sandbox)
    with connect(db_url) as c:
        c.execute("INSERT INTO circuit_breakers (name, tenant_id, consecutive_failures, failing_since) "
                  "VALUES (%s, %s, 1, now() - interval '4 days')", (f"endpoint:{ep['id']}", t))
    sandbox.fault("/hooks/a", status=503)
    done = runner.run(job["id"])
    assert (done["status"], done["last_error_code"]) == ("dead", "endpoint_disabled_failing")
    with connect(db_url) as c:
        assert webhooks.get_endpoint(c, t, ep["id"])["disabled_reason"] == "failing_too_long"
        assert c.execute("SELECT count(*) AS n FROM alerts WHERE rule = 'webhook_endpoint_disabled'"
                         ).fetchone()["n"] == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.0.1", "169.254.169.254",
                                  "::1", "fe80::1", "0.0.0.0", "localhost"])
def test_ssrf_guard_refuses_private_targets(host):
    with pytest.raises(http_provider.Refused):
        http_provider.resolve_checked(host, 80)


def test_ssrf_guard_allow_list_and_end_to_end(db_url, sandbox, runner):
    assert http_provider.resolve_checked("localhost", 80, (ipaddress.ip_network("127.0.0.0/8"),)) == "127.0.0.1"
    runner.settings = sandbox_settings(sandbox, webhook_allow=())
    t, (ep,), ev, (job,) = _setup(db_url, sandbox)
    done = runner.run(job["id"])
    assert (done["status"], done["last_error_code"]) == ("dead", "http_target_refused")
    assert sandbox.records("webhook") == []


def test_response_body_read_is_capped(sandbox):
    # A receiver answering a huge body cannot make us read it all.
    resp = http_provider.request("GET", f"{sandbox.url}/_sandbox/", max_body=100)
    assert resp.status == 200 and len(resp.body) == 100


def test_secret_format():
    s = webhooks.generate_secret()
    assert s.startswith("whsec_") and len(base64.b64decode(s[6:])) == 24


def test_a_repeated_fanout_never_recreates_a_dead_delivery(db_url, sandbox, runner, provider_settings):
    """A fan-out job that runs again (its worker killed after it began) finds the dead delivery job
    and returns it: a 400 endpoint sees each webhook-id once; only an audited replay re-runs it."""
    from opsboard import audit, jobqueue
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/a")
        ev = insert_event(c, t)
        fan = jobqueue.enqueue(c, "webhook.fanout", {"event_id": str(ev)}, tenant=t)
    sandbox.fault("/hooks/a", kind="status", status=400)
    assert runner.run(fan["id"])["status"] == "succeeded"
    with connect(db_url) as c:
        (deliver,) = c.execute("SELECT id FROM jobs WHERE type = 'webhook.deliver'").fetchall()
    assert runner.run(deliver["id"])["status"] == "dead"
    with connect(db_url) as c:      # the fan-out runs again (as after a crash: the same job, or a second one)
        again = jobqueue.enqueue(c, "webhook.fanout", {"event_id": str(ev)}, tenant=t)
        assert [j["id"] for j in webhooks.fanout(c, ev)] == [deliver["id"]]
    assert runner.run(again["id"])["status"] == "succeeded"
    with connect(db_url) as c:
        rows = c.execute("SELECT id, status FROM jobs WHERE type = 'webhook.deliver'").fetchall()
        assert rows == [{"id": deliver["id"], "status": "dead"}]
    recs = sandbox.records("webhook")
    assert len(recs) == 1
    # An audited replay still makes a new job for the same key, and a fan-out then returns it.
    with connect(db_url) as c:
        replayed = jobqueue.replay(c, deliver["id"], audit.Actor(label="ops@example.test"), "receiver fixed", None)
        assert replayed["id"] != deliver["id"]
        assert [j["id"] for j in webhooks.fanout(c, ev)] == [replayed["id"]]


def test_an_allowed_address_literal_is_kept_per_allow_list_only():
    """The client keeps an address literal's allowed verdict (no DNS is involved), keyed by the
    allow list: the same literal is still refused without it, before and after."""
    loopback = (ipaddress.ip_network("127.0.0.0/8"),)
    for _ in range(2):
        assert http_provider.resolve_checked("127.0.0.1", 80, loopback) == "127.0.0.1"
        with pytest.raises(http_provider.Refused):
            http_provider.resolve_checked("127.0.0.1", 80)
