"""retry.redact, retry.error_code and retry.classify: no personal data survives."""
import re

import pytest
from hypothesis import given, settings, strategies as st

from opsboard import retry
from opsboard.retry import MAX_DETAIL, error_code, redact

EMAILS = ["ali@example.com", "Ali.Rezaei+tag@mail.example.co.uk", "x_y-z@sub.domain.io", "علی@مثال.ایران"]
PHONES = ["09123456789", "+989123456789", "+98 912 345 6789", "0912-345-6789", "(0912) 345-6789",
          "+98 (912) 345 6789", "+1-202-555-0143", "۰۹۱۲۳۴۵۶۷۸۹", "+۹۸ ۹۱۲ ۳۴۵ ۶۷۸۹", "٠٩١٢٣٤٥٦٧٨٩"]
JWT = ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwiZW1haWwiOiJhQGIuY28ifQ."
       "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")
KEYS = ["sk_live_4eC39HqLyjWDarjtT1zdp7dc", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"]
# Wrapped the ways they turn up in exception messages.
CONTEXTS = ["{}", "to {} failed", "to {}.", "<{}>", "({})", "'{}'", "user={}", "recipient: {}, retry later",
            "رسال به {} ناموفق", "x\n{}\ny"]


def _digits(s: str) -> str:
    return re.sub(r"\D", "", s.translate(str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩", "01234567890123456789")))


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("email", EMAILS)
def test_emails_never_survive(email, ctx):
    out = redact(ctx.format(email))
    assert email.split("@")[0] not in out and "@" not in out
    assert "[email]" in out


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("phone", PHONES)
def test_phones_never_survive(phone, ctx):
    out = redact(ctx.format(phone))
    assert "[phone]" in out
    # No run of 4+ digits of the number is left (a partial match would leak its tail).
    assert not re.search(r"\d{4}", _digits(out)), out


def test_persian_digits_are_normalized_before_matching():
    assert redact("شماره ۰۹۱۲۳۴۵۶۷۸۹ نامعتبر است") == "شماره [phone] نامعتبر است"


@pytest.mark.parametrize("text, secret", [
    ("Authorization: Bearer s3cr3t-t0k3n", "s3cr3t-t0k3n"),
    ("authorization: basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("bearer abc.def", "abc.def"),
    ("token=abc123", "abc123"),
    ("access_token=abc123xyz", "abc123xyz"),
    ("refresh_token: r3fr3sh", "r3fr3sh"),
    ("client_secret=hunter2", "hunter2"),
    ("password=hunter2&user=bob", "hunter2"),
    ('{"password": "correct horse battery"}', "horse"),
    ("{'api_key': 'k-123'}", "k-123"),
    ("x-api-key: abcd1234", "abcd1234"),
    ("apikey=zzz999", "zzz999"),
])
def test_bearer_and_named_secrets_never_survive(text, secret):
    out = redact(text)
    assert secret not in out, out
    assert "[redacted]" in out


@pytest.mark.parametrize("ctx", CONTEXTS)
def test_jwts_never_survive(ctx):
    out = redact(ctx.format(JWT))
    for part in JWT.split("."):
        assert part not in out
    assert "eyJ" not in out


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("key", KEYS)
def test_long_hex_and_api_keys_never_survive(key, ctx):
    out = redact(ctx.format(key))
    assert "[token]" in out
    for piece in re.split(r"[/_]", key):
        if len(piece) >= 8:
            assert piece not in out, out


@pytest.mark.parametrize("url, kept, gone", [
    ("https://api.example.com/v1/send?to=ali@example.com&key=abc", "https://api.example.com/v1/send", ["to=", "key=abc"]),
    ("http://sms.example/send?phone=09123456789", "http://sms.example/send", ["phone", "0912"]),
    ("https://example.com/cb#access_token=abc", "https://example.com/cb", ["access_token", "abc"]),
    ("https://user:pa55w0rd@api.example.com/hook", "api.example.com/hook", ["user:", "pa55w0rd"]),
    ("smtp://mailer:s3cret@smtp.example.com:587", "smtp.example.com:587", ["mailer", "s3cret"]),
    ("redis://:secretpass@cache:6379/0", "cache:6379/0", ["secretpass"]),
])
def test_url_query_strings_and_userinfo_never_survive(url, kept, gone):
    out = redact(f"POST {url} failed: 503")
    assert kept in out
    for g in gone:
        assert g not in out, out
    assert out.endswith("failed: 503")


@pytest.mark.parametrize("text", [
    "connection refused", "HTTP 503 Service Unavailable", "took 12.5 ms", "job 42 of 1000",
    "smtp 550 5.1.1 mailbox unavailable", "path /usr/lib/python3.11/site-packages/psycopg/connection.py",
    "ارسال ناموفق بود",
])
def test_ordinary_text_is_kept(text):
    assert redact(text) == text


def test_detail_is_bounded_and_none_passes_through():
    assert redact(None) is None
    out = redact("x " * 10_000)
    assert len(out) <= MAX_DETAIL
    # A long input costs bounded time and still loses its secrets.
    out = redact("a" * 1_000_000 + " ali@example.com")
    assert "ali@example.com" not in out


@given(local=st.from_regex(r"[a-z][a-z0-9._]{0,15}[a-z0-9]", fullmatch=True),
       domain=st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z]\.(com|ir|org|co\.uk)", fullmatch=True),
       prefix=st.sampled_from(["", "to ", "<", "user=", "ایمیل "]), suffix=st.sampled_from(["", ".", ">", " bounced"]))
@settings(max_examples=200)
def test_any_email_is_redacted(local, domain, prefix, suffix):
    email = f"{local}@{domain}"
    out = redact(prefix + email + suffix)
    assert email not in out and "@" not in out


@given(number=st.from_regex(r"(\+98|0)9[0-9]{9}", fullmatch=True),
       sep=st.sampled_from(["", " ", "-", "."]), persian=st.booleans(),
       prefix=st.sampled_from(["", "call ", "tel:", "(", "phone=", "شماره "]),
       suffix=st.sampled_from(["", ".", ")", ",", " failed"]))
@settings(max_examples=300)
def test_any_iranian_mobile_is_redacted(number, sep, persian, prefix, suffix):
    body = number[:-10] + sep.join([number[-10:-7], number[-7:-4], number[-4:]])
    if persian:
        body = body.translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹"))
    out = redact(prefix + body + suffix)
    assert not re.search(r"\d{4}", _digits(out)), out


# ---------------------------------------------------------------- error codes

@pytest.mark.parametrize("raw, code", [
    ("ConnectionError", "connection_error"),
    ("TimeoutError", "timeout_error"),
    ("HTTPError", "http_error"),
    ("SMTPServerDisconnected", "smtp_server_disconnected"),
    ("http_503", "http_503"),
    ("lease_expired", "lease_expired"),
    ("Snoozed", "snoozed"),
    ("", "unknown"),
    (None, "unknown"),
    ("!!!", "unknown"),
])
def test_error_code_is_short_lowercase_and_stable(raw, code):
    assert error_code(raw) == code
    # Stable: a code is its own code, so classifying a stored code again keeps it.
    assert error_code(code) == code


@pytest.mark.parametrize("raw, leaks", [
    ("send to ali@example.com failed", ["ali_", "example"]),
    ("invalid number 09123456789", ["0912", "6789"]),
    ("bad +98 912 345 6789", ["912", "345", "6789"]),
    ("Bearer s3cr3t-t0k3n rejected", ["s3cr3t", "t0k3n"]),
    (JWT, ["eyj", "dozj"]),
    (KEYS[0], ["4ec39", "live"]),
    ("GET https://x.example/?phone=0912&key=k", ["phone", "0912", "key"]),
    ("User AliRezaei@Example.com", ["rezaei", "example"]),
    ("شماره ۰۹۱۲۳۴۵۶۷۸۹", ["0912", "6789"]),
])
def test_error_code_is_free_of_personal_data(raw, leaks):
    code = error_code(raw)
    assert re.fullmatch(r"[a-z0-9_.:-]{1,64}", code), code
    for leak in leaks:
        assert leak not in code, code


@given(st.text(max_size=300))
@settings(max_examples=300)
def test_error_code_of_anything_is_a_short_identifier(raw):
    code = error_code(raw)
    assert re.fullmatch(r"[a-z0-9][a-z0-9_.:-]{0,63}", code) or code == "unknown"
    assert "@" not in code


# ---------------------------------------------------------------- classify

class TenantNotReady(Exception):
    pass


def test_classify_an_arbitrary_exception_is_unknown_with_the_class_name_as_code():
    out = retry.classify(TenantNotReady("tenant of ali@example.com is not ready, call 09123456789"))
    assert isinstance(out, retry.Unknown)
    assert out.code == "tenant_not_ready"
    assert out.detail.startswith("TenantNotReady: ")
    assert "ali@example.com" not in out.detail and "09123456789" not in out.detail
    assert isinstance(retry.classify(ConnectionError("x")), retry.Unknown)
    assert retry.classify(ConnectionError("x")).code == "connection_error"


def test_classify_passes_outcomes_through_and_none_is_success():
    assert retry.classify(None) == retry.Success()
    p = retry.Permanent("http_410")
    assert retry.classify(p) is p
    with pytest.raises(TypeError):
        retry.classify(42)
