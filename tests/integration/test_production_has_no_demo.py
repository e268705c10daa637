"""A production process has no demo: no job type, event, subscription, provider, policy or
shipped template of the demo plug-in in the catalogue built without extension modules, no
``demo_*`` table after the product's migrations, no route of the demo, and no handler the
worker would import from the tools layer (issue 22)."""
from __future__ import annotations

from opsboard import db, otp
from opsboard.catalogue import activate, active
from opsboard.db import Database
from opsboard.features import build_catalogue
from opsboard.migrate import migrate
from opsboard.tools import demo_domain
from opsboard.web.app import create_app
from tests.conftest import connect, make_config

DEMO_PREFIXES = ("demo", "outbox_demo", "user.signed_up", "order.paid", "otp.requested")


def _demo(name: str) -> bool:
    return name.startswith(DEMO_PREFIXES)


def production_config(**changes):
    """The tests' configuration without their extension modules (tests' job types, the demo plug-in)."""
    return make_config(job_modules=(), **changes)


def production_catalogue():
    return build_catalogue(production_config())


def test_the_production_catalogue_has_nothing_of_the_demo():
    cat = production_catalogue()
    assert "opsboard.tools.demo_catalogue" not in cat.registered
    assert [n for n, _ in cat.job_types if _demo(n)] == []
    assert [n for n, _ in cat.event_types if _demo(n)] == []
    assert [n for n, _ in cat.upcasters if _demo(n)] == []
    assert [n for n in cat.providers if _demo(n)] == []
    assert [n for n in cat.policies if _demo(n)] == []
    assert [k for k in cat.shipped_templates if _demo(k[0])] == []
    subs = [s for subs in cat.subscriptions.values() for s in subs]
    assert [s for s in subs if _demo(s.event_type) or _demo(s.job_type)] == []
    assert [e for e in cat.subscriptions if _demo(e)] == []
    # The product's own OTP is a direct send, no event: its job type and SMS text are the deliveries'.
    assert ("sms.otp", 1) in cat.job_types and ("otp", 1) in cat.message_templates


def test_the_worker_of_a_production_catalogue_imports_no_handler_of_the_tools_layer():
    types = production_catalogue().job_types.values()
    modules = {fn.__module__ for jt in types for fn in (jt.run, jt.prepare) if fn is not None}
    assert modules and [m for m in modules if m.startswith(("opsboard.tools", "worker"))] == []
    # Every handler lives in the feature (or infrastructure module) that defines its type.
    assert all(jt.run is not None for jt in types)


def test_the_demo_plugin_registers_its_handlers_by_string():
    cat = build_catalogue(production_config(), modules=["opsboard.tools.demo_catalogue"])
    paths = {jt.handler for (name, _), jt in cat.job_types.items() if _demo(name)}
    assert paths and all(p.startswith("opsboard.tools.demo_handlers:") for p in paths)
    assert all(jt.run is not None and jt.run.__module__ == "opsboard.tools.demo_handlers"
               for (name, _), jt in cat.job_types.items() if _demo(name))


def test_the_product_schema_has_no_demo_table(databases):
    url = databases.empty()
    try:
        migrate(url, log=lambda *_: None)
        with connect(url) as c:
            tables = [r["table_name"] for r in c.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_name LIKE 'demo\\_%'")]
            assert tables == []
            assert c.execute("SELECT to_regclass('otp_requests') IS NOT NULL AS ok").fetchone()["ok"]
    finally:
        databases.drop(url)


def test_the_web_app_of_a_production_catalogue_has_no_demo_route(db_url):
    cat = production_catalogue()
    database = Database(db_url, min_size=1, max_size=1).open()
    previous = active()
    try:
        app = create_app({"OPSBOARD": production_config(database_url=db_url), "DATABASE": database, "TESTING": True,
                          "CATALOGUE": cat})
        rules = [r.rule for r in app.url_map.iter_rules()]
        assert "/api/v1/otp" in rules and "/api/v1/otp/<otp_id>/verify" in rules
        assert [r for r in rules if "demo" in r.lower()] == []
    finally:
        activate(previous)  # create_app made the production catalogue this process's
        database.close()


def test_the_products_named_queries_name_no_demo_table():
    assert [n for n in db.queries if "demo" in n] == []
    assert [n for n, sql in db.queries.items() if "demo_" in sql] == []
    assert set(demo_domain.DEMO_QUERIES).isdisjoint(db.queries)


def test_the_demo_schema_applies_again_without_change(db_url):
    with connect(db_url) as c:
        before = c.execute("SELECT count(*) AS n FROM pg_class WHERE relname LIKE 'demo\\_%'").fetchone()["n"]
        demo_domain.apply_schema(c)
        assert c.execute("SELECT count(*) AS n FROM pg_class WHERE relname LIKE 'demo\\_%'").fetchone()["n"] \
            == before > 0


def test_the_otp_feature_is_the_products():
    assert otp.__name__ == "opsboard.otp" and otp.request_otp.__module__ == "opsboard.otp"
