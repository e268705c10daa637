"""The job list (filters, search, keyset pages, tenant isolation), a job's page and its payload."""
from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta

import pytest

from opsboard import dashboard
from opsboard.auth import TenantScope
from opsboard.schema import uuid7_floor
from tests.conftest import connect
from tests.support import dashboard as seed

HX = {"HX-Request": "true"}


def _ids(html: str) -> list[str]:
    return re.findall(r'data-job-id="([0-9a-f-]{36})"', html)


@pytest.fixture
def seeded(app):
    """Two tenants, jobs in several queues, types and statuses."""
    with connect(app.extensions["test_db_url"]) as c:
        acme, globex = seed.tenant(c, "acme"), seed.tenant(c, "globex")
        pending = seed.jobs(c, acme, 3, "diag.noop")
        bulk = seed.jobs(c, acme, 2, "diag.sleep", {"ms": 5}, queue="bulk")
        dead = seed.jobs(c, acme, 2, "test.permanent", {"to": "x"})
        seed.kill(c, dead, "http_410", detail="endpoint answered 410 Gone for hook 7")
        retry = seed.jobs(c, globex, 2, "test.raise", correlation_id="req-42")
        seed.fail(c, retry, "smtp_timeout", detail="the relay did not answer within 30 s")
        done = seed.jobs(c, globex, 1, "diag.noop")
        seed.succeed(c, done)
    return {"acme": acme, "globex": globex, "pending": pending, "bulk": bulk, "dead": dead, "retry": retry,
            "done": done}


def test_list_shows_every_job_newest_first(client, login_as, seeded):
    login_as("ops")
    r = client.get("/jobs/")
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    ids = _ids(html)
    everything = [str(i) for k in ("pending", "bulk", "dead", "retry", "done") for i in seeded[k]]
    assert sorted(ids) == sorted(everything)
    assert ids == sorted(ids, reverse=True)  # UUIDv7: newest first
    assert 'data-rows="10"' in html
    assert "http_410" in html and "smtp_timeout" in html and "globex" in html


@pytest.mark.parametrize("query, expect", [
    ("queue=bulk", ["bulk"]),
    ("type=test.permanent", ["dead"]),
    ("status=dead", ["dead"]),
    ("status=retryable", ["retry"]),
    ("status=succeeded", ["done"]),
    ("error_code=smtp_timeout", ["retry"]),
    ("correlation_id=req-42", ["retry"]),
    ("q=HTTP_41", ["dead"]),                  # the error code, case-insensitive
    ("q=did+not+answer", ["retry"]),          # an attempt's detail
    ("q=100%25", []),                         # % is literal, not a wildcard
    ("status=pending&queue=default", ["pending"]),
])
def test_filters_and_search(client, login_as, seeded, query, expect):
    login_as("ops")
    r = client.get(f"/jobs/_rows?{query}", headers=HX)
    assert r.status_code == 200, r.get_data(as_text=True)
    want = sorted(str(i) for k in expect for i in seeded[k])
    assert sorted(_ids(r.get_data(as_text=True))) == want
    assert r.headers["HX-Push-Url"].startswith("/jobs/?")


def test_filter_by_tenant(client, login_as, seeded):
    login_as("ops")
    html = client.get(f"/jobs/?tenant_id={seeded['globex']}").get_data(as_text=True)
    assert sorted(_ids(html)) == sorted(str(i) for i in seeded["retry"] + seeded["done"])


def test_time_range_filters_on_created_at(client, login_as, app):
    with connect(app.extensions["test_db_url"]) as c:
        t = seed.tenant(c, "acme")
        ids = {str(i) for i in seed.jobs(c, t, 2)}
        now = seed.db_now(c)
    login_as("ops")
    hour_ago, in_an_hour = (now - timedelta(hours=1)), (now + timedelta(hours=1))
    fmt = "%Y-%m-%dT%H:%M"
    html = client.get(f"/jobs/?since={hour_ago:{fmt}}&until={in_an_hour:{fmt}}").get_data(as_text=True)
    assert set(_ids(html)) == ids
    assert _ids(client.get(f"/jobs/?since={in_an_hour:{fmt}}").get_data(as_text=True)) == []
    assert _ids(client.get(f"/jobs/?until={hour_ago:{fmt}}").get_data(as_text=True)) == []
    r = client.get(f"/jobs/?since={in_an_hour:{fmt}}&until={hour_ago:{fmt}}", headers={"Accept": "application/json"})
    assert r.status_code == 400 and r.json["error"] == "invalid_filter"


def test_time_range_with_ids_of_that_time(conn):
    """created_at bounds become id bounds: a job is found by the time its id says."""
    t = seed.tenant(conn)
    [job] = seed.jobs(conn, t, 1)
    now = seed.db_now(conn)
    scope = TenantScope(all=True)
    f = dashboard.JobFilter(since=now - timedelta(minutes=1), until=now + timedelta(minutes=1))
    assert [r["id"] for r in dashboard.list_jobs(conn, scope, f).rows] == [job]
    f = dashboard.JobFilter(since=now + timedelta(minutes=1))
    assert dashboard.list_jobs(conn, scope, f).rows == []
    f = dashboard.JobFilter(until=now - timedelta(minutes=1))
    assert dashboard.list_jobs(conn, scope, f).rows == []


def test_keyset_pages_of_fifty(client, login_as, app):
    with connect(app.extensions["test_db_url"]) as c:
        t = seed.tenant(c, "acme")
        ids = [str(i) for i in seed.jobs(c, t, 120)]
    login_as("ops")
    seen, url, links = [], "/jobs/?queue=default", []
    pages = 0
    while url:
        html = client.get(url).get_data(as_text=True)
        page = _ids(html)
        pages += 1
        assert len(page) == (50 if pages < 3 else 20)
        seen += page
        m = re.search(r'rel="next" href="([^"]+)"', html)
        url = m.group(1).replace("&amp;", "&") if m else None
        if url:
            links.append(url)
    assert pages == 3
    assert len(links) == 2 and all("before=" in u and "queue=default" in u and "offset" not in u for u in links)
    assert seen == sorted(ids, reverse=True)


def test_tenant_scoped_user_sees_only_their_tenant(client, login_as, seeded):
    login_as("ops", tenant="acme", operator=False)
    html = client.get("/jobs/").get_data(as_text=True)
    acme_jobs = {str(i) for k in ("pending", "bulk", "dead") for i in seeded[k]}
    assert set(_ids(html)) == acme_jobs
    assert client.get(f"/jobs/{seeded['retry'][0]}").status_code == 404
    assert client.get(f"/jobs/{seeded['retry'][0]}/payload").status_code == 404
    # Filtering by another tenant's id or correlation finds nothing.
    assert _ids(client.get(f"/jobs/?tenant_id={seeded['globex']}").get_data(as_text=True)) == []
    assert _ids(client.get("/jobs/?correlation_id=req-42").get_data(as_text=True)) == []


@pytest.mark.parametrize("query, code", [
    ("status=bogus", "invalid_filter"), ("q=ab", "search_too_short"), ("queue=nope", "invalid_filter"),
    ("since=yesterday", "invalid_date"), ("tenant_id=42", "invalid_filter"), ("before=zzz", "invalid_filter"),
])
def test_bad_filters_are_400(client, login_as, query, code):
    login_as("ops")
    r = client.get(f"/jobs/?{query}", headers={"Accept": "application/json"})
    assert r.status_code == 400 and r.json["error"] == code


def test_list_needs_jobs_view(client, login_as):
    login_as("support_agent")
    assert client.get("/jobs/").status_code == 403
    assert client.get("/dead/").status_code == 403


# ---------------------------------------------------------------- one job

def test_detail_shows_fields_attempts_replays_and_links(client, login_as, app):
    with connect(app.extensions["test_db_url"]) as c:
        t = seed.tenant(c, "acme")
        event = uuid.uuid4()
        [dead] = seed.jobs(c, t, 1, "test.permanent", {"n": 1}, correlation_id="req-7", event_id=event)
        seed.kill(c, [dead], "http_410", detail="گیرنده پیدا نشد (410)")
    login_as("ops")
    html = client.get(f"/jobs/{dead}").get_data(as_text=True)
    assert "test.permanent" in html and "acme" in html and "http_410" in html
    assert f'href="/jobs/?correlation_id=req-7"' in html
    assert f'href="/jobs/?event_id={event}"' in html
    assert '<td dir="auto" class="attempt-detail" data-attempt-detail>گیرنده پیدا نشد (410)</td>' in html      # Persian, as written
    assert "host-1:100:abc" in html and "never replayed" in html
    # Replay it, then both pages link to each other.
    key = seed.request_key(html)
    r = client.post(f"/jobs/{dead}/replay", data={"reason": "provider fixed", "request_key": key,
                                                   "csrf_token": client.csrf}, headers=HX)
    new = re.search(r'data-new-job-id="([^"]+)"', r.get_data(as_text=True)).group(1)
    html = client.get(f"/jobs/{dead}").get_data(as_text=True)
    assert f'href="/jobs/{new}"' in html and "never replayed" not in html
    html = client.get(f"/jobs/{new}").get_data(as_text=True)
    assert f'href="/jobs/{dead}"' in html and "this job replays" in html
    # Its correlation id carried over: the filtered list shows both.
    assert sorted(_ids(client.get("/jobs/?correlation_id=req-7").get_data(as_text=True))) == sorted([str(dead), new])


def test_unknown_or_malformed_job_is_404(client, login_as):
    login_as("ops")
    assert client.get(f"/jobs/{uuid.uuid4()}").status_code == 404
    assert client.get("/jobs/not-a-uuid").status_code == 404


def test_payload_is_redacted_and_cut_at_4kb(client, login_as, app):
    payload = {
        "email": "ali.rezaei@example.com", "contact": {"phone": "+98 912 345 6789", "mobile": 989123456789},
        "api_token": "short", "note": "سلام، سفارش شما ثبت شد ۱۲", "hook": "https://h.example/x?sig=abc",
        "auth": {"password": "hunter2"}, "ids": [1, 2, 3], "zz_padding_after_the_rest": "lorem ipsum " * 500,
    }
    with connect(app.extensions["test_db_url"]) as c:
        t = seed.tenant(c, "acme")
        [job] = seed.jobs(c, t, 1, "test.permanent", payload)
    login_as("ops")
    html = client.get(f"/jobs/{job}").get_data(as_text=True)
    for secret in ("ali.rezaei", "912 345 6789", "989123456789", "hunter2", "sig=abc", '"short"'):
        assert secret not in html, secret
    for key in ("email", "contact", "phone", "mobile", "api_token", "note", "hook", "password", "ids"):
        assert f"&#34;{key}&#34;" in html, key
    assert "سلام، سفارش شما ثبت شد ۱۲" in html  # Persian text and digits kept
    assert '<pre dir="ltr" class="payload">' in html  # JSON reads left to right, in fa pages too (issue 14)
    pre = re.search(r'<pre dir="ltr" class="payload">(.*?)</pre>', html, re.S).group(1)
    assert len(pre.encode()) < 4096 + 600  # 4 KB of JSON (escaped for HTML) and the ellipsis
    assert f'href="/jobs/{job}/payload"' in html
    full = client.get(f"/jobs/{job}/payload").get_data(as_text=True)
    assert full.count("lorem ipsum") == 500 and "ali.rezaei" not in full and "hunter2" not in full
    assert "[email]" in full and "[phone]" in full and "[redacted]" in full


def test_small_payload_has_no_payload_link(client, login_as, app):
    with connect(app.extensions["test_db_url"]) as c:
        t = seed.tenant(c, "acme")
        [job] = seed.jobs(c, t, 1, "diag.noop", {"order_id": 7})
    login_as("ops")
    html = client.get(f"/jobs/{job}").get_data(as_text=True)
    assert "&#34;order_id&#34;: 7" in html and f"/jobs/{job}/payload" not in html


def test_no_route_edits_a_payload(app):
    payload_rules = [r for r in app.url_map.iter_rules() if r.endpoint.startswith("jobs.") and "payload" in r.rule]
    assert [r.endpoint for r in payload_rules] == ["jobs.payload"]
    for rule in payload_rules:
        assert rule.methods <= {"GET", "HEAD", "OPTIONS"}, rule


@pytest.mark.parametrize("query", ["status=dead", "error_code=http_410", "status=dead&error_code=http_410"])
def test_keyset_pages_of_a_status_or_code_behind_a_backlog(client, login_as, app, query):
    """A status or an error code leads the list's ORDER BY (the index that starts with it gives
    the order, not the primary key walked past the newer backlog): the pages are still every
    match, newest first, fifty at a time (issue 24)."""
    with connect(app.extensions["test_db_url"]) as c:
        t = seed.tenant(c, "acme")
        dead = seed.jobs(c, t, 60, "test.permanent", {"to": "x"})
        seed.kill(c, dead, "http_410")
        seed.jobs(c, t, 30)  # the newer backlog
    login_as("ops")
    seen, url = [], f"/jobs/?{query}"
    while url:
        html = client.get(url).get_data(as_text=True)
        seen += _ids(html)
        m = re.search(r'rel="next" href="([^"]+)"', html)
        url = m.group(1).replace("&amp;", "&") if m else None
    assert seen == sorted((str(i) for i in dead), reverse=True)


def test_search_for_the_beginning_of_a_job_id(client, login_as, seeded):
    """8 or more hex digits (dashes where a UUID has them) find jobs by id, inside the scope: a
    primary-key range, not a substring search of every error code and detail (issue 24)."""
    dead = str(seeded["dead"][0])
    login_as("ops")
    for term in (dead[:8], dead[:13], dead[:23].upper(), dead):
        ids = _ids(client.get(f"/jobs/_rows?q={term}", headers=HX).get_data(as_text=True))
        assert dead in ids and all(i.startswith(term.lower()) for i in ids), term
    assert _ids(client.get("/jobs/_rows?q=ffffffff", headers=HX).get_data(as_text=True)) == []
    assert dashboard.id_prefix_range("0190ab1") is None            # too short: a text search
    assert dashboard.id_prefix_range("0190ab12-3c4d-") is not None
    assert dashboard.id_prefix_range("0190ab123c4d") is None       # no dash where a UUID has one


def test_search_by_id_stays_inside_the_scope(client, login_as, seeded):
    dead, retry = str(seeded["dead"][0]), str(seeded["retry"][0])
    login_as("ops", tenant="globex", operator=False)
    assert _ids(client.get(f"/jobs/_rows?q={dead}", headers=HX).get_data(as_text=True)) == []  # acme's
    assert _ids(client.get(f"/jobs/_rows?q={retry}", headers=HX).get_data(as_text=True)) == [retry]


@pytest.mark.parametrize("status", ["dead", "pending"])
def test_a_tenants_viewer_pages_through_one_status(client, login_as, app, status):
    """A tenant's viewer's list of a rare status leads with its tenant (jobs_tenant_listed_idx,
    issue 24): every match of its own tenant, newest first, none of another's."""
    with connect(app.extensions["test_db_url"]) as c:
        acme, globex = seed.tenant(c, "acme"), seed.tenant(c, "globex")
        mine = seed.jobs(c, acme, 55, "test.permanent", {"to": "x"})
        theirs = seed.jobs(c, globex, 5, "test.permanent", {"to": "x"})
        if status == "dead":
            seed.kill(c, mine + theirs, "http_410")
            seed.jobs(c, acme, 10, "test.permanent", {"to": "x"})  # its newer backlog
    login_as("ops", tenant="acme", operator=False)
    seen, url = [], f"/jobs/?status={status}"
    while url:
        html = client.get(url).get_data(as_text=True)
        seen += _ids(html)
        m = re.search(r'rel="next" href="([^"]+)"', html)
        url = m.group(1).replace("&amp;", "&") if m else None
    assert seen == sorted((str(i) for i in mine), reverse=True)


def test_search_reads_the_details_of_a_window_and_every_error_code(client, login_as, app):
    """Bounded at any size (issue 24): a text search reads the details of the attempts finished in
    the last SEARCH_DETAIL_WINDOW (or since the filter's "created from"), and says so; error codes
    match in every job, however old, page after page."""
    with connect(app.extensions["test_db_url"]) as c:
        acme = seed.tenant(c, "acme")
        now = seed.db_now(c)
        created = now - timedelta(hours=3, minutes=1)   # created before its attempt, with the id of that time
        old = [c.execute("INSERT INTO jobs (id, type, tenant_id, queue, payload, created_at, available_at, max_attempts)"
                         " VALUES (%s, 'test.permanent', %s, 'default', '{}', %s, %s, 3) RETURNING id",
                         (uuid7_floor(created), acme, created, created)).fetchone()["id"]]
        seed.kill(c, old, "http_410", at=now - timedelta(hours=3), detail="receiver answered 410 Gone, long ago")
        new = seed.jobs(c, acme, 1, "test.permanent", {"to": "x"})
        seed.kill(c, new, "http_410", at=now - timedelta(minutes=5), detail="receiver answered 410 Gone just now")
        coded = seed.jobs(c, acme, 55, "test.raise", {"to": "x"})
        seed.kill(c, coded, "smtp_mailbox_gone", at=now - timedelta(days=3), with_attempt=False)
    login_as("ops")
    html = client.get("/jobs/_rows?q=long+ago", headers=HX).get_data(as_text=True)
    assert _ids(html) == [] and "data-search-since" in html
    assert _ids(client.get("/jobs/_rows?q=just+now", headers=HX).get_data(as_text=True)) == [str(new[0])]
    # A range set by hand is searched one window at a time, newest first: 4 hours back reads the
    # last SEARCH_DETAIL_WINDOW and links to the window before (24 hours of attempts took 138-262 ms
    # at ten million jobs); the window ending at the range's end finds the old detail.
    since = (now - timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M")
    html = client.get(f"/jobs/_rows?q=long+ago&since={since}", headers=HX).get_data(as_text=True)
    assert _ids(html) == [] and "data-search-earlier" in html
    window_start = datetime.fromisoformat(re.search(r'data-search-since="([^"]+)"', html).group(1))
    assert now - dashboard.SEARCH_DETAIL_WINDOW - timedelta(minutes=1) <= window_start
    until = (now - timedelta(hours=2, minutes=45)).strftime("%Y-%m-%dT%H:%M")
    html = client.get(f"/jobs/_rows?q=long+ago&since={since}&until={until}", headers=HX).get_data(as_text=True)
    assert _ids(html) == [str(old[0])]
    # Following the links back reaches it too, and stops at the range's start.
    url, pages = f"/jobs/_rows?q=long+ago&since={since}", 0
    while url and not _ids(html := client.get(url, headers=HX).get_data(as_text=True)):
        m = re.search(r'href="([^"]+)" data-search-earlier', html)
        url, pages = (m.group(1).replace("&amp;", "&").replace("/jobs/?", "/jobs/_rows?") if m else None), pages + 1
    assert _ids(html) == [str(old[0])] and 2 <= pages <= 8
    html = client.get(f"/jobs/_rows?q=long+ago&since={(now - timedelta(minutes=20)).strftime('%Y-%m-%dT%H:%M')}",
                      headers=HX).get_data(as_text=True)
    assert "data-search-earlier" not in html   # the range is inside one window: nothing left before it
    # An error code 3 days old, 55 jobs: found through the code, newest first, over two pages.
    seen, url = [], "/jobs/?q=MAILBOX_G"
    while url:
        page = client.get(url).get_data(as_text=True)
        seen += _ids(page)
        m = re.search(r'rel="next" href="([^"]+)"', page)
        url = m.group(1).replace("&amp;", "&") if m else None
    assert seen == sorted((str(i) for i in coded), reverse=True)


def test_search_by_error_code_stays_inside_the_scope(client, login_as, seeded):
    login_as("ops", tenant="globex", operator=False)
    assert _ids(client.get("/jobs/_rows?q=http_4", headers=HX).get_data(as_text=True)) == []  # acme's dead jobs
    assert sorted(_ids(client.get("/jobs/_rows?q=smtp_time", headers=HX).get_data(as_text=True))) == sorted(
        str(i) for i in seeded["retry"])


@pytest.mark.parametrize("filter", [dashboard.JobFilter(status="cancelled"), dashboard.JobFilter(error_code="http_410")])
def test_the_order_lead_reaches_the_sql_as_sent(conn, filter):
    """The status or error code leads the ORDER BY with a test the planner cannot fold into a constant
    (0043). The named queries are sent compacted ("j.status=%(status)s"): the replacement looked for
    the spaced form, found nothing, and the cancelled list walked the primary key past every waiting
    job (79,161 buffers, 452 ms at ten million jobs)."""
    sent = []

    class Recording:
        def execute(self, sql, params=None, **kw):
            sent.append(sql)
            return conn.execute(sql, params, **kw)

        def __getattr__(self, name):
            return getattr(conn, name)

    dashboard.list_jobs(Recording(), TenantScope(all=True), filter)
    [sql] = [s for s in sent if "FROM jobs j" in s]
    assert "= ANY(ARRAY[%(" in sql and ("ORDER BY j.status DESC" in sql or "ORDER BY j.last_error_code DESC" in sql)
