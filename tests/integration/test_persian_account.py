"""Issue 23: the account page's language choice: "from the browser" follows Accept-Language (even after the
header's switch chose Persian), and the confirmation of a change is in the language just chosen."""
from __future__ import annotations


def _save(client, **form):
    return client.post("/account/display", data={"csrf_token": client.csrf, **form},
                       headers={"Accept-Language": "en-GB,en;q=0.9"})


def test_from_the_browser_follows_accept_language(client, login_as):
    login_as("ops")
    assert client.post("/locale", data={"locale": "fa", "csrf_token": client.csrf, "next": "/account"}).status_code == 302
    assert '<html lang="fa"' in client.get("/account", headers={"Accept-Language": "en"}).get_data(as_text=True)
    assert _save(client, locale="").status_code == 303
    html = client.get("/account", headers={"Accept-Language": "en-GB,en;q=0.9"}).get_data(as_text=True)
    assert '<html lang="en"' in html
    fa = client.get("/account", headers={"Accept-Language": "fa-IR,fa;q=0.9"}).get_data(as_text=True)
    assert '<html lang="fa"' in fa


def test_the_confirmation_is_in_the_language_just_chosen(client, login_as):
    login_as("ops")
    _save(client, locale="fa")
    assert '<html lang="fa"' in client.get("/account").get_data(as_text=True)
    _save(client, locale="en")
    html = client.get("/account").get_data(as_text=True)
    assert '<html lang="en"' in html and '<p class="flash">Display settings saved.</p>' in html
    _save(client, locale="fa")
    html = client.get("/account").get_data(as_text=True)
    assert '<html lang="fa"' in html and "Display settings saved." not in html


def test_the_language_switch_returns_to_the_page_with_its_query(client, login_as):
    """The page's script puts the query into "next" (static/js/locale-switch.js; the browser test presses it)."""
    login_as("ops")
    html = client.get("/jobs/?status=dead&q=abc").get_data(as_text=True)
    assert 'name="next" value="/jobs/"' in html and "locale-switch.js" in html
    r = client.post("/locale", data={"locale": "fa", "csrf_token": client.csrf, "next": "/jobs/?status=dead&q=abc"})
    assert r.headers["Location"].endswith("/jobs/?status=dead&q=abc")
