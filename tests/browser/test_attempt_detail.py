"""A failed attempt says why, readably and redacted, and the endpoint behind it shows its health
(issue 44).

A real receiver on 127.0.0.1 answers a webhook delivery 400 with a body that holds a secret-like
token and an email address; the delivery runs through the worker's own executor and goes dead.  In
Chromium: the job page shows the status and the redacted excerpt (neither the token nor the address);
the payload's endpoint id is a link to the endpoint's page, which shows the last error, the failure
rate and the dead count, and links to the dead job.
"""
from __future__ import annotations

import ipaddress
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from opsboard import auth
from opsboard.config import ProviderSettings
from opsboard.deliveries import webhooks
from tests.browser.test_ops_journey import PASSWORD, browser, server  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support.delivery import Runner, insert_event

pytestmark = pytest.mark.browser

TOKEN = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
EMAIL = "alice.smith@example.com"
ERROR_BODY = json.dumps({"error": "invalid_payload", "message": f"api_key={TOKEN} rejected; contact {EMAIL}"})


@pytest.fixture
def receiver():
    """Answers 400 with ERROR_BODY until told otherwise (``answers``: the statuses to give, in turn)."""
    answers: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            status = answers.pop(0) if answers else 400
            body = ERROR_BODY.encode() if status >= 400 else b"{}"
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_port}", answers
    srv.shutdown()
    t.join(5)


def test_a_dead_delivery_shows_why_and_its_endpoint_shows_its_health(app, server, browser, receiver):  # noqa: F811
    url = app.extensions["test_db_url"]
    base, answers = receiver
    with connect(url) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        acme = auth.ensure_tenant(c, "acme")["id"]
        ep = webhooks.create_endpoint(c, acme, f"{base}/hooks", ("*",))
        dead_job = webhooks.fanout(c, insert_event(c, acme))[0]
        ok_job = webhooks.fanout(c, insert_event(c, acme))[0]
    runner = Runner(url, ProviderSettings(webhook_allow=(ipaddress.ip_network("127.0.0.1/32"),), webhook_timeout=5.0))
    try:
        assert runner.run(dead_job["id"])["status"] == "dead"
        answers.append(200)
        assert runner.run(ok_job["id"])["status"] == "succeeded"
    finally:
        runner.close()
    with connect(url) as c:
        (stored,) = c.execute("SELECT error_code, detail FROM job_attempts WHERE job_id = %s",
                              (dead_job["id"],)).fetchall()
    assert stored["error_code"] == "http_400"
    assert stored["detail"].startswith("HTTP 400: ") and "invalid_payload" in stored["detail"]
    assert TOKEN not in stored["detail"] and EMAIL not in stored["detail"]

    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("response", lambda r: problems.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "ops@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login" not in u)

    # The job page: the status and the provider's own words, redacted.
    page.goto(f"{server}/jobs/{dead_job['id']}")
    detail = page.locator("[data-attempt-detail]").first.inner_text()
    assert "HTTP 400" in detail and "invalid_payload" in detail and "[email]" in detail and "[redacted]" in detail
    assert TOKEN not in page.content() and EMAIL not in page.content()

    # The payload's endpoint id is a link to the endpoint's page.
    page.click("a[data-endpoint-link]")
    page.wait_for_url(f"**/webhooks/{ep['id']}")
    assert "http_400" in page.locator("#endpoint-last-error").inner_text()
    assert "HTTP 400" in page.locator("[data-last-error-detail]").inner_text()
    assert TOKEN not in page.content() and EMAIL not in page.content()
    # One failed attempt of two that reached the endpoint.
    assert page.locator("[data-failure-rate]").get_attribute("data-failure-rate") == "0.500"
    assert page.locator("[data-dead-count]").get_attribute("data-dead-count") == "1"
    assert page.locator("tr[data-dead-job]").count() == 1
    assert page.locator("a[data-dead-jobs-link]").count() == 1
    # ... and back to the dead job.
    page.locator(f"tr[data-dead-job='{dead_job['id']}'] a").click()
    page.wait_for_url(f"**/jobs/{dead_job['id']}")

    # The deliveries page and the webhooks list link each endpoint to its page.
    page.goto(f"{server}/deliveries/")
    assert page.locator(f"#breaker-endpoint-{ep['id']}").get_attribute("href").endswith(f"/webhooks/{ep['id']}")
    assert problems == []


def test_the_endpoint_page_is_scoped_and_answers_404_as_json_for_an_unknown_id(app, client, login_as):
    with connect(app.extensions["test_db_url"]) as c:
        other = auth.ensure_tenant(c, "other")["id"]
        ep = webhooks.create_endpoint(c, other, "https://hooks.example.com/x", ("*",))
        mine = webhooks.create_endpoint(c, auth.ensure_tenant(c, "acme")["id"], "https://hooks.example.com/y", ("*",))
    login_as("ops", tenant="acme", operator=False)
    json_please = {"Accept": "application/json"}
    r = client.get(f"/webhooks/{ep['id']}", headers=json_please)
    assert r.status_code == 404 and r.get_json()["error"] == "not_found"
    r = client.get("/webhooks/not-a-uuid", headers=json_please)
    assert r.status_code == 404 and r.get_json()["error"] == "not_found"
    # The user's own tenant's endpoint answers.
    r = client.get(f"/webhooks/{mine['id']}")
    assert r.status_code == 200 and "https://hooks.example.com/y" in r.get_data(as_text=True)
