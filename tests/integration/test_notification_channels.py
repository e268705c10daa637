"""Notification channels are catalogue entries, and the database checks channel values against
``notification_channels`` (migrations 0068/0069) instead of CHECK lists."""
from __future__ import annotations

import uuid

import psycopg
import pytest

from opsboard import auth, channels
from opsboard.catalogue import Catalogue
from opsboard.features import build_catalogue
from opsboard.notifications import policy, preferences
from tests.conftest import CATALOGUE


def _user(conn, tenant):
    return auth.create_user(conn, f"u-{uuid.uuid4().hex[:8]}@example.test", "correct horse battery", "member",
                            tenant["slug"])


def test_the_built_ins_are_registered_by_the_features_that_send_them():
    cat = build_catalogue(modules=())
    assert {n: c.registered_by for n, c in cat.channels.items()} == {
        "inbox": "notifications", "push": "deliveries", "sms": "deliveries", "email": "deliveries"}
    assert cat.channels["inbox"].hand_over is None and cat.channels["inbox"].reach is None
    assert all(callable(cat.channels[n].hand_over) and callable(cat.channels[n].reach) for n in ("push", "sms", "email"))
    assert channels.channel_names() == ("inbox", "push", "sms", "email")


def test_the_migration_seeds_the_built_ins_and_replaces_the_check_lists_by_keys(conn):
    rows = {r["name"]: r for r in conn.execute("SELECT * FROM notification_channels")}
    assert {"inbox", "push", "sms", "email"} <= set(rows)
    keys = {(r["table"], r["def"]) for r in conn.execute(
        "SELECT conrelid::regclass::text AS table, pg_get_constraintdef(oid) AS def, convalidated FROM pg_constraint "
        "WHERE confrelid = 'notification_channels'::regclass")}
    assert {t for t, _ in keys} == {"deliveries", "notification_preferences", "notification_templates"}
    assert conn.execute("SELECT count(*) AS n FROM pg_constraint WHERE confrelid = 'notification_channels'::regclass "
                        "AND NOT convalidated").fetchone()["n"] == 0
    assert conn.execute("SELECT count(*) AS n FROM pg_constraint WHERE contype = 'c' AND conname IN "
                        "('deliveries_channel_check', 'notification_preferences_channel_check', "
                        "'notification_templates_channel_check')").fetchone()["n"] == 0


def test_a_channel_without_a_row_is_refused_by_the_database(conn, tenant):
    user = _user(conn, tenant)
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        with conn.transaction():
            conn.execute("INSERT INTO notification_preferences (tenant_id, user_id, category, channel, enabled) "
                         "VALUES (%s, %s, 'system', 'pigeon', false)", (tenant["id"], user["id"]))


def test_sync_writes_a_registered_channel_once_and_then_its_preferences_are_accepted(conn, tenant, monkeypatch):
    cat = Catalogue()
    channels.define_channel(cat, "pigeon", label="Pigeon", labels={"fa": "کبوتر", "en": "Pigeon"},
                            hand_over=lambda *a, **k: "ref", reach=lambda conn, d: "loft",
                            states=("sent",), registered_by="tests")
    # queued and digested: every channel with a hand-over (the fan-out queues it or counts it into a digest)
    assert cat.channels["pigeon"].states == ("queued", "sent", "suppressed", "digested")
    assert channels.sync(conn, cat) == 1
    assert channels.sync(conn, cat) == 0                     # already equal: nothing written
    row = conn.execute("SELECT * FROM notification_channels WHERE name = 'pigeon'").fetchone()
    assert (row["label"], row["states"], row["registered_by"]) == ("Pigeon", ["queued", "sent", "suppressed", "digested"], "tests")
    monkeypatch.setitem(CATALOGUE.channels, "pigeon", cat.channels["pigeon"])
    user = _user(conn, tenant)
    preferences.set_preference(conn, tenant["id"], user["id"], "system", "pigeon", False)
    grid = {r["category"]: r["channels"] for r in preferences.grid(conn, tenant["id"], user["id"])}
    assert grid["system"]["pigeon"] is False and grid["ticket"]["pigeon"] is True


def test_a_policy_names_only_channels_of_its_catalogue():
    cat = build_catalogue(modules=())
    with pytest.raises(ValueError, match="channels must be among the catalogue's"):
        policy.declare(cat, "thing.happened", category="system", channels=("inbox", "pigeon"),
                       recipients=lambda conn, event: [])
    pol = policy.declare(cat, "thing.happened", category="system", channels=("email",),
                         recipients=lambda conn, event: [])
    assert pol.channels == ("inbox", "email")


def test_define_channel_refuses_what_cannot_work():
    cat = Catalogue()
    with pytest.raises(ValueError, match="channel name"):
        channels.define_channel(cat, "Bad Name", label="x", hand_over=None)
    with pytest.raises(ValueError, match="format"):
        channels.define_channel(cat, "fax", label="Fax", hand_over=None, format="pdf")
    with pytest.raises(ValueError, match="unknown delivery state"):
        channels.define_channel(cat, "fax", label="Fax", hand_over=None, states=("read",))
    with pytest.raises(ValueError, match="hand_over must be callable"):
        channels.define_channel(cat, "fax", label="Fax", hand_over="fax:send")
    assert cat.channels == {}


def test_record_outcome_refuses_a_state_the_channel_cannot_reach():
    with pytest.raises(ValueError, match="cannot reach"):
        channels.record_outcome(None, "push", uuid.uuid4(), uuid.uuid4(), "delivered")


def test_sensitive_content_follows_each_channels_entry(monkeypatch):
    cat = Catalogue()
    channels.define_channel(cat, "pigeon", label="Pigeon", hand_over=lambda *a, **k: "ref")   # default: approved
    monkeypatch.setitem(CATALOGUE.channels, "pigeon", cat.channels["pigeon"])
    names = ("inbox", "push", "sms", "email", "pigeon")
    assert channels.sensitive_rules(names, sensitive=False, approved=False) == ([], [])
    assert channels.sensitive_rules(names, sensitive=True, approved=False) == (["sms", "pigeon"], ["push"])
    assert channels.sensitive_rules(names, sensitive=True, approved=True) == ([], ["push"])
