"""The dashboard's payload view: keys kept, personal data and secrets redacted, cut on a character boundary."""
from __future__ import annotations

import json

from opsboard.dashboard import _segments, cut_utf8, payload_text, redact_payload


def test_keys_kept_values_redacted():
    out = redact_payload({"to": "ali@example.com", "phone": "+98 912 345 6789", "n": 989123456789, "qty": 3,
                          "ok": True, "none": None, "nested": [{"token": "abc"}, "sk_live_4eC39HqLyjWDarjtT1zdp7dc"]})
    assert out == {"to": "[email]", "phone": "[phone]", "n": "[phone]", "qty": 3, "ok": True, "none": None,
                   "nested": [{"token": "[redacted]"}, "[token]"]}


def test_secret_sounding_keys_are_redacted_whatever_the_value():
    out = redact_payload({"password": "x", "client_secret": 12, "Authorization": "Basic abc", "otp": "1234",
                          "secrets": {"a": "plain"}})
    # Under a secret-sounding key, nested values are secrets too: keys kept, values redacted.
    assert out == {"password": "[redacted]", "client_secret": "[redacted]", "Authorization": "[redacted]",
                   "otp": "[redacted]", "secrets": {"a": "[redacted]"}}


def test_persian_text_and_digits_are_kept_unless_redacted():
    assert redact_payload({"note": "سفارش ۱۲ ثبت شد"}) == {"note": "سفارش ۱۲ ثبت شد"}
    assert redact_payload({"note": "تماس: ۰۹۱۲۳۴۵۶۷۸۹"}) == {"note": "تماس: [phone]"}


def test_long_values_are_redacted_throughout_and_not_cut():
    text = ("lorem ipsum " * 100) + "write to ali@example.com or call 0912 345 6789 " + ("dolor sit " * 100)
    out = redact_payload(text)
    assert "ali@example.com" not in out and "345 6789" not in out
    assert out.startswith("lorem ipsum") and out.endswith("dolor sit ") and "…" not in out
    assert len(out) > 2000


def test_segments_do_not_split_a_phone_number():
    text = ("x" * 230) + " 0912 345 6789 " + "y" * 300
    pieces = _segments(text)
    assert "".join(pieces) == text
    assert any("0912 345 6789" in p for p in pieces)
    assert all(len(p) <= 240 for p in pieces)


def test_payload_text_is_pretty_json_with_unicode():
    text = payload_text({"name": "علی", "id": 7})
    assert json.loads(text) == {"name": "علی", "id": 7} and "\n  " in text and "علی" in text


def test_cut_on_a_character_boundary():
    text = "آ" * 3000  # two bytes each
    cut, was_cut = cut_utf8(text, 4095)
    assert was_cut and len(cut.encode()) == 4094 and cut == "آ" * 2047
    assert cut_utf8("short", 4096) == ("short", False)


def test_values_nested_under_a_secret_key_are_redacted_at_any_depth():
    out = redact_payload({"credentials": {"user": "bob", "value": "hunter2"},
                          "secret": ["x1", {"k": "hunter3"}], "api_key": {"primary": "k1", "n": 7},
                          "note": {"text": "fine"}, "token": None})
    assert out == {"credentials": {"user": "[redacted]", "value": "[redacted]"},
                   "secret": ["[redacted]", {"k": "[redacted]"}], "api_key": {"primary": "[redacted]", "n": "[redacted]"},
                   "note": {"text": "fine"}, "token": None}
    assert "hunter" not in payload_text({"auth": {"basic": {"password_hint": "hunter2", "user": "bob"}}})
