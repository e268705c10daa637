"""The notifications page shows the digests that wait to be sent, in the viewer's tenant scope, and an
item's delivery that went into a digest as "in a digest" (fa translated)."""
from __future__ import annotations

import re

from opsboard import auth
from tests.conftest import connect
from tests.integration.test_digests import T0, _send, _user


def _pending(app, slug):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, slug)
        uid = _user(c, t, locale="en")
        ev = None
        for i in range(3):
            ev, _ = _send(c, t, "test.digest_window", [uid], f"{slug} {i}", T0)
    return t, ev


def test_pending_digests_are_listed_in_the_viewers_scope(app, client, login_as):
    _pending(app, "digest-a")
    _t, ev_b = _pending(app, "digest-b")
    login_as("ops")                                   # the operator's: every tenant
    html = client.get("/notifications/").get_data(as_text=True)
    table = html.split('id="pending-digests"', 1)[1]
    assert len(re.findall(r'data-digest="', table)) == 4            # email and SMS of each tenant
    assert "digest-a" in table and "digest-b" in table
    assert 'data-kind="window"' in table and "a window from the first item" in table
    client.post("/logout", data={"csrf_token": client.csrf})

    login_as("ops", tenant="digest-b", operator=False)              # a tenant's: its own only
    table = client.get("/notifications/").get_data(as_text=True).split('id="pending-digests"', 1)[1]
    assert len(re.findall(r'data-digest="', table)) == 2
    assert "digest-b" in table and "digest-a" not in table

    # The last item's email went into the digest: its status reads so, in Persian too.
    html = client.get(f"/notifications/?event_id={ev_b['id']}", headers={"Accept-Language": "en"}).get_data(as_text=True)
    assert 'data-channel="email" data-status="digested"' in html and "in a digest" in html
    client.post("/locale", data={"csrf_token": client.csrf, "locale": "fa"})
    html = client.get(f"/notifications/?event_id={ev_b['id']}").get_data(as_text=True)
    assert 'data-status="digested"' in html and "in a digest" not in html
    assert "خلاصه‌های در انتظار" in html


def test_no_pending_digests_says_so(client, login_as):
    login_as("ops")
    html = client.get("/notifications/").get_data(as_text=True)
    assert 'id="pending-digests"' in html and "No pending digests." in html
