"""Concurrency keys on the dashboard (issue 50): a webhook endpoint's page shows its deliveries in flight
against the limit per endpoint, its share of all in flight and its answer time p50/p95; the Queues page
lists each keyed type's limit per key (a link to set it live) and the busiest keys in flight."""
from __future__ import annotations

import uuid
from datetime import timedelta

from opsboard import auth, jobqueue
from opsboard.deliveries import WEBHOOK_ENDPOINT_CONCURRENCY, webhooks
from tests.conftest import connect
from tests.support import dashboard as seed


def _seed(app):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        slow = webhooks.create_endpoint(c, t, "https://hooks.example.test/slow", ["*"])
        quick = webhooks.create_endpoint(c, t, "https://hooks.example.test/quick", ["*"])
        now = seed.db_now(c)
        # Answer times: the slow endpoint's attempts took 9,500 ms, the quick one's 20 ms.
        for ep, ms in ((slow, 9500), (quick, 20)):
            done = seed.jobs(c, t, 4, "webhook.deliver", {"endpoint_id": str(ep["id"]), "event_id": str(uuid.uuid4())})
            for j in done:
                seed.attempt(c, j, "succeeded", at=now - timedelta(minutes=1))
            c.execute("UPDATE job_attempts SET duration_ms = %s WHERE job_id = ANY(%s)", (ms, done))
            c.execute("UPDATE jobs SET status = 'succeeded', attempts = 1, finished_at = now() WHERE id = ANY(%s)",
                      (done,))
        # In flight: 6 deliveries to the slow endpoint, 2 to the quick one; the claim takes 4 + 2.
        jobqueue.enqueue_many(c, [jobqueue.NewJob("webhook.deliver", {"endpoint_id": str(ep["id"]),
                                                                      "event_id": str(uuid.uuid4())}, t)
                                  for ep in [slow] * 6 + [quick] * 2])
        claimed = jobqueue.claim(c, "default", "w1", 100, 300).rows
        assert len(claimed) == WEBHOOK_ENDPOINT_CONCURRENCY + 2
    return slow, quick


def test_the_endpoint_page_shows_in_flight_limit_share_and_latency(client, login_as, app):
    slow, quick = _seed(app)
    login_as("admin")
    html = client.get(f"/webhooks/{slow['id']}").get_data(as_text=True)
    card = html[html.index('id="endpoint-in-flight"'):]
    card = card[:card.index("</section>")]
    assert f'data-in-flight="{WEBHOOK_ENDPOINT_CONCURRENCY}" data-limit="{WEBHOOK_ENDPOINT_CONCURRENCY}"' in card
    assert 'data-in-flight-share="0.667"' in card              # 4 of the 6 deliveries in flight
    assert 'data-latency-p50="9500.0"' in card and 'data-latency-p95="9500.0"' in card
    assert "data-slowed-limit" not in card
    html = client.get(f"/webhooks/{quick['id']}").get_data(as_text=True)
    assert 'data-in-flight="2"' in html and 'data-latency-p50="20.0"' in html
    # Slowed down (a slow answer, migration 0093): said on its page.
    from opsboard import db
    with connect(app.extensions["test_db_url"]) as c:
        db.execute(c, "job_key_limit_set", {"key": f"webhook:{slow['id']}", "max_running": 1, "seconds": 300,
                                            "reason": "slow_answer:9500ms"})
    html = client.get(f"/webhooks/{slow['id']}").get_data(as_text=True)
    assert 'data-slowed-limit="1"' in html


def test_the_queues_page_lists_keyed_limits_and_the_busiest_keys(client, login_as, app):
    slow, quick = _seed(app)
    login_as("ops")
    html = client.get("/queues/").get_data(as_text=True)
    card = html[html.index('id="key-limits"'):]
    card = card[:card.index("</section>")]
    assert 'data-limit="key:webhook.deliver"' in card and "/pauses/limit?kind=key&amp;target=webhook.deliver" in card
    assert f'data-key="webhook:{slow["id"]}" data-running="{WEBHOOK_ENDPOINT_CONCURRENCY}"' in card
    assert f'data-key="webhook:{quick["id"]}" data-running="2"' in card
    # The form to set it live answers for a keyed type, and not for a type without a key.
    assert client.get("/pauses/limit?kind=key&target=webhook.deliver").status_code == 200
    assert client.get("/pauses/limit?kind=key&target=diag.noop").status_code == 404


def test_a_live_limit_per_key_is_set_from_the_dashboard_and_audited(client, login_as, app):
    login_as("ops")
    r = client.post("/pauses/limit", data={"kind": "key", "target": "webhook.deliver", "value": "2",
                                           "reason": "slow receivers", "csrf_token": client.csrf, "request_key": str(uuid.uuid4()),
                                           "next": "/queues/"})
    assert r.status_code == 303, r.get_data(as_text=True)
    with connect(app.extensions["test_db_url"]) as c:
        row = c.execute("SELECT target_type, target_id, after FROM audit_log WHERE action = 'limit.set'").fetchone()
        assert (row["target_type"], row["target_id"], row["after"]["value"]) == ("key", "webhook.deliver", 2)
    html = client.get("/queues/").get_data(as_text=True)
    assert "data-limit=\"key:webhook.deliver\"" in html
    # Without the CSRF token: refused.
    assert client.post("/pauses/limit", data={"kind": "key", "target": "webhook.deliver", "value": "3",
                                              "reason": "x"}).status_code in (400, 403)
