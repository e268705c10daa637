"""A dashboard page is one catalogue entry (docs/extending.md, "A dashboard page"): an extension
module adds its blueprint and navigation link; the page keeps the product's sign-in and permission
checks, and a blueprint path that points nowhere stops the web app at start."""
from __future__ import annotations

import pytest

from opsboard.config import ConfigError
from opsboard.db import Database
from opsboard.features import build_catalogue
from opsboard.web.app import create_app
from tests.conftest import TEST_MODULES, csrf_from, make_config


@pytest.fixture
def page_app(db_url):
    cat = build_catalogue(modules=[*TEST_MODULES, "tests.support.page_extension"])
    database = Database(db_url, min_size=1, max_size=2).open()
    app = create_app({"OPSBOARD": make_config(database_url=db_url), "DATABASE": database, "TESTING": True,
                      "CATALOGUE": cat})
    app.extensions["test_db_url"] = db_url
    yield app
    database.close()


def _login(app, client, role, tenant="operator", operator=True):
    import uuid

    from opsboard import auth
    from tests.conftest import connect
    email = f"{role}-{uuid.uuid4().hex[:6]}@example.test"
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, tenant, is_operator=operator)
        auth.create_user(c, email, "correct horse battery", role, tenant)
    r = client.post("/login", data={"email": email, "password": "correct horse battery",
                                    "csrf_token": csrf_from(client)})
    assert r.status_code == 302


def test_an_extension_page_is_served_and_linked_for_those_who_may_open_it(page_app):
    client = page_app.test_client()
    _login(page_app, client, "ops")
    page = client.get("/capacity/")
    assert page.status_code == 200 and 'id="capacity"' in page.get_data(as_text=True)
    home = client.get("/", follow_redirects=True).get_data(as_text=True)
    assert 'href="/capacity/"' in home
    assert ">ظرفیت</a>" in home or ">Capacity</a>" in home   # the extension's own label, in the page's language


def test_an_extension_page_refuses_a_role_without_its_permission(page_app):
    client = page_app.test_client()
    _login(page_app, client, "support_agent")
    assert client.get("/capacity/", headers={"Accept": "application/json"}).status_code == 403
    assert 'href="/capacity/"' not in client.get("/", follow_redirects=True).get_data(as_text=True)


def test_an_extension_page_needs_a_sign_in(page_app):
    r = page_app.test_client().get("/capacity/")
    assert r.status_code == 302 and "/login" in r.headers["Location"]


def test_the_product_alone_has_no_such_page(app):
    assert "capacity" not in app.blueprints


def test_a_page_whose_blueprint_points_nowhere_stops_the_web_app(db_url):
    cat = build_catalogue(modules=TEST_MODULES)
    cat.add_page("nowhere", "tests.support.no_such_module:bp", endpoint="nowhere.index", permission="jobs.view",
                 labels={"fa": "هیچ"})
    database = Database(db_url, min_size=1, max_size=1).open()
    try:
        with pytest.raises(ConfigError, match="page nowhere"):
            create_app({"OPSBOARD": make_config(database_url=db_url), "DATABASE": database, "TESTING": True,
                        "CATALOGUE": cat})
    finally:
        database.close()
