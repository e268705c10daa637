"""The deliveries page: breakers and endpoints, inside the viewer's tenant scope."""
from __future__ import annotations

from opsboard import auth
from opsboard.config import ProviderSettings
from opsboard.deliveries import breaker, webhooks
from tests.conftest import connect


def test_deliveries_page_shows_open_breakers_and_disabled_endpoints(client, login_as, app):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        ep = webhooks.create_endpoint(c, t, "https://hooks.example.test/a", ["order.paid"])
        gone = webhooks.create_endpoint(c, t, "https://hooks.example.test/gone")
        webhooks.disable_endpoint(c, t, gone["id"], "http_410")
        cfg = ProviderSettings(breaker_failures=2)
        for _ in range(2):
            breaker.record(c, f"endpoint:{ep['id']}", False, code="http_503", tenant_id=t, config=cfg)
            breaker.record(c, "provider:sms_gateway", False, code="sms_timeout", config=cfg)
    login_as("ops")
    r = client.get("/deliveries/")
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert 'data-open="2"' in html and 'data-disabled="1"' in html
    assert f'data-breaker="endpoint:{ep["id"]}" data-state="open"' in html
    assert 'data-breaker="provider:sms_gateway" data-state="open"' in html
    assert f'data-endpoint="{gone["id"]}" data-enabled="false"' in html and "http_410" in html
    part = client.get("/deliveries/_breakers", headers={"HX-Request": "true"})
    assert part.status_code == 200 and "<html" not in part.get_data(as_text=True)


def test_a_tenant_admin_sees_only_its_own(client, login_as, app):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        other = auth.ensure_tenant(c, "other")["id"]
        mine = webhooks.create_endpoint(c, t, "https://hooks.example.test/mine")
        theirs = webhooks.create_endpoint(c, other, "https://hooks.example.test/theirs")
        breaker.record(c, "provider:smtp", False, config=ProviderSettings(breaker_failures=1))
    login_as("admin", tenant="acme", operator=False)
    html = client.get("/deliveries/").get_data(as_text=True)
    assert str(mine["id"]) in html and str(theirs["id"]) not in html
    assert "provider:smtp" not in html  # the platform's providers are for operator staff


def test_webhooks_list_and_deliveries_table_show_each_endpoints_last_error_rate_and_dead(client, login_as, app):
    """Issue 44: the endpoint the dead letters came from no longer looks healthy on the lists: its last error
    (code and readable detail), its failure rate and its dead count, each linked to its page; a quiet
    endpoint shows none of them."""
    import uuid
    from datetime import timedelta

    from tests.support import dashboard as seed

    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        bad = webhooks.create_endpoint(c, t, "https://hooks.example.test/bad", ["*"])
        quiet = webhooks.create_endpoint(c, t, "https://hooks.example.test/quiet", ["*"])
        now = seed.db_now(c)
        deliveries = seed.jobs(c, t, 4, "webhook.deliver",
                               {"endpoint_id": str(bad["id"]), "event_id": str(uuid.uuid4())})
        seed.kill(c, deliveries[:3], "http_400", at=now - timedelta(minutes=5),
                  detail='HTTP 400: {"error": "invalid_payload"}')
        seed.attempt(c, deliveries[3], "succeeded", at=now - timedelta(minutes=1))
    login_as("admin")
    for path, link_id in (("/webhooks/", "endpoint"), ("/deliveries/", "breaker-endpoint")):
        html = client.get(path).get_data(as_text=True)
        row = html[html.index(f'data-endpoint="{bad["id"]}"'):]
        row = row[:row.index("</tr>")]
        assert 'data-last-error="http_400"' in row, path
        assert "invalid_payload" in row, path                       # the readable detail, not only the code
        assert 'data-failure-rate="0.750"' in row and "75%" in row, path   # 3 of 4 attempts failed
        assert 'data-dead-count="3"' in row, path
        assert f'href="/webhooks/{bad["id"]}#endpoint-dead"' in row, path
        assert f'href="/webhooks/{bad["id"]}#endpoint-last-error"' in row, path
        other = html[html.index(f'data-endpoint="{quiet["id"]}"'):]
        other = other[:other.index("</tr>")]
        assert 'data-last-error=""' in other and 'data-failure-rate=""' in other and 'data-dead-count="0"' in other
