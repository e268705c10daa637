"""POST /api/v1/events with a web process's leased tokens (backpressure.TokenLeases, migration 0061):
the bucket in PostgreSQL still grants every token, a key already answered gives its leased token back,
an expired lease's unspent tokens go back with the next take, and refusals stay 429 + Retry-After."""
from __future__ import annotations

import uuid

import pytest

from opsboard import backpressure
from opsboard.web.app import create_app
from tests.conftest import CATALOGUE, connect, make_config
from tests.integration.test_api import ORDER, bearer, key_for  # noqa: F401  (fixture)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _limits(app, tenant, rate, burst):
    with connect(app.extensions["test_db_url"]) as c:
        c.execute("UPDATE tenants SET enqueue_rate = %s, enqueue_burst = %s WHERE id = %s", (rate, burst, tenant["id"]))


def _tokens(app, tenant) -> float:
    with connect(app.extensions["test_db_url"]) as c:
        row = c.execute("SELECT tokens FROM rate_limits WHERE name = %s", (f"enqueue:{tenant['id']}",)).fetchone()
    return row["tokens"]


def _events(app, tenant) -> int:
    with connect(app.extensions["test_db_url"]) as c:
        return c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                         (tenant["id"],)).fetchone()["n"]


@pytest.fixture
def clock(app):
    """The app's leases on a clock of the test's (a lease lasts 1,000 s of it unless the test moves it)."""
    c = Clock()
    app.extensions["opsboard_token_leases"] = backpressure.TokenLeases(seconds=1000, most=64, clock=c)
    return c


def _post(client, secret, key=None):
    # A whole UUID as the order id: eight random hex digits were sometimes eight decimal digits with a
    # leading 0, which the personal-data check reads as a phone number (422, about one run in thirty).
    headers = bearer(secret, **({"Idempotency-Key": key} if key else {}))
    return client.post("/api/v1/events", json={**ORDER, "payload": {**ORDER["payload"], "order_id": str(uuid.uuid4())}}
                       if key is None else ORDER, headers=headers)


def test_a_lease_admits_without_the_bucket_and_gives_back_what_it_did_not_spend(app, client, key_for, clock):
    secret, tenant = key_for()
    _limits(app, tenant, 0.01, 100)       # 1,000 s of 0.01/s: leases of 10; refill negligible in the test
    assert _post(client, secret).status_code == 202          # the first take asks for 1 (rate not known)
    assert _tokens(app, tenant) == pytest.approx(99, abs=0.05)
    assert _post(client, secret).status_code == 202          # a lease of 10: one spent, 9 held
    assert _tokens(app, tenant) == pytest.approx(89, abs=0.05)
    assert all(_post(client, secret).status_code == 202 for _ in range(3))
    assert _tokens(app, tenant) == pytest.approx(89, abs=0.05)   # spent from the lease: the bucket untouched
    clock.t += 1000                                              # the lease expires with 6 unspent ...
    assert _post(client, secret).status_code == 202              # ... given back by the next take of 10
    assert _tokens(app, tenant) == pytest.approx(89 + 6 - 10, abs=0.1)
    assert _events(app, tenant) == 6


def test_a_key_already_answered_puts_its_leased_token_back(app, client, key_for, clock):
    secret, tenant = key_for()
    _limits(app, tenant, 0.01, 100)
    _post(client, secret), _post(client, secret)                 # a lease of 10 held, 9 left
    first = _post(client, secret, key="k-1")                     # 8 left
    leases = app.extensions["opsboard_token_leases"]
    held = leases._held[f"enqueue:{tenant['id']}"].tokens
    again = _post(client, secret, key="k-1")
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_data() == first.get_data()
    assert leases._held[f"enqueue:{tenant['id']}"].tokens == held      # taken for the replay, and given back
    conflict = client.post("/api/v1/events", json={**ORDER, "correlation_id": "other"},
                           headers=bearer(secret, **{"Idempotency-Key": "k-1"}))
    assert conflict.status_code == 409 and leases._held[f"enqueue:{tenant['id']}"].tokens == held
    assert _events(app, tenant) == 3


def test_processes_leasing_one_bucket_never_admit_more_than_it_grants(app, client, key_for, db_url):
    # Two web processes (two apps, each its own leases) on one tenant whose bucket holds 12 and refills
    # 0.01 a second: whatever the leases, exactly 12 events are accepted, the rest refused with Retry-After.
    secret, tenant = key_for()
    _limits(app, tenant, 0.01, 12)
    other = create_app({"OPSBOARD": make_config(database_url=db_url), "DATABASE": app.extensions["opsboard_db"],
                        "TESTING": True, "CATALOGUE": CATALOGUE})
    for a in (app, other):
        a.extensions["opsboard_token_leases"] = backpressure.TokenLeases(seconds=1000, most=64, clock=Clock())
    clients = [client, other.test_client()]
    answers = [_post(clients[i % 2], secret) for i in range(30)]
    codes = [r.status_code for r in answers]
    assert codes.count(202) == 12 and set(codes) == {202, 429}, codes
    assert all(int(r.headers["Retry-After"]) >= 1 and r.json["error"] == "tenant_rate_limited"
               for r in answers if r.status_code == 429)
    assert _events(app, tenant) == 12
