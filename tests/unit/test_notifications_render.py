"""Pure parts of notifications: rendering, locale chain, SMS parts, push truncation, policy order, quiet hours."""
from datetime import date, datetime, time, timezone

import pytest

from opsboard.notifications import policy, preferences, render
from tests.conftest import CATALOGUE


def test_locale_chain_ends_in_fa_and_falls_back():
    assert render.locale_chain("en", "de") == ["en", "de", "fa"]
    assert render.locale_chain(None, "fa") == ["fa"]
    assert render.pick_locale({"fa", "de"}, render.locale_chain("en", "de")) == "de"
    assert render.pick_locale({"fa"}, render.locale_chain("en", "de")) == "fa"
    assert render.pick_locale({"en"}, render.locale_chain(None, "fa")) is None


def test_layers_try_the_tenants_own_then_the_platforms_then_the_shipped_each_with_the_chain():
    own = {("inbox", "fa"): {"subject": "own fa", "version": 3}}
    platform = {("inbox", "en"): {"subject": "platform en", "version": 2},
                ("email", "de"): {"subject": "platform de", "version": 1}}
    shipped = {("email", "fa"): {"subject": "shipped fa", "version": None},
               ("sms", "en"): {"subject": "", "version": None}}
    layers = render.Layers(own=own, platform=platform, shipped=shipped)
    chain = render.locale_chain("en", "de")                     # en, de, fa
    # The tenant's own fa comes before the platform's en: a layer is tried with the whole chain first.
    assert layers.pick("inbox", chain) == (render.OWN, "fa", own[("inbox", "fa")])
    assert layers.pick("email", chain) == (render.PLATFORM, "de", platform[("email", "de")])
    assert layers.pick("email", ["fa"]) == (render.SHIPPED, "fa", shipped[("email", "fa")])
    assert layers.pick("sms", chain)[0] == render.SHIPPED
    assert layers.pick("push", chain) is None
    assert layers.locales("email") == {"de", "fa"} and render.Layers().locales("inbox") == set()


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ x['__globals__'] }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
])
def test_sandbox_escapes_are_refused(source):
    with pytest.raises(render.TemplateProblem) as exc:
        render.check_source("", source, ["x"])
    assert exc.value.code == "unsafe"
    with pytest.raises(render.TemplateProblem):
        render.render("inbox", "en", "", source, {"x": {}})


def test_the_sandbox_refuses_unsafe_calls_at_render_time_too():
    # The underscore hides in a format string: the static check cannot see it, the sandbox refuses it.
    with pytest.raises(render.TemplateProblem) as exc:
        render.render("inbox", "en", "", "{{ '{0.__class__}'.format(f) }}", {"f": "x"})
    assert exc.value.code == "unsafe"


def test_undeclared_and_missing_variables():
    with pytest.raises(render.TemplateProblem) as exc:
        render.check_source("{{ a }}", "{{ b }}", ["a"])
    assert exc.value.code == "undeclared_variable" and exc.value.detail == "b"
    out = render.preview("inbox", "fa", "{{ a }}", "{{ b }}", ["a", "b"], {"a": 1})
    assert out.missing == ["b"] and out.body == ""
    with pytest.raises(render.TemplateProblem) as exc:
        render.render("inbox", "fa", "", "{{ b }}", {})
    assert exc.value.code == "missing_variable"


def test_email_is_autoescaped_and_fa_is_right_to_left():
    subject, body = render.render("email", "fa", "{{ s }}", "<p>{{ s }}</p>", {"s": "<script>"})
    assert "&lt;script&gt;" in body and 'dir="rtl"' in body and subject == "&lt;script&gt;"
    _, body = render.render("email", "en", "", "<p>{{ s }}</p>", {"s": "x"})
    assert "rtl" not in body
    _, text = render.render("sms", "fa", "", "{{ s }}", {"s": "<b>"})
    assert text == "<b>"


def test_persian_digits_and_jalali_dates():
    assert render.fa_digits(2026) == "۲۰۲۶"
    assert render.jalali(date(2026, 3, 21)) == "۱۴۰۵/۰۱/۰۱"
    assert render.jalali("2026-11-30T10:00:00") == "۱۴۰۵/۰۹/۰۹"
    _, body = render.render("inbox", "fa", "", "{{ d|jalali }} {{ n|fa_digits }}", {"d": date(2026, 3, 21), "n": 42})
    assert body == "۱۴۰۵/۰۱/۰۱ ۴۲"


def test_sms_parts_gsm_and_ucs2():
    assert render.sms_parts("a" * 160) == {"chars": 160, "encoding": "GSM-7", "parts": 1, "per_part": 160}
    assert render.sms_parts("a" * 161)["parts"] == 2
    assert render.sms_parts("س" * 70) == {"chars": 70, "encoding": "UCS-2", "parts": 1, "per_part": 70}
    assert render.sms_parts("س" * 71) == {"chars": 71, "encoding": "UCS-2", "parts": 2, "per_part": 67}
    assert render.sms_parts("س" * 134)["parts"] == 2 and render.sms_parts("س" * 135)["parts"] == 3
    assert render.sms_parts("€")["chars"] == 2


def test_push_preview_truncates_like_a_phone():
    out = render.push_preview("t" * 50, "b" * 200)
    assert len(out["title"]) == render.PUSH_TITLE_LIMIT and out["title"].endswith("…")
    assert len(out["body"]) == render.PUSH_BODY_LIMIT and out["truncated"]
    assert render.push_preview("short", "body")["truncated"] is False


def _pol(category="ticket", sensitivity="normal"):
    return policy.Policy("x.y", category, sensitivity, ("inbox", "push", "sms", "email"), lambda c, e: [], None,
                         "x.y", None, 1)


def _facts(**kw):
    base = dict(has_permission=True, membership_active=True, preferences={}, quiet_until=None, reachable=None)
    base.update(kw)
    return policy.RecipientFacts(**base)


def test_policy_rules_apply_in_order():
    end = datetime(2026, 1, 1, tzinfo=timezone.utc)
    everything_wrong = _facts(has_permission=False, membership_active=False, preferences={"email": False},
                              quiet_until=end)
    assert policy.check(_pol(), "email", everything_wrong).reason == "permission"
    assert policy.check(_pol(), "email", _facts(membership_active=False, preferences={"email": False})).reason \
        == "membership"
    assert policy.check(_pol(), "email", _facts(preferences={"email": False}, quiet_until=end)).reason == "preference"
    deferred = policy.check(_pol(), "email", _facts(quiet_until=end))
    assert (deferred.status, deferred.available_at) == ("deferred", end)
    assert policy.check(_pol(), "inbox", _facts(quiet_until=end)).status == "queued"
    assert policy.check(_pol(sensitivity="sensitive"), "sms", _facts()).reason == "sensitivity"
    assert policy.check(_pol(sensitivity="sensitive"), "push", _facts()).generic is True
    assert policy.check(_pol("financial", "sensitive"), "sms", _facts()).status == "queued"
    assert policy.check(_pol("financial", "sensitive"), "push", _facts()).generic is True
    assert policy.check(_pol("financial"), "push", _facts()).generic is False


def test_critical_categories_ignore_preferences_and_quiet_hours():
    end = datetime(2026, 1, 1, tzinfo=timezone.utc)
    d = policy.check(_pol("otp", "sensitive"), "sms", _facts(preferences={"sms": False}, quiet_until=end))
    assert d.status == "queued" and d.available_at is None
    # ...but not permission or membership.
    assert policy.check(_pol("otp"), "sms", _facts(membership_active=False)).reason == "membership"


def test_declare_refuses_bad_declarations():
    with pytest.raises(ValueError):
        policy.declare(CATALOGUE, "x.bad", category="nope", channels=("inbox",), recipients=lambda c, e: [])
    with pytest.raises(ValueError):
        policy.declare(CATALOGUE, "x.bad", category="ticket", channels=("fax",), recipients=lambda c, e: [])
    with pytest.raises(ValueError):
        policy.declare(CATALOGUE, "x.bad", category="ticket", channels=("push",), recipients=None)


def test_quiet_hours_window_over_midnight_and_days():
    tz = "Asia/Tehran"
    # Monday 2026-06-08 23:00 Tehran = 19:30 UTC: inside 22:00-07:00, ends Tuesday 07:00 Tehran.
    now = datetime(2026, 6, 8, 19, 30, tzinfo=timezone.utc)
    end = preferences.quiet_until(now, tz, time(22), time(7), [1])
    assert end is not None and end.astimezone(timezone.utc) == datetime(2026, 6, 9, 3, 30, tzinfo=timezone.utc)
    # Tuesday 05:00 Tehran: still the Monday window (it belongs to the day it starts on).
    assert preferences.quiet_until(datetime(2026, 6, 9, 1, 30, tzinfo=timezone.utc), tz, time(22), time(7), [1])
    # Tuesday 23:00 Tehran: Tuesday is not a quiet day.
    assert preferences.quiet_until(datetime(2026, 6, 9, 19, 30, tzinfo=timezone.utc), tz, time(22), time(7), [1]) is None
    # A same-day window.
    assert preferences.quiet_until(datetime(2026, 6, 8, 9, 30, tzinfo=timezone.utc), tz, time(12), time(14), None)
    assert preferences.quiet_until(datetime(2026, 6, 8, 12, 0, tzinfo=timezone.utc), tz, time(12), time(14), None) is None
