"""An ops engineer's journey in a real browser: sign in, find a dead letter,
replay it with a reason, see the result inline, find the audit record.

Debian's chromium through the Python playwright package (never
``playwright install``); the app under a real threaded server on a free
loopback port, against a database of its own.  Screenshots go to the test's
tmp_path and are copied to test-output/ (gitignored).
"""
from __future__ import annotations

import os
import shutil
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from opsboard import auth
from opsboard.config import ROOT
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
PASSWORD = "correct horse battery"


@pytest.fixture
def server(app):
    from werkzeug.serving import make_server

    # A thread per request here: the per-process stream cap (2 by default, so that gunicorn's
    # threads stay free for pages) would turn a walk's third open inbox tab into polling.  The cap
    # itself is tested in test_inbox_streams_web and test_inbox_streams.
    app.config.setdefault("SSE_MAX_STREAMS", 50)
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, name="web", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    thread.join(10)


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists():
        # .ci/run installs chromium: under CI a missing browser is a failure, never a silent skip.
        if os.environ.get("CI"):
            pytest.fail("Debian's chromium is missing under CI; .ci/run should have installed it")
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def shots(tmp_path, request):
    folder = tmp_path / "screenshots"
    folder.mkdir()
    taken: list[Path] = []

    def shot(page, name: str) -> None:
        path = folder / f"{len(taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        taken.append(path)

    yield shot
    out = ROOT / "test-output" / request.node.name
    out.mkdir(parents=True, exist_ok=True)
    for path in taken:
        shutil.copy2(path, out / path.name)


@pytest.fixture
def world(app):
    """An ops user, dead jobs to replay, and an open alert for the banner."""
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        acme = seed.tenant(c, "acme")
        now = seed.db_now(c)
        dead = seed.jobs(c, acme, 3, "test.permanent", {"hook_id": 7, "note": "ارسال وب‌هوک"},
                         correlation_id="req-demo")
        seed.kill(c, dead, "http_410", at=now - timedelta(minutes=3),
                  detail="POST https://hooks.example/x?[redacted] answered 410 Gone")
        seed.fail(c, seed.jobs(c, acme, 2, "test.raise"), "smtp_timeout", at=now - timedelta(minutes=1))
        seed.jobs(c, acme, 4)  # ready, and no worker: a no_worker alert
        from opsboard.alerts import AlertService as Alerts
        Alerts().run_once(c)
    return {"dead": dead}


def _no_overflow(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_ops_replays_a_dead_job_and_finds_it_in_the_audit_log(app, server, browser, world, shots):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    # Script errors and CSP violations (the browser's 404 for /favicon.ico is not one).
    page.on("console", lambda m: problems.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("response", lambda r: problems.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)

    page.goto(f"{server}/login")
    page.fill("input[name=email]", "ops@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)

    # Home is queue health; its partial refreshes itself: new jobs appear without a reload.
    from opsboard import jobqueue
    from worker.services.depth import DepthSampler
    with connect(app.extensions["test_db_url"]) as c:
        DepthSampler().run_once(c)
    page.goto(f"{server}/")
    page.wait_for_url("**/queues/")
    waiting = page.locator('[data-queue="default"] .value')
    before = int(waiting.inner_text().replace(",", ""))
    with connect(app.extensions["test_db_url"]) as c:
        acme = c.execute("SELECT id FROM tenants WHERE slug = 'acme'").fetchone()["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, acme) for _ in range(5)])
        DepthSampler().run_once(c)
    with page.expect_response(lambda r: "/queues/_health" in r.url, timeout=10_000):
        pass
    page.wait_for_function(
        "n => document.querySelector('[data-queue=\"default\"] .value').textContent.trim() === String(n)",
        arg=before + 5, timeout=10_000)
    assert page.url.endswith("/queues/")  # refreshed in place, not reloaded
    shots(page, "queue-health")

    # Dead letters: one group of three, and the alert banner (loaded by htmx).
    page.goto(f"{server}/dead/")
    group = page.locator('tr[data-type="test.permanent"][data-error-code="http_410"]')
    assert group.get_attribute("data-open") == "3"
    page.locator("#alert-banner .banner").wait_for()
    assert "open alert" in page.locator("#alert-banner").inner_text()
    shots(page, "dead-letters")

    # The group's jobs, then one job.
    group.locator("a", has_text="Jobs").click()
    page.wait_for_url("**/jobs/?status=dead*")
    assert page.locator("tr[data-job-id]").count() == 3
    shots(page, "dead-jobs")
    job_id = str(world["dead"][0])
    page.locator(f'tr[data-job-id="{job_id}"] a').first.click()
    page.wait_for_url(f"**/jobs/{job_id}")
    assert "ارسال وب‌هوک" in page.locator("pre.payload").inner_text()
    shots(page, "job")

    # A blank reason (spaces pass the browser's "required") is refused inline.
    reason = page.locator("form[hx-post$='/replay'] textarea[name=reason]")
    reason.fill("   ")
    page.click("form[hx-post$='/replay'] button[type=submit]")
    page.locator('#replay-result [data-error-code="reason_required"]').wait_for()
    assert problems == [f"400 {server}/jobs/{job_id}/replay"]
    problems.clear()
    shots(page, "reason-required")

    # Replay with a reason: the page shows the job as it now is, with the result on top (issue 23).
    reason.fill("the endpoint is back")
    page.click("form[hx-post$='/replay'] button[type=submit]")
    result = page.locator("#job-action-result .result.ok")
    result.wait_for()
    assert "Replayed as job" in result.inner_text()
    assert page.url.endswith(f"/jobs/{job_id}")
    new_id = result.get_attribute("data-new-job-id")
    shots(page, "replayed")

    # The audit page has the record, linked back to the dead job.
    page.goto(f"{server}/audit/")
    row = page.locator("tr", has=page.locator("code", has_text="job.replay")).first
    assert "the endpoint is back" in row.inner_text()
    assert row.locator(f'a[href="/jobs/{job_id}"]').count() == 1
    shots(page, "audit")

    # The replay's own page links back to the job it replays.
    page.goto(f"{server}/jobs/{new_id}")
    assert page.locator(f'a[href="/jobs/{job_id}"]').count() >= 1

    # Bulk: replay the other two from the dead-letter page, confirming first.
    page.goto(f"{server}/dead/")
    group = page.locator('tr[data-type="test.permanent"][data-error-code="http_410"]')
    assert group.get_attribute("data-open") == "2"
    group.locator("button", has_text="Replay all").click()
    confirm = page.locator("#bulk-panel .confirm")
    confirm.wait_for()
    assert confirm.get_attribute("data-count") == "2"
    confirm.locator("textarea[name=reason]").fill("replaying the rest")
    confirm.locator("button[type=submit]").click()
    page.locator("#bulk-result .result.ok").wait_for()
    assert page.locator("#bulk-result .result.ok").get_attribute("data-replayed") == "2"
    shots(page, "bulk-replayed")

    # Workers and alerts render too.
    page.goto(f"{server}/workers/")
    assert "No worker is registered" in page.inner_text("main")
    page.goto(f"{server}/alerts/")
    assert "no live worker serves default" in page.inner_text("main")
    shots(page, "alerts")

    assert problems == [], problems  # no CSP violation, no script error
    context.close()


def test_pages_fit_a_phone(server, browser, world, shots):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "ops@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)
    for name, path in [("jobs", "/jobs/"), ("dead", "/dead/"), ("job", f"/jobs/{world['dead'][0]}"),
                       ("workers", "/workers/"), ("alerts", "/alerts/")]:
        page.goto(server + path)
        assert _no_overflow(page), f"{path} is wider than the phone"
        shots(page, f"phone-{name}")
    # The menu opens from its toggle.
    page.click("label.nav-toggle-label")
    assert page.locator(".mainnav a", has_text="Dead letters").is_visible()
    context.close()
