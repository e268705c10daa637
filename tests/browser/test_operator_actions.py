"""Issue 23, "Correctness of operator actions", in a real browser: a bulk replay of dead jobs that share
an idempotency key counts, links and audits each the same way, and the group list follows; the job page
shows the new state after a replay or a resolve, and a repeated form says it returns the first replay;
ticket attachments take a 1.4 MB PDF and refuse a web page, in the form, before uploading where possible."""
from __future__ import annotations

import uuid

import pytest

from opsboard import auth
from opsboard.tickets import service
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed
from tests.support.tickets import make_desk

pytestmark = pytest.mark.browser


def _sign_in(browser, server, email: str, viewport=(1280, 900)):  # noqa: F811
    page = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    page.goto(f"{server}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)
    return page, problems


@pytest.fixture
def ops(app):
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        return seed.tenant(c, "acme")


def _dead(c, tenant, key=None, code="http_410") -> uuid.UUID:
    [j] = seed.jobs(c, tenant, 1, "test.permanent", {"hook_id": 7}, idempotency_key=key)
    seed.kill(c, [j], code)
    return j


def test_bulk_replay_of_dead_jobs_sharing_keys_counts_links_and_audits_alike(app, server, browser, ops, shots):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        # Two dead jobs for each of two keys (each died before the next took the key), and three without.
        dead = [_dead(c, ops, key) for key in ("order-1", "order-1", "order-2", "order-2")]
        dead += [_dead(c, ops) for _ in range(3)]
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/dead/")
    group = page.locator('tr[data-type="test.permanent"][data-error-code="http_410"]')
    assert group.get_attribute("data-open") == "7"
    group.locator("button", has_text="Replay all").click()
    confirm = page.locator("#bulk-panel .confirm")
    confirm.wait_for()
    assert confirm.get_attribute("data-count") == "7"
    confirm.locator("textarea[name=reason]").fill("the endpoint is fixed")
    confirm.locator("button[type=submit]").click()
    result = page.locator("#bulk-result .result.ok")
    result.wait_for()
    # Seven dead jobs replayed as five jobs: the count says both, the links are the five, once each.
    assert result.get_attribute("data-replayed") == "7"
    assert result.get_attribute("data-jobs") == "5" and result.get_attribute("data-created") == "5"
    assert "5 new jobs were created" in result.inner_text()
    links = [a.get_attribute("href") for a in result.locator("a[href^='/jobs/']").all()]
    assert len(links) == 5 and len(set(links)) == 5, links
    # The group list reloads by itself: nothing of the group is open any more.
    page.locator("#dead-groups tr[data-type='test.permanent']").wait_for(state="detached")
    assert page.locator("#dead-groups [data-total-open]").get_attribute("data-total-open") == "0"
    shots(page, "bulk-replayed")
    with connect(app.extensions["test_db_url"]) as c:
        made = c.execute("SELECT id, replay_of FROM jobs WHERE replay_of = ANY(%s)", (dead,)).fetchall()
        audit_rows = c.execute("SELECT target_id, after FROM audit_log WHERE action = 'job.replay'").fetchall()
    assert sorted(f"/jobs/{r['id']}" for r in made) == sorted(links)
    assert sorted(r["target_id"] for r in audit_rows) == sorted(str(d) for d in dead)
    assert {f"/jobs/{r['after']['job_id']}" for r in audit_rows} == set(links)
    # Each dead job's page says what its audit row says: the dead job that shared a key included.
    named = {r["target_id"]: r["after"]["job_id"] for r in audit_rows}
    for d in (dead[1], dead[3], dead[4]):
        page.goto(f"{server}/jobs/{d}")
        replayed_as = page.locator("dt", has_text="Replayed as").locator("xpath=following-sibling::dd[1]")
        assert "never replayed" not in replayed_as.inner_text()
        assert replayed_as.locator(f'a[href="/jobs/{named[str(d)]}"]').count() == 1
        assert page.locator("form[hx-post$='/replay']").count() == 0   # its replay holds the key: no form
    shots(page, "shared-key-dead-job")
    assert problems == [], problems


def test_the_job_page_shows_the_new_state_after_replay_and_resolve(app, server, browser, ops, shots):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        a, b, keyed = _dead(c, ops), _dead(c, ops), _dead(c, ops, key="order-9")
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/jobs/{a}")
    page.fill("form[hx-post$='/replay'] textarea[name=reason]", "the endpoint is back")
    page.click("form[hx-post$='/replay'] button[type=submit]")
    result = page.locator("#job-action-result .result.ok[data-action=replay]")
    result.wait_for()
    new_id = result.get_attribute("data-new-job-id")
    replayed_as = page.locator("dt", has_text="Replayed as").locator("xpath=following-sibling::dd[1]")
    assert replayed_as.locator(f'a[href="/jobs/{new_id}"]').count() == 1
    assert "never replayed" not in replayed_as.inner_text()
    assert page.locator("form[hx-post$='/replay']").count() == 0      # no stale form
    # Focus went to the result, not to the page's body.
    assert page.evaluate("document.activeElement.id") == "job-action-result"
    shots(page, "after-replay")

    page.goto(f"{server}/jobs/{b}")
    page.select_option("form[hx-post$='/resolve'] select[name=resolution]", "ignored")
    page.fill("form[hx-post$='/resolve'] textarea[name=reason]", "the customer closed the account")
    page.click("form[hx-post$='/resolve'] button[type=submit]")
    page.locator("#job-action-result .result.ok[data-action=resolve]").wait_for()
    assert page.locator("dt", has_text="Resolution").count() == 1
    assert "the customer closed the account" in page.locator("dl.fields").inner_text()
    assert page.locator("form[hx-post$='/resolve']").count() == 0
    shots(page, "after-resolve")

    # Two tabs on a keyed dead job: the second replay finds the first one holding the key, and says so.
    first, second = page, page.context.new_page()
    for p in (first, second):
        p.goto(f"{server}/jobs/{keyed}")
    key = second.locator("form[hx-post$='/replay'] input[name=request_key]").get_attribute("value")
    first.fill("form[hx-post$='/replay'] textarea[name=reason]", "first try")
    first.click("form[hx-post$='/replay'] button[type=submit]")
    replay_id = first.locator("#job-action-result .result.ok").get_attribute("data-new-job-id")
    second.fill("form[hx-post$='/replay'] textarea[name=reason]", "second try")
    second.click("form[hx-post$='/replay'] button[type=submit]")
    said = second.locator("#job-action-result .result.ok")
    said.wait_for()
    assert said.get_attribute("data-new-job-id") == replay_id and said.get_attribute("data-created") == "no"
    assert "No new job" in said.inner_text()
    # The same form sent again with another reason (a resubmit): the first result, and it says so.
    again = second.request.post(f"{server}/jobs/{keyed}/replay", form={
        "reason": "third reason", "request_key": key,
        "csrf_token": second.locator("input[name=csrf_token]").first.get_attribute("value")},
        headers={"HX-Request": "true"})
    html = again.text()
    assert again.status == 200 and 'data-repeated="yes"' in html
    assert "the new reason was not recorded" in html and "second try" in html
    with connect(app.extensions["test_db_url"]) as c:
        reasons = [r["reason"] for r in c.execute(
            "SELECT reason FROM audit_log WHERE action = 'job.replay' AND target_id = %s ORDER BY at",
            (str(keyed),)).fetchall()]
    assert reasons == ["first try", "second try"]
    assert problems == [], problems


@pytest.fixture
def ticket(app):
    with connect(app.extensions["test_db_url"]) as c:
        desk = make_desk(c, "acme")
        auth.create_user(c, "agent@example.test", PASSWORD, "support_agent", "acme")
        return service.create_ticket(c, desk.caller("requester"), tenant_id=desk.tenant["id"],
                                     subject="Invoice missing", body="Please resend.", category="billing",
                                     priority="normal")


def test_attachments_take_a_large_pdf_and_refuse_a_web_page_in_the_form(app, server, browser, ticket, shots,  # noqa: F811
                                                                        tmp_path):
    pdf = tmp_path / "invoice.pdf"
    pdf.write_bytes(b"%PDF-1.4\n" + b"0" * (1_400_000 - 16) + b"\n%%EOF\n")   # 1.4 MB; tickets allow 2 MiB
    page_html = tmp_path / "page.html"
    page_html.write_bytes(b"<!doctype html><script>alert(1)</script>")
    disguised = tmp_path / "notes.txt"
    disguised.write_bytes(b"  <html><body onload=alert(1)></body></html>")
    page, problems = _sign_in(browser, server, "agent@example.test")
    page.goto(f"{server}/tickets/{ticket['id']}")
    files = page.locator("#ticket-reply-files")
    # The form says what it takes.
    accept = files.get_attribute("accept").split(",")
    assert ".pdf" in accept and ".png" in accept and ".html" not in accept
    hint = page.locator("#ticket-reply-files-hint")
    assert "PDF" in hint.inner_text() and "2 MiB" in hint.inner_text()

    # A web page is refused as soon as it is chosen: nothing is sent.
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    files.set_input_files(str(page_html))
    error = page.locator('[data-field-error="ticket-reply-files"]')
    assert "page.html" in error.inner_text() and "not accepted" in error.inner_text()
    page.fill("#ticket-reply-body", "Here is the page.")
    page.click("#ticket-btn-reply")
    assert files.evaluate("el => el.validity.valid") is False and sent == []
    shots(page, "html-refused-in-the-form")

    # A page under a .txt name gets past the browser; the server refuses it, in the form.
    files.set_input_files(str(disguised))
    assert error.inner_text() == ""
    page.click("#ticket-btn-reply")
    page.locator('#result-reply [data-error-code="attachment_type_not_allowed"]').wait_for()
    assert page.locator('div[data-kind="reply"]', has_text="Here is the page.").count() == 0

    # A 1.4 MB PDF goes through (the app-wide 1 MiB cap does not apply to ticket replies).
    files.set_input_files(str(pdf))
    page.click("#ticket-btn-reply")
    reply = page.locator('div[data-kind="reply"]', has_text="Here is the page.")
    reply.wait_for()
    assert "invoice.pdf" in reply.inner_text() and "application/pdf" in reply.inner_text()
    shots(page, "pdf-attached")
    with connect(app.extensions["test_db_url"]) as c:
        rows = c.execute("SELECT filename, content_type, size_bytes FROM ticket_attachments WHERE ticket_id = %s",
                         (ticket["id"],)).fetchall()
    assert [(r["filename"], r["content_type"], r["size_bytes"]) for r in rows] == [
        ("invoice.pdf", "application/pdf", 1_400_000)]
    assert problems == [], problems
