"""Issue 44 ("back links say ← Dead letters even when the page was opened from Queue health"): a back link
names the list page the reader came from, from an allow-listed ``back`` key or a same-site Referer of a
known list page, and never leaves the site."""
from __future__ import annotations

import re
import uuid

import pytest

from tests.conftest import connect
from tests.support import dashboard as seed


@pytest.fixture
def world(app, client, login_as):
    login_as("admin")
    with connect(app.extensions["test_db_url"]) as c:
        from opsboard import auth
        tenant = auth.ensure_tenant(c, "acme")["id"]
        ids = seed.jobs(c, tenant, 3, "test.record", {"key": "a", "ms": 1})
        from worker.services.depth import DepthSampler
        DepthSampler().run_once(c)           # Queue health's per-type rows (and their Cancel waiting… link)
    return {"job": ids[0]}


def _back(html: str) -> tuple[str, str, str]:
    """(key, href, text) of the page's back link."""
    m = re.search(r'<a href="([^"]*)" data-back="([a-z]+)">([^<]*)</a>', html)
    assert m, "no back link"
    return m.group(2), m.group(1).replace("&amp;", "&"), m.group(3)


def test_a_cancel_opened_from_queue_health_leads_back_to_it(client, world):
    """The finding's steps: Queue health's "Cancel waiting…" → the confirmation → Cancel: both pages say
    "← Queue health" (they said "← Dead letters")."""
    queues = client.get("/queues/").get_data(as_text=True)
    link = re.search(r'class="cancel-many-link" href="([^"]+)"', queues).group(1).replace("&amp;", "&")
    assert "back=queues" in link
    html = client.get(link).get_data(as_text=True)
    assert _back(html) == ("queues", "/queues/", "← Queue health")
    assert '<input type="hidden" name="back" value="queues">' in html          # carried by the form
    form = html[html.index('<form method="post" action="/jobs/cancel-many"'):]
    form = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', form[:form.index("</form>")]))
    assert form["back"] == "queues"
    r = client.post("/jobs/cancel-many", data={**form, "reason": "bad batch"})
    assert r.status_code == 200
    assert _back(r.get_data(as_text=True)) == ("queues", "/queues/", "← Queue health")


def test_the_referer_names_a_known_list_page_of_this_site_with_its_filter(client, world):
    job = f"/jobs/{world['job']}"
    assert _back(client.get(job).get_data(as_text=True)) == ("jobs", "/jobs/", "← Jobs")
    html = client.get(job, headers={"Referer": "http://localhost/workers/"}).get_data(as_text=True)
    assert _back(html) == ("workers", "/workers/", "← Workers")
    html = client.get(job, headers={"Referer": "http://localhost/jobs/?status=dead&type=test.record"}).get_data(
        as_text=True)
    assert _back(html) == ("jobs", "/jobs/?status=dead&type=test.record", "← Jobs")   # the list as it was left
    html = client.get(job, headers={"Referer": "http://localhost/dead/"}).get_data(as_text=True)
    assert _back(html)[:2] == ("dead", "/dead/")


@pytest.mark.parametrize("headers, query", [
    ({"Referer": "https://evil.example/queues/"}, ""),                 # another site's address of a list page
    ({"Referer": "http://localhost.evil.example/queues/"}, ""),
    ({"Referer": "http://localhost/login"}, ""),                        # this site, not a list page
    ({"Referer": "javascript:alert(1)//localhost/queues/"}, ""),
    ({}, "?back=//evil.example/"),                                       # not a key of the allow-list
    ({}, "?back=https://evil.example/queues/"),
    ({}, "?back=QUEUES"),
])
def test_anything_else_gives_the_pages_own_default_and_never_leaves_the_site(client, world, headers, query):
    html = client.get(f"/jobs/{world['job']}{query}", headers=headers).get_data(as_text=True)
    assert _back(html) == ("jobs", "/jobs/", "← Jobs")
    assert "evil" not in html


def test_back_links_in_persian(app, client, world):
    with connect(app.extensions["test_db_url"]) as c:
        c.execute("UPDATE users SET locale = 'fa' WHERE email LIKE 'admin-%'")
    html = client.get(f"/jobs/{world['job']}", headers={"Referer": "http://localhost/queues/"}).get_data(as_text=True)
    key, href, text = _back(html)
    assert (key, href) == ("queues", "/queues/") and "سلامت صف‌ها" in text and not re.search("[A-Za-z]", text)
