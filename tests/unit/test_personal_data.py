"""The one personal-data detector (opsboard.personal_data): checksums, digit scripts, payload screens."""
import random
import string
import uuid

import pytest
from hypothesis import given, settings, strategies as st
from stdnum import iban as stdnum_iban, luhn

from opsboard import jobtypes
from opsboard.persian import fa_digits
from opsboard.personal_data import find_personal_data, iran_national_id_valid, MASK
from opsboard.redact import redact

digits = st.text(alphabet="0123456789", min_size=15, max_size=15)


def card_from(body: str) -> str:
    return body + luhn.calc_check_digit(body)


def grouped(number: str, sep: str) -> str:
    return sep.join(number[i:i + 4] for i in range(0, len(number), 4))


@settings(max_examples=200)
@given(body=digits, sep=st.sampled_from(["", " ", "-"]), persian=st.booleans())
def test_valid_cards_are_caught_in_any_digits_and_grouping(body, sep, persian):
    text = grouped(card_from(body), sep)
    if persian:
        text = fa_digits(text)
    assert find_personal_data(f"paid with {text} today") == "card"


@settings(max_examples=200)
@given(body=digits)
def test_sixteen_digit_ids_failing_luhn_pass(body):
    good = luhn.calc_check_digit(body)
    bad = body + str((int(good) + 1) % 10)
    assert find_personal_data(f"order {bad}") is None
    assert find_personal_data(grouped(bad, " ")) is None


def test_arabic_indic_digits_are_read_too():
    assert find_personal_data("٤١١١١١١١١١١١١١١١") == "card"


def iban_for(country: str, bban: str) -> str:
    check = stdnum_iban.calc_check_digits(country + "00" + bban)
    return country + check + bban


@settings(max_examples=100)
@given(bban=st.text(alphabet="0123456789", min_size=22, max_size=22), spaced=st.booleans())
def test_iranian_ibans_with_valid_mod97_are_caught_and_others_not(bban, spaced):
    good = iban_for("IR", bban)
    bad = good[:2] + f"{(int(good[2:4]) + 1) % 100:02d}" + good[4:]
    show = (lambda s: grouped(s, " ")) if spaced else (lambda s: s)
    assert find_personal_data(f"to {show(good)}") == "iban"
    assert find_personal_data(f"to {show(bad)}") != "iban"


@pytest.mark.parametrize("iban", ["DE89370400440532013000", "GB82 WEST 1234 5698 7654 32",
                                  "IR062960000000100324200001"])
def test_known_ibans(iban):
    assert find_personal_data(iban) == "iban"


def national_id(first9: str) -> str:
    r = sum(int(d) * (10 - i) for i, d in enumerate(first9)) % 11
    return first9 + str(r if r < 2 else 11 - r)


@settings(max_examples=200)
@given(first9=st.text(alphabet="0123456789", min_size=9, max_size=9).filter(lambda s: len(set(s)) > 1),
       dashed=st.booleans(), persian=st.booleans())
def test_iranian_national_ids_valid_caught_invalid_not(first9, dashed, persian):
    good = national_id(first9)
    bad = good[:9] + str((int(good[9]) + 1) % 10)
    assert iran_national_id_valid(good) and not iran_national_id_valid(bad)
    fmt = (lambda s: f"{s[:3]}-{s[3:9]}-{s[9]}") if dashed else (lambda s: s)
    tr = fa_digits if persian else (lambda s: s)
    assert find_personal_data(f"کد ملی {tr(fmt(good))}") == "national_id"
    assert find_personal_data(f"ref {tr(fmt(bad))}") not in ("national_id", "card", "iban")
    if not dashed:
        assert find_personal_data(f"ref {tr(bad)}") is None  # a bare 10-digit id is no phone either


def test_known_national_ids():
    assert iran_national_id_valid("0013542419") and not iran_national_id_valid("0013542418")
    assert not iran_national_id_valid("1111111111")


@pytest.mark.parametrize("text,kind", [
    ("write to maria.rossi@example.com", "email"), ("رایانامه علی@مثال.ایران", "email"),
    ("+989123456789", "phone"), ("09123456789", "phone"), ("۰۹۱۲ ۳۴۵ ۶۷۸۹", "phone"),
    ("+39 347 123 4567", "phone"), ("call 06 12345678 now", "phone"),
    ("shipped to Maria Rossi", "name"), ("ارسال برای آقای رضایی", "name"), ("مریم احمدی", "name"),
])
def test_emails_phones_and_names(text, kind):
    assert find_personal_data(text) == kind


@settings(max_examples=100)
@given(u=st.uuids())
def test_uuids_pass(u):
    assert find_personal_data(str(u)) is None
    assert find_personal_data(f"job {u} at 2026-11-30T01:02:03Z") is None


@pytest.mark.parametrize("text", ["ord_123456789012", "A1234567", "order 42", "version 2.1.0", "inv-2026-0042",
                                  "سفارش ۱۲۳۴", "پرداخت شد", "EUR", "1250", "4111111111111112"])
def test_ordinary_ids_pass(text):
    assert find_personal_data(text) is None


def test_random_ids_rarely_look_personal():
    rng = random.Random(7)
    for _ in range(500):
        ident = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(20))
        assert find_personal_data(ident) is None, ident


JT = jobtypes.JobType("test.pii", 1, "x:y", jobtypes.JobPolicy(),
                      {"note": jobtypes.Field(str, required=False), "phone": jobtypes.Field(str, pii=True),
                       "tags": jobtypes.Field(list, required=False)})


def test_job_payload_screen_refuses_or_redacts():
    payload = {"phone": "+989123456789", "note": "card 4111 1111 1111 1111", "tags": ["ok", "a@b.io"]}
    with pytest.raises(jobtypes.PersonalDataRefused) as e:
        jobtypes.screen_personal_data(JT, payload)
    assert (e.value.code, e.value.field) == ("personal_data", "payload.note")
    out, redacted = jobtypes.screen_personal_data(JT, payload, "redact")
    assert out == {"phone": "+989123456789", "note": MASK, "tags": ["ok", MASK]}
    assert redacted == ["payload.note", "payload.tags[1]"]
    assert payload["note"].startswith("card")  # the caller's payload is not changed
    assert jobtypes.screen_personal_data(JT, {"phone": "+989123456789"}) == ({"phone": "+989123456789"}, [])


def test_a_log_line_with_a_card_in_persian_digits_is_redacted():
    line = redact(f"charge failed for {fa_digits('4111 1111 1111 1111')} ({uuid.UUID(int=1)})")
    assert "[card]" in line and "1111" not in line and str(uuid.UUID(int=1)) in line


def test_a_key_holding_personal_data_is_found_every_time_short_or_long():
    from opsboard.personal_data import find_in_payload, redact_in_payload
    long_key = "note for " + "x" * 60 + " maria.rossi@example.com"
    for _ in range(2):  # the second answer comes from the keys' cache
        assert find_in_payload({"meta": {"maria.rossi@example.com": 1}}) == ("payload.meta", "email")
        assert find_in_payload({"meta": {long_key: 1}}) == ("payload.meta", "email")
        assert find_in_payload({"meta": {"order_id": "o-1"}}) is None
    assert redact_in_payload({"maria.rossi@example.com": 1})[2] == ("payload", "email")
