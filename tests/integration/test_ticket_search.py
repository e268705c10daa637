"""Ticket search: the subject is matched through opsboard_search_normalize (0015), the term through
opsboard.persian.normalize_search, so Arabic/Persian letters, ZWNJ and digit scripts find the same ticket."""
from __future__ import annotations

import pytest

from opsboard.auth import TenantScope
from opsboard.tickets import service
from tests.support.tickets import make_desk

# (stored subject, typed search): each pair must find the ticket, and only it.
CASES = [
    ("مشكل ورود كاربر علي", "مشکل ورود کاربر علی"),        # Arabic kaf/yeh stored, Persian typed
    ("مشکل ورود کاربر علی", "مشكل ورود كاربر علي"),        # and the other way round
    ("فاکتور شماره ۱۲۳۴", "فاکتور شماره 1234"),             # Persian digits stored, Latin typed
    ("invoice 5678 missing", "invoice ۵۶۷۸"),                # Latin stored, Persian digits typed
    ("سفارش ٤٢ ارسال نشد", "سفارش ۴۲"),                     # Arabic-Indic stored, Persian typed
    ("نمی\u200cتوانم پرداخت کنم", "نمیتوانم پرداخت"),        # ZWNJ stored, typed without
    ("نمیتوانم وارد شوم", "نمی\u200cتوانم وارد"),            # typed with ZWNJ
]


@pytest.fixture
def desk(conn):
    return make_desk(conn)


def _ids(conn, search):
    return [r["id"] for r in service.list_queue(conn, TenantScope(all=True), search=search, limit=200)]


@pytest.mark.parametrize("stored, typed", CASES)
def test_search_finds_the_same_ticket_whatever_the_forms(conn, desk, stored, typed):
    other = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"],
                                  subject="Unrelated subject", body="b")
    ticket = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject=stored,
                                   body="b")
    found = _ids(conn, typed)
    assert ticket["id"] in found and other["id"] not in found
    assert ticket["id"] in _ids(conn, stored)


def test_percent_and_underscore_match_literally(conn, desk):
    plain = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"],
                                  subject="disk at 95 percent", body="b")
    literal = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"],
                                    subject="disk at 95% on db_1", body="b")
    assert _ids(conn, "95%") == [literal["id"]]
    assert _ids(conn, "db_1") == [literal["id"]]
    assert plain["id"] not in _ids(conn, "disk_at")


def test_number_search_accepts_persian_digits(conn, desk):
    ticket = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="s", body="b")
    typed = str(ticket["number"]).translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹"))
    assert ticket["id"] in _ids(conn, typed)
