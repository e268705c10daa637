"""Issue 43, pure parts: OPSBOARD_PUBLIC_URL's validation, the islands and durations of the templates'
filters, a link kept in an email's text part."""
from __future__ import annotations

import pytest

from opsboard.config import ConfigError, ProviderSettings
from opsboard.notifications import render


def test_the_public_url_is_an_http_address_without_query():
    assert ProviderSettings.from_env({"OPSBOARD_PUBLIC_URL": "https://ops.example.com/"}).public_url == \
        "https://ops.example.com"
    assert ProviderSettings.from_env({}).public_url == ""
    for bad in ("ftp://ops.example.com", "https://ops.example.com/?a=1", "https://", "ops.example.com",
                "https://ops.example.com/#x"):
        with pytest.raises(ConfigError, match="OPSBOARD_PUBLIC_URL"):
            ProviderSettings.from_env({"OPSBOARD_PUBLIC_URL": bad})


def test_ltr_islands_in_text_and_in_html():
    text = render.render("sms", "fa", "", "صف {{ q|ltr }}", {"q": "default"})[1]
    assert text == "صف \u2066default\u2069"
    html = render.render("email", "fa", "{{ q|ltr }}", "<p>{{ q|ltr }}</p>", {"q": "<b>"})
    assert html[0] == '<bdi dir="ltr">&lt;b&gt;</bdi>' and '<bdi dir="ltr">&lt;b&gt;</bdi>' in html[1]
    assert render.email_text(html[0]) == "\u2066<b>\u2069"


def test_durations_in_words_of_the_locale():
    assert [render.duration(s, "en") for s in (90, 600, 9000)] == ["90 s", "10 min", "2.5 h"]
    assert render.duration(600, "fa") == "۱۰ دقیقه"


def test_the_email_text_part_keeps_each_link():
    assert render.email_text('<p><a href="https://o.test/alerts/1">View the alert</a></p>') == \
        "View the alert: \u2066https://o.test/alerts/1\u2069"
    assert render.email_text('<a href="https://o.test/">https://o.test/</a>') == "https://o.test/"
