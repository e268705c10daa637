"""The one rule for text PostgreSQL cannot store (issue 51): find it at the edge, clean it inside."""
import logging

from hypothesis import given, strategies as st

from opsboard.storable import problem, storable, storable_value, unstorable


def test_problem_names_the_path_of_the_first_bad_string():
    assert problem({"a": "ok", "b": [1, {"c": "x\x00"}]}) == "b[1].c"
    assert problem({"payload": {"k\ud800": 1}}) == "payload"
    assert problem({"\udc00": 1}) == "body"
    assert problem("\ud83d") == "value"
    assert problem({"emoji": "\U0001f600", "fa": "سلام", "n": 1, "f": None}) is None


def test_storable_replaces_and_logs_once(caplog):
    caplog.set_level(logging.WARNING, "opsboard.storable")
    assert storable("a\x00b\udc80", "SMTP reply") == "a\ufffdb\ufffd"
    assert [r.getMessage() for r in caplog.records if "SMTP reply" in r.getMessage()] != []
    assert len(caplog.records) == 1 and "\x00" not in caplog.records[0].getMessage()
    assert storable("plain") == "plain" and storable(None) is None
    assert storable_value({"k\x00": ["\ud800", 1]}) == {"k\ufffd": ["\ufffd", 1]}


@given(st.recursive(st.text() | st.integers() | st.none(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=8))
def test_what_problem_accepts_encodes_and_what_storable_gives_is_accepted(value):
    import json
    if problem(value) is None:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        assert "\\u0000" not in json.dumps(value)
    cleaned = storable_value(value)
    assert problem(cleaned) is None
    json.dumps(cleaned, ensure_ascii=False).encode("utf-8")


@given(st.text())
def test_storable_text_always_encodes(text):
    out = storable(text)
    out.encode("utf-8")
    assert not unstorable(out) and "\x00" not in out


def test_outcomes_carry_storable_provider_words():
    """A provider's reply becomes an outcome with storable texts (issue 51): an SMTP answer's bytes, a
    gateway's JSON id, an HTTP reason with a NUL."""
    from opsboard import retry
    assert retry.Success(ref="id-\udcff").ref == "id-\ufffd"
    assert retry.Success().ref is None and retry.Success(ref="plain").ref == "plain"
    p = retry.Permanent("http_4\x000", detail="Bad \x00 Request \ud800")
    assert (p.code, p.detail) == ("http_4\ufffd0", "Bad \ufffd Request \ufffd")
    r = retry.Retryable("smtp_451", detail="busy \udce9")
    assert r.detail == "busy \ufffd" and r.code == "smtp_451"
    assert retry.Unknown("x", detail="y\x00").detail == "y\ufffd"
