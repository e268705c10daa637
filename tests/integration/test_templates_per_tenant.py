"""Templates per tenant (issue 42): a tenant's own version, then the platform's, then the shipped one;
authors of two tenants and the operator's author through the web (403s leave every row as it was);
usage counts, rollback and audit per tenant; a tenant's own version reaches its recipients only,
through the worker's executor and the sandbox's SMTP server."""
from __future__ import annotations

import json
import uuid

import pytest

from opsboard import auth, outbox
from opsboard.audit import Actor
from opsboard.errors import OpsError
from opsboard.notifications import fanout, handlers, preferences, render, templates
from tests.conftest import CATALOGUE, connect
from tests.integration.test_notifications import JobStub, _deliveries, _notice, _user  # noqa: F401
from tests.support.delivery import provider_settings, runner  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401

AUTHOR = Actor(label="author@example.test")
KEY = "test_notice.sent"      # declared by tests.integration.test_notifications (inbox, push, email, sms)


def _seed(conn, channel, locale, subject, *, tenant=None, body="b"):
    return templates.seed(conn, KEY, channel, locale, subject, body, "", {},
                          tenant_id=tenant["id"] if tenant else None)


# ---------------------------------------------------------------- lookup order (core)

def test_lookup_order_own_then_platform_then_shipped_each_with_its_locale_chain(conn, make_tenant):
    acme, globex = make_tenant(conn), make_tenant(conn)
    _seed(conn, "inbox", "fa", "platform fa")
    _seed(conn, "inbox", "en", "platform en")
    _seed(conn, "inbox", "fa", "acme fa", tenant=acme)

    def title(tenant, user_locale):
        layers = templates.layers(conn, KEY, tenant["id"])
        subject, _body, version, locale, own = fanout.render_for(
            layers, "inbox", render.locale_chain(user_locale, "fa"), {}, KEY)
        return subject, version, locale, own

    # acme's own fa version wins over the platform's en one, for an en reader too (the tenant's words).
    assert title(acme, "fa") == ("acme fa", 1, "fa", True)
    assert title(acme, "en") == ("acme fa", 1, "fa", True)
    # globex has none of its own: the platform's, in the reader's locale, then fa.
    assert title(globex, "en") == ("platform en", 1, "en", False)
    assert title(globex, "fa") == ("platform fa", 1, "fa", False)
    # acme's own en version: the en reader gets it, the platform's en is not used for acme.
    _seed(conn, "inbox", "en", "acme en", tenant=acme)
    assert title(acme, "en") == ("acme en", 1, "en", True)
    assert title(globex, "en") == ("platform en", 1, "en", False)
    # Each scope numbers its versions: the platform's v2 does not touch acme's live v1.
    _seed(conn, "inbox", "fa", "platform fa 2")
    assert title(acme, "fa") == ("acme fa", 1, "fa", True)
    assert title(globex, "fa") == ("platform fa 2", 2, "fa", False)
    assert {v["subject"] for v in templates.versions(conn, KEY, acme["id"])} == {"acme fa", "acme en"}
    assert {v["subject"] for v in templates.versions(conn, KEY)} == {"platform fa", "platform en", "platform fa 2"}


def test_the_shipped_text_is_the_last_layer(conn, tenant):
    # ticket.sla_breached ships fa and en email texts.  With no published platform version (not seeded
    # yet, or only a platform author's draft) the shipped text is used; seeded, it is the platform's v1;
    # a tenant's own version comes before both.
    key = "ticket.sla_breached"
    shipped = templates.layers(conn, key, tenant["id"]).shipped
    sample = next(t.sample for (k, ch, loc), t in CATALOGUE.shipped_templates.items()
                  if (k, ch, loc) == (key, "email", "en"))
    if not templates.live(conn, key):
        layers = templates.layers(conn, key, tenant["id"])
        assert layers.pick("email", ["en", "fa"])[0] == render.SHIPPED
        subject, _b, version, locale, own = fanout.render_layers(layers, "email", ["en", "fa"], sample)
        assert (version, locale, own) == (None, "en", False) and subject
    templates.seed_shipped(conn, {k: t for k, t in CATALOGUE.shipped_templates.items() if k[0] == key})
    layers = templates.layers(conn, key, tenant["id"])
    assert layers.pick("email", ["en", "fa"])[:2] == (render.PLATFORM, "en")
    assert layers.pick("email", ["en", "fa"])[2]["version"] == 1 and shipped == layers.shipped
    t = CATALOGUE.shipped_templates[(key, "email", "fa")]
    templates.seed(conn, key, "email", "fa", "acme: " + t.subject, t.body, t.variables, t.sample,
                   tenant_id=tenant["id"])
    assert templates.layers(conn, key, tenant["id"]).pick("email", ["en", "fa"])[:2] == (render.OWN, "fa")


# ---------------------------------------------------------------- the core's own check

def test_the_core_refuses_a_write_outside_the_actors_scope(conn, make_tenant):
    acme, globex = make_tenant(conn), make_tenant(conn)
    acme_scope = auth.TenantScope(all=False, ids=(acme["id"],))
    with pytest.raises(OpsError) as e:
        templates.save_draft(conn, AUTHOR, KEY, "inbox", "fa", subject="x", body="y", variables="",
                             tenant_id=globex["id"], scope=acme_scope)
    assert e.value.status == 403
    with pytest.raises(OpsError) as e:
        templates.save_draft(conn, AUTHOR, KEY, "inbox", "fa", subject="x", body="y", variables="",
                             tenant_id=None, scope=acme_scope)
    assert e.value.status == 403
    platform_draft = templates.save_draft(conn, AUTHOR, KEY, "inbox", "fa", subject="p", body="y", variables="")
    with pytest.raises(OpsError) as e:
        templates.publish(conn, platform_draft["id"], AUTHOR, "go", scope=acme_scope)
    assert e.value.status == 403
    assert templates.get(conn, platform_draft["id"])["status"] == "draft"
    mine = templates.save_draft(conn, AUTHOR, KEY, "inbox", "fa", subject="a", body="y", variables="",
                                tenant_id=acme["id"], scope=acme_scope)
    assert templates.publish(conn, mine["id"], AUTHOR, "go", scope=acme_scope)["tenant_id"] == acme["id"]


# ---------------------------------------------------------------- rollback, audit, usage per tenant

def test_rollback_and_audit_stay_in_the_versions_tenant(conn, make_tenant):
    acme = make_tenant(conn)
    _seed(conn, "inbox", "fa", "platform fa")
    scope = auth.TenantScope(all=False, ids=(acme["id"],))
    ids = []
    for subject in ("acme one", "acme two"):
        d = templates.save_draft(conn, AUTHOR, KEY, "inbox", "fa", subject=subject, body="b", variables="",
                                 tenant_id=acme["id"], scope=scope)
        templates.publish(conn, d["id"], AUTHOR, "go", request_key=f"pub-{d['id']}", scope=scope)
        ids.append(d["id"])
    back = templates.rollback(conn, ids[0], AUTHOR, "two was wrong", request_key="rb-" + str(ids[0]), scope=scope)
    assert (back["tenant_id"], back["version"], back["rolled_back_from"]) == (acme["id"], 3, 1)
    assert templates.live(conn, KEY, acme["id"])[("inbox", "fa")]["subject"] == "acme one"
    assert templates.live(conn, KEY)[("inbox", "fa")]["subject"] == "platform fa"     # the platform's untouched
    again = templates.rollback(conn, ids[0], AUTHOR, "two was wrong", request_key="rb-" + str(ids[0]), scope=scope)
    assert again["id"] == back["id"]                                                   # idempotent per key
    rows = conn.execute("SELECT action, tenant_id, after FROM audit_log WHERE action LIKE 'template.%%' "
                        "AND tenant_id = %s ORDER BY id", (acme["id"],)).fetchall()
    assert [r["action"] for r in rows] == ["template.publish", "template.publish", "template.rollback"]
    assert rows[-1]["after"]["scope"] == "tenant" and rows[-1]["after"]["copy_of"] == 1


def test_usage_counts_a_tenants_deliveries_per_version_of_each_scope(conn, make_tenant):
    acme, globex = make_tenant(conn), make_tenant(conn)
    _seed(conn, "inbox", "fa", "platform fa")
    _seed(conn, "inbox", "fa", "acme fa", tenant=acme)
    a1, a2, g1 = _user(conn, acme, locale="fa"), _user(conn, acme, locale="fa"), _user(conn, globex, locale="fa")
    fanout.fan_out(conn, _notice(conn, acme, [a1, a2])["id"])
    fanout.fan_out(conn, _notice(conn, globex, [g1])["id"])

    def inbox_usage(tenant_id):
        return {(u["template_version"], u["own"]): u["deliveries"]
                for u in templates.usage(conn, KEY, tenant_id) if u["channel"] == "inbox"}

    assert inbox_usage(acme["id"]) == {(1, True): 2}          # acme's own v1, twice; none of globex's
    assert inbox_usage(globex["id"]) == {(1, False): 1}       # the platform's v1
    assert inbox_usage(None) == {(1, False): 1}               # platform versions, every tenant
    titles = {r["recipient_id"]: r["title"] for r in conn.execute(
        "SELECT recipient_id, title FROM notifications WHERE recipient_id = ANY(%s)", ([a1, a2, g1],))}
    assert titles == {a1: "acme fa", a2: "acme fa", g1: "platform fa"}


def test_deliver_uses_the_tenants_own_version_and_records_whose(conn, make_tenant):
    acme, globex = make_tenant(conn), make_tenant(conn)
    _seed(conn, "email", "fa", "platform subject", body="<p>platform</p>")
    _seed(conn, "email", "fa", "acme subject", tenant=acme, body="<p>acme</p>")
    sent = {}
    for tenant in (acme, globex):
        uid = _user(conn, tenant, locale="fa")
        ev = _notice(conn, tenant, [uid])
        fanout.fan_out(conn, ev["id"])
        d = _deliveries(conn, ev["id"])[(uid, "email")]
        handlers.deliver(JobStub(conn, {"delivery_id": str(d["id"])}, tenant["id"]))
        after = _deliveries(conn, ev["id"])[(uid, "email")]
        msg = conn.execute("SELECT params FROM outbound_messages WHERE id = %s::uuid",
                           (after["provider_ref"],)).fetchone()
        sent[tenant["slug"]] = (msg["params"]["subject"], after["template_version"], after["template_own"])
    assert sent == {acme["slug"]: ("acme subject", 1, True), globex["slug"]: ("platform subject", 1, False)}


# ---------------------------------------------------------------- the web: two tenants' authors and the operator's

def _form(client, **data):
    return {"csrf_token": client.csrf, "request_key": str(uuid.uuid4()), **data}


def _rows(url):
    with connect(url) as c:
        return [dict(r) for r in c.execute(
            "SELECT id, tenant_id, status, version, subject FROM notification_templates WHERE key = %s "
            "ORDER BY id", (KEY,)).fetchall()]


def test_authors_of_two_tenants_and_the_operators_author(app, client, login_as):
    url = app.extensions["test_db_url"]
    with connect(url) as c:
        acme = auth.ensure_tenant(c, "acme")
        globex = auth.ensure_tenant(c, "globex")
        platform_v1 = _seed(c, "email", "fa", "platform subject")
        platform_draft = templates.save_draft(c, AUTHOR, KEY, "email", "fa", subject="platform draft", body="b",
                                              variables="")
        globex_draft = templates.save_draft(c, AUTHOR, KEY, "email", "fa", subject="globex draft", body="b",
                                            variables="", tenant_id=globex["id"])

    # acme's author: a draft and a publish in acme, nowhere else.
    login_as("template_author", tenant="acme", operator=False)
    r = client.post(f"/templates/{KEY}/draft", data=_form(client, channel="email", locale="fa",
                                                           subject="acme subject", body="<p>acme</p>", variables=""))
    assert r.status_code == 303 and "tenant=acme" in r.headers["Location"]
    [mine] = [row for row in _rows(url) if row["tenant_id"] == acme["id"]]
    assert mine["status"] == "draft" and mine["version"] == 1
    r = client.post(f"/templates/{KEY}/publish/{mine['id']}?tenant=acme", data=_form(client, reason="ours"))
    assert r.status_code == 303

    before = _rows(url)
    forbidden = [
        # a draft in another tenant's scope, by its slug
        client.post(f"/templates/{KEY}/draft?tenant=globex", data=_form(
            client, channel="email", locale="fa", subject="x", body="y", variables="")),
        # another tenant's draft, by its id (whatever the page's tenant says)
        client.post(f"/templates/{KEY}/publish/{globex_draft['id']}?tenant=acme", data=_form(client, reason="x")),
        # the platform's draft and a rollback of the platform's live version
        client.post(f"/templates/{KEY}/publish/{platform_draft['id']}", data=_form(client, reason="x")),
        client.post(f"/templates/{KEY}/rollback/{platform_v1['id']}", data=_form(client, reason="x")),
        client.get(f"/templates/{KEY}?tenant=globex"),
    ]
    # Another tenant's draft by its id is not even found: row-level security hides it (404); the rest is refused.
    assert [r.status_code for r in forbidden] == [403, 404, 403, 403, 403]
    assert _rows(url) == before                                                       # nothing changed
    # acme's pages: its own versions and the platform's published one, read-only; never globex's or a draft.
    html = client.get(f"/templates/{KEY}").get_data(as_text=True)
    assert "acme subject" in html and "platform subject" in html
    assert "globex draft" not in html and "platform draft" not in html
    assert f"/publish/{platform_draft['id']}" not in html and f"/rollback/{platform_v1['id']}" not in html
    index = client.get("/templates/").get_data(as_text=True)
    assert KEY in index
    with connect(url) as c:
        denied = c.execute("SELECT count(*) AS n FROM audit_log WHERE outcome = 'denied'").fetchone()["n"]
        published = c.execute("SELECT tenant_id FROM audit_log WHERE action = 'template.publish' "
                              "AND outcome <> 'denied'").fetchall()
    assert denied >= 1 and [p["tenant_id"] for p in published] == [acme["id"]]

    # acme's admin holds templates.edit too: in acme only.
    client.post("/logout", data={"csrf_token": client.csrf})
    login_as("admin", tenant="acme", operator=False)
    r = client.post(f"/templates/{KEY}/publish/{platform_draft['id']}", data=_form(client, reason="x"))
    assert r.status_code == 403 and _rows(url) == before

    # The operator's author publishes the platform's draft (every tenant without its own gets it).
    client.post("/logout", data={"csrf_token": client.csrf})
    login_as("template_author")
    r = client.post(f"/templates/{KEY}/publish/{platform_draft['id']}", data=_form(client, reason="platform"))
    assert r.status_code == 303
    # The operator's author looks at a tenant's versions through the scope's switch.
    assert "tenant=acme" in client.get("/templates/").get_data(as_text=True)
    assert "acme subject" in client.get(f"/templates/{KEY}?tenant=acme").get_data(as_text=True)
    assert "acme subject" not in client.get(f"/templates/{KEY}").get_data(as_text=True).split('id="inherited"')[0]
    with connect(url) as c:
        assert templates.live(c, KEY)[("email", "fa")]["subject"] == "platform draft"
        assert templates.live(c, KEY, acme["id"])[("email", "fa")]["subject"] == "acme subject"
        row = c.execute("SELECT tenant_id, after FROM audit_log WHERE action = 'template.publish' "
                        "AND target_id = %s", (str(platform_draft["id"]),)).fetchone()
    assert row["tenant_id"] is None and row["after"]["scope"] == "platform"


def test_edit_page_of_a_tenant_starts_from_the_platforms_version_and_previews_per_tenant(app, client, login_as):
    url = app.extensions["test_db_url"]
    with connect(url) as c:
        auth.ensure_tenant(c, "acme")
        _seed(c, "inbox", "fa", "platform title")
    login_as("template_author", tenant="acme", operator=False)
    html = client.get(f"/templates/{KEY}/edit?channel=inbox&locale=fa").get_data(as_text=True)
    assert 'value="platform title"' in html and "tenant=acme" in html
    r = client.post(f"/templates/{KEY}/_preview?tenant=acme", data=_form(
        client, channel="inbox", locale="en", subject="Hello", body="b", variables="", sample=json.dumps({})))
    assert r.status_code == 200 and "platform title" in r.get_data(as_text=True)     # the fa column: inherited
    detail = client.get(f"/templates/{KEY}").get_data(as_text=True)
    assert "write this tenant's own version" in detail and "tenant=acme" in detail
    # The operator's edit page is the platform's.
    client.post("/logout", data={"csrf_token": client.csrf})
    login_as("template_author")
    assert client.get(f"/templates/{KEY}/edit?channel=inbox&locale=fa").status_code == 200


# ---------------------------------------------------------------- through the worker: acme's words reach acme only

def test_a_tenants_own_version_reaches_its_recipient_and_not_another_tenants(db_url, sandbox, runner,
                                                                                provider_settings):
    with connect(db_url) as c:
        acme, globex = auth.ensure_tenant(c, "acme"), auth.ensure_tenant(c, "globex")
        templates.seed(c, KEY, "email", "fa", "platform: {{ text }}", "<p>platform {{ text }}</p>", "text",
                       {"text": "x"})
        templates.seed(c, KEY, "email", "fa", "acme: {{ text }}", "<p>acme {{ text }}</p>", "text",
                       {"text": "x"}, tenant_id=acme["id"])
        users = {}
        for tenant in (acme, globex):
            u = auth.create_user(c, f"{tenant['slug']}-{uuid.uuid4().hex[:6]}@example.test",
                                 "correct horse battery", "support_agent", tenant["slug"])
            preferences.set_profile(c, u["id"], locale="fa")
            users[tenant["slug"]] = u
            with c.transaction():
                ev = outbox.publish(c, KEY, 1, aggregate=("notice", uuid.uuid4().hex), tenant=tenant["id"],
                                    payload={"user_ids": [str(u["id"])], "text": "hi"})
            fanout.fan_out(c, ev["id"])
        jobs = [r["job_id"] for r in c.execute("SELECT job_id FROM deliveries WHERE channel = 'email' "
                                               "AND job_id IS NOT NULL ORDER BY created_at").fetchall()]
    for job_id in jobs:
        assert runner.run(job_id)["status"] == "succeeded"
    with connect(db_url) as c:
        sends = [r["id"] for r in c.execute("SELECT id FROM jobs WHERE type = 'email.send' AND status = 'pending'")]
    for job_id in sends:
        assert runner.run(job_id)["status"] == "succeeded"
    got = {rcpt: rec["subject"] for rec in sandbox.records("email") for rcpt in rec["rcpt_to"]}
    assert got == {users["acme"]["email"]: "acme: hi", users["globex"]["email"]: "platform: hi"}
    with connect(db_url) as c:
        rows = {r["recipient_id"]: r for r in c.execute(
            "SELECT recipient_id, status, template_version, template_own FROM deliveries WHERE channel = 'email'")}
    assert rows[users["acme"]["id"]]["template_own"] is True
    assert rows[users["globex"]["id"]]["template_own"] is False
    assert {r["status"] for r in rows.values()} == {"sent"}



# ---------------------------------------------------------------- the migration keeps today's templates as the platform's

def test_migration_0070_keeps_every_template_as_a_platform_version(databases, tmp_path):
    import shutil

    from opsboard import migrate

    url = databases.empty()
    try:
        mdir = tmp_path / "migrations"
        mdir.mkdir()
        found = migrate.discover()
        mine = next(m for m in found if m.name == "templates_per_tenant")
        for m in found:
            if m.version < mine.version:
                shutil.copy(m.path, mdir / m.path.name)
        migrate.migrate(url, mdir, log=lambda *_: None)
        with connect(url) as c:
            acme = auth.ensure_tenant(c, "acme")
            c.execute("INSERT INTO notification_templates (id, key, channel, locale, version, subject, body, status, "
                      "author_label, published_at) VALUES (gen_random_uuid(), %s, 'inbox', 'fa', 1, 'before 0070', "
                      "'b', 'published', 'seed', now())", (KEY,))
        shutil.copy(mine.path, mdir / mine.path.name)
        migrate.migrate(url, mdir, log=lambda *_: None)
        with connect(url) as c:
            [row] = c.execute("SELECT tenant_id, version FROM notification_templates").fetchall()
            assert row == {"tenant_id": None, "version": 1}
            assert templates.live(c, KEY)[("inbox", "fa")]["subject"] == "before 0070"
            layers = templates.layers(c, KEY, acme["id"])
            assert not layers.own and layers.pick("inbox", ["fa"])[0] == render.PLATFORM
            # acme's own v1 beside the platform's v1: each scope numbers its own.
            templates.seed(c, KEY, "inbox", "fa", "acme", "b", "", {}, tenant_id=acme["id"])
            assert templates.live(c, KEY, acme["id"])[("inbox", "fa")]["version"] == 1
    finally:
        databases.drop(url)
