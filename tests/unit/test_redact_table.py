"""opsboard.redact: one table of what must be redacted and what must be kept (issue 15)."""
import pytest

from opsboard import retry
from opsboard.redact import luhn_valid, redact, redact_identifier, redact_payload, secret_key

# (text, what must not survive, the marker expected)
SHOULD = [
    ("card 4111111111111111 declined", "4111111111111111", "[card]"),
    ("card 4111 1111 1111 1111 declined", "1111 1111", "[card]"),
    ("paid 5500-0000-0000-0004", "5500", "[card]"),
    ("paid with 378282246310005.", "378282246310005", "[card]"),
    ("IBAN IR062960000000100324200001 unknown", "IR0629600000001003", "[iban]"),
    ("to IR06 2960 0000 0010 0324 2000 01 failed", "2960 0000", "[iban]"),
    ("DE89370400440532013000 rejected", "DE8937", "[iban]"),
    ("GB82 WEST 1234 5698 7654 32", "WEST 1234", "[iban]"),
    ("national id 0012345678 invalid", "0012345678", "[phone]"),
    ("ssn 123-45-6789", "6789", "[phone]"),
    ("کد ملی ۰۰۱۲۳۴۵۶۷۸ نامعتبر", "0012345678", "[phone]"),
    ("otp:frank@example.com:7f3a", "frank@example.com", "[email]"),
    ("password hunter22 rejected", "hunter22", "[redacted]"),
    ("Authorization: Bearer abc", "abc", "[redacted]"),
    ("bearer abc.def", "abc.def", "[redacted]"),
    ("token=abc", "abc", "[redacted]"),
]

# Text that must come back unchanged.
SHOULD_NOT = [
    "password reset link sent",
    "Password reset requested by the user",
    "token expired",
    "reset",
    "job 42 of 1000",
    "4111111111111112",                     # 16 digits, fails the Luhn check
    "job 0192f0e4-8c1e-7b31-9a55-3f0c4a2b1d00 replayed",  # a UUID is an identifier
    "HTTP 503 Service Unavailable",
    "took 12.5 ms on 2026-11-30 01:11:23",
    "since 2026-11-30T01:11:23.5+03:30",
    "ارسال ناموفق بود",
    "shipping address updated",
]


@pytest.mark.parametrize("text, gone, marker", SHOULD)
def test_should_be_redacted(text, gone, marker):
    out = redact(text)
    assert gone not in out, out
    assert marker in out, out


@pytest.mark.parametrize("text", SHOULD_NOT)
def test_should_not_be_redacted(text):
    assert redact(text) == text


@pytest.mark.parametrize("key, secret", [
    ("national_id", True), ("nationalId", True), ("national_code", True), ("ssn", True), ("iban", True),
    ("card_number", True), ("cardNumber", True), ("passport", True), ("otp_code", True), ("pin", True),
    ("secrets", True), ("client_secret", True), ("apiKey", True),
    ("shipping", False), ("discard_after", False), ("opinion", False), ("reset_reason", False), ("name", False),
    ("spinner", False), ("keyboard", False),
])
def test_payload_keys(key, secret):
    assert secret_key(key) is secret


def test_payload_values_under_ordinary_keys():
    out = redact_payload({"note": "card 4111111111111111", "account": "IR062960000000100324200001",
                          "id": 1234567890, "national_id": "X12", "detail": "password reset"})
    assert out == {"note": "card [card]", "account": "[iban]", "id": "[phone]", "national_id": "[redacted]",
                   "detail": "password reset"}


def test_identifiers_keep_their_shape():
    assert redact_identifier("otp:frank@example.com:42") == "otp:[email]:42"
    assert redact_identifier("order-42") == "order-42"
    assert redact_identifier(None) is None


def test_luhn():
    assert luhn_valid("4111111111111111") and luhn_valid("378282246310005")
    assert not luhn_valid("4111111111111112")


def test_retry_reexports_the_one_function():
    assert retry.redact is redact
