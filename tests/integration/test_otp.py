"""The product's one-time passwords (opsboard.otp): a hash stored, the SMS enqueued in the same
transaction on the critical queue, verification once, attempts counted, expiry, tenant isolation.
Time is injected (``now``); nothing sleeps."""
from __future__ import annotations

from datetime import timedelta

import pytest

from opsboard import otp
from opsboard.errors import OpsError

PHONE = "+393471234567"


def _sent_code(conn, request: dict) -> str:
    """The code, as the SMS carries it (the worker renders the message from these params)."""
    return conn.execute("SELECT params FROM outbound_messages WHERE id = %s",
                        (request["message"]["id"],)).fetchone()["params"]["code"]


def _refused(conn, tenant_id, otp_id, code, now) -> str:
    with pytest.raises(OpsError) as exc:
        otp.verify_otp(conn, tenant_id, otp_id, code, now=now)
    return exc.value.code


def _wrong(code: str) -> str:
    return f"{(int(code) + 1) % 10 ** otp.CODE_DIGITS:0{otp.CODE_DIGITS}d}"


def test_a_request_stores_the_codes_hash_and_enqueues_its_sms_in_one_transaction(conn, tenant, t0):
    done = otp.request_otp(conn, tenant["id"], PHONE, now=t0)
    code = _sent_code(conn, done)
    row = conn.execute("SELECT * FROM otp_requests WHERE id = %s", (done["otp"]["id"],)).fetchone()
    assert row["tenant_id"] == tenant["id"] and row["phone"] == PHONE and row["attempts"] == 0
    assert row["code_hash"] == otp.code_hash(row["id"], code)
    assert "code" not in row and code not in [str(v) for v in row.values()]  # the plain code is in no column
    assert row["created_at"] == t0 and row["expires_at"] == t0 + timedelta(seconds=otp.TTL_SECONDS)
    job = done["job"]
    assert (job["type"], job["queue"], job["priority"]) == ("sms.otp", "critical", 0)
    assert job["expires_at"] == row["expires_at"] and job["idempotency_key"] == f"otp:{row['id']}"
    assert job["payload"] == {"message_id": str(done["message"]["id"])}  # the message id only, never the code
    msg = conn.execute("SELECT * FROM outbound_messages WHERE id = %s", (done["message"]["id"],)).fetchone()
    # The phone given, whoever it belongs to (no member of the tenant has it here).
    assert (msg["channel"], msg["recipient"], msg["template"]) == ("sms", PHONE, "otp")
    assert conn.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                        (tenant["id"],)).fetchone()["n"] == 0       # no event: nothing to relay


def test_a_phone_that_is_not_e164_stores_nothing(conn, tenant):
    from opsboard.deliveries.messages import InvalidRecipient
    with pytest.raises(InvalidRecipient):
        otp.request_otp(conn, tenant["id"], "3471234567")
    assert conn.execute("SELECT count(*) AS n FROM otp_requests WHERE tenant_id = %s",
                        (tenant["id"],)).fetchone()["n"] == 0


def test_the_right_code_is_accepted_once(conn, tenant, t0):
    done = otp.request_otp(conn, tenant["id"], PHONE, now=t0)
    code, otp_id = _sent_code(conn, done), done["otp"]["id"]
    assert otp.verify_otp(conn, tenant["id"], otp_id, code, now=t0 + timedelta(seconds=30)) is True
    row = conn.execute("SELECT verified_at, attempts FROM otp_requests WHERE id = %s", (otp_id,)).fetchone()
    assert row == {"verified_at": t0 + timedelta(seconds=30), "attempts": 1}
    assert _refused(conn, tenant["id"], otp_id, code, t0 + timedelta(seconds=31)) == "otp_used"
    assert _refused(conn, tenant["id"], str(otp_id), _wrong(code), t0 + timedelta(seconds=31)) == "otp_used"


def test_a_wrong_code_is_refused_and_every_attempt_counts(conn, tenant, t0):
    done = otp.request_otp(conn, tenant["id"], PHONE, now=t0)
    code, otp_id = _sent_code(conn, done), done["otp"]["id"]
    for n in range(1, otp.MAX_ATTEMPTS):
        assert otp.verify_otp(conn, tenant["id"], otp_id, _wrong(code), now=t0) is False
        assert conn.execute("SELECT attempts FROM otp_requests WHERE id = %s", (otp_id,)).fetchone()["attempts"] == n
    # The last allowed attempt may still be the right code ...
    assert otp.verify_otp(conn, tenant["id"], otp_id, code, now=t0) is True


def test_after_the_last_attempt_even_the_right_code_is_refused(conn, tenant, t0):
    done = otp.request_otp(conn, tenant["id"], PHONE, now=t0)
    code, otp_id = _sent_code(conn, done), done["otp"]["id"]
    for _ in range(otp.MAX_ATTEMPTS):
        assert otp.verify_otp(conn, tenant["id"], otp_id, _wrong(code), now=t0) is False
    assert _refused(conn, tenant["id"], otp_id, code, t0) == "otp_attempts_exhausted"
    # A refused attempt is not counted.
    assert conn.execute("SELECT attempts FROM otp_requests WHERE id = %s",
                        (otp_id,)).fetchone()["attempts"] == otp.MAX_ATTEMPTS


def test_an_expired_code_is_refused(conn, tenant, t0):
    done = otp.request_otp(conn, tenant["id"], PHONE, now=t0)
    code, otp_id = _sent_code(conn, done), done["otp"]["id"]
    expiry = t0 + timedelta(seconds=otp.TTL_SECONDS)
    assert _refused(conn, tenant["id"], otp_id, code, expiry) == "otp_expired"
    assert _refused(conn, tenant["id"], otp_id, code, expiry + timedelta(hours=1)) == "otp_expired"
    assert otp.verify_otp(conn, tenant["id"], otp_id, code, now=expiry - timedelta(seconds=1)) is True


def test_another_tenant_cannot_verify_nor_learn_that_the_otp_exists(conn, tenant, make_tenant, t0):
    done = otp.request_otp(conn, tenant["id"], PHONE, now=t0)
    code, otp_id = _sent_code(conn, done), done["otp"]["id"]
    other = make_tenant(conn)
    assert _refused(conn, other["id"], otp_id, code, t0) == "not_found"
    assert conn.execute("SELECT attempts FROM otp_requests WHERE id = %s", (otp_id,)).fetchone()["attempts"] == 0
    assert otp.verify_otp(conn, tenant["id"], otp_id, code, now=t0) is True


@pytest.mark.parametrize("otp_id", ["not-a-uuid", "0190a0a0-0000-7000-8000-000000000000"])
def test_an_unknown_id_is_not_found(conn, tenant, otp_id):
    assert _refused(conn, tenant["id"], otp_id, "123456", None) == "not_found"


def test_refusals_map_to_404_and_410(conn, tenant, t0):
    done = otp.request_otp(conn, tenant["id"], PHONE, now=t0)
    with pytest.raises(OpsError) as exc:
        otp.verify_otp(conn, tenant["id"], done["otp"]["id"], "000000", now=t0 + timedelta(hours=1))
    assert exc.value.status == 410
    with pytest.raises(OpsError) as exc:
        otp.verify_otp(conn, tenant["id"], "nope", "000000")
    assert exc.value.status == 404
