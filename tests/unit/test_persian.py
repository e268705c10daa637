"""Persian text, digits, calendars (opsboard.persian), the catalog and the stylesheet (issue 14)."""
from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.mofile import read_mo
from babel.messages.pofile import read_po

from opsboard import persian

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("typed, normal", persian.NORMALIZATION_TABLE)
def test_normalization_table(typed, normal):
    assert persian.normalize_search(typed) == normal


def test_variants_of_one_word_normalize_alike():
    variants = ["می‌خواهم", "میخواهم", "ميخواهم", "مي\u200cخواهم", "میـخواهم"]
    assert {persian.normalize_search(v) for v in variants} == {"میخواهم"}
    assert persian.normalize_search("سفارش ۴۲") == persian.normalize_search("سفارش ٤٢") == "سفارش 42"
    assert persian.normalize_search(None) is None


def test_digits_both_ways():
    assert persian.fa_digits("job 12, 3٤") == "job ۱۲, ۳۴"
    assert persian.latin_digits("۱۲٣") == "123"
    assert persian.format_count(12345, "fa") == "۱۲٬۳۴۵" and persian.format_count(12345, "en") == "12,345"


def test_measures_and_percentages_take_the_locales_separators():
    """Issue 44: a fa measure reads ۱٬۲۳۴٫۵ and a percentage ۲۵٪ (Latin digits with Persian digits swapped in
    read ۱.۵ and ۲۵%)."""
    assert persian.format_decimal(1234.5, "fa") == "۱٬۲۳۴٫۵" and persian.format_decimal(1234.5, "en") == "1,234.5"
    assert persian.format_decimal(2.0, "fa") == "۲" and persian.format_decimal(0.125, "en", 2) == "0.12"
    assert persian.format_decimal(7.25, "fa", 0) == "۷"
    assert persian.format_percent(0.25, "fa") == "۲۵٪" and persian.format_percent(0.25, "en") == "25%"
    assert persian.format_percent(0.256, "fa", 1) == "۲۵٫۶٪" and persian.format_percent(0.256, "en", 1) == "25.6%"
    assert persian.format_decimal("n/a", "fa") == "n/a" and persian.format_percent(None, "en") == "None"


def test_timestamp_in_zone_and_calendar():
    t = dt.datetime(2026, 3, 20, 20, 30, 5, tzinfo=dt.timezone.utc)   # 00:00:05 on 1 Farvardin 1405 in Tehran
    assert persian.format_timestamp(t, locale="fa", calendar="jalali", timezone="Asia/Tehran") == "۱۴۰۵/۰۱/۰۱ ۰۰:۰۰:۰۵"
    assert persian.format_timestamp(t, locale="en", calendar="gregorian", timezone="UTC") == "2026-03-20 20:30:05"
    assert persian.format_timestamp(t, locale="en", calendar="jalali", timezone="Asia/Tehran") == "1405/01/01 00:00:05"
    # no zone: the locale's default (Tehran for fa)
    assert persian.format_timestamp(t, locale="fa", calendar="gregorian", timezone=None) == "۲۰۲۶-۰۳-۲۱ ۰۰:۰۰:۰۵"
    assert persian.format_utc(t) == "2026-03-20 20:30:05.000 UTC"


def test_durations_are_translated():
    assert persian.format_ago(180, "en") == "3 min. ago"
    assert persian.format_ago(180, "fa") == "۳ دقیقه پیش"
    assert persian.format_ago(None, "fa") == "—"


#: The core's refusals, extracted beside the pages' strings (README "Persian and English").
EXTRACT_KEYWORDS = ["-k", "OpsError", "-k", "ReportError", "-k", "ApiKeyError:2"]


def test_core_refusals_are_extracted_with_their_placeholders(tmp_path):
    """An OpsError written as an f-string would be skipped by the extraction (and shown in English)."""
    pot = tmp_path / "messages.pot"
    run = subprocess.run([sys.executable, "-m", "babel.messages.frontend", "extract", "-F", "babel.cfg",
                          *EXTRACT_KEYWORDS, "-o", str(pot), "opsboard"], cwd=ROOT, check=True, capture_output=True,
                         text=True)
    skipped = [line for line in run.stderr.splitlines() if "Skipping f-string" in line
               and "preferences.py" not in line]     # issue 11 owns notifications/preferences.py meanwhile
    assert not skipped, skipped
    ids = {m.id for m in read_po(pot.open("rb")) if m.id}
    assert {"no such job", "only dead jobs can be resolved; this one is %(status)s",
            "cannot %(action)s a %(status)s ticket; allowed: %(names)s", "no such API key"} <= ids


def _catalog_ids():
    po = read_po((ROOT / "translations/fa/LC_MESSAGES/messages.po").open("rb"), locale="fa")
    return po


def test_every_message_id_is_translated_to_fa(tmp_path):
    """Extract every wrapped string of the templates and the web package, and every refusal message of the
    core (the first argument of ``OpsError``/``ReportError``, the second of ``ApiKeyError``: pages show them
    translated); each must be in the fa catalog, translated, and the compiled .mo must match the .po."""
    pot = tmp_path / "messages.pot"
    subprocess.run([sys.executable, "-m", "babel.messages.frontend", "extract", "-F", "babel.cfg", "-k", "_l",
                    "-k", "lazy_gettext", *EXTRACT_KEYWORDS, "-o", str(pot), "templates", "opsboard"],
                   cwd=ROOT, check=True, capture_output=True)
    extracted = {m.id for m in read_po(pot.open("rb")) if m.id}
    assert len(extracted) > 200
    po = _catalog_ids()
    translated = {m.id for m in po if m.id and all(s for s in ([m.string] if isinstance(m.string, str) else m.string))}
    missing = sorted(map(str, extracted - translated))
    assert not missing, f"untranslated fa message ids: {missing[:20]}"
    mo = read_mo((ROOT / "translations/fa/LC_MESSAGES/messages.mo").open("rb"))
    assert {m.id if isinstance(m.id, str) else tuple(m.id) for m in mo if m.id} >= extracted, "messages.mo is stale: run pybabel compile -d translations"


#: Where a script would put words in front of a reader: text of an element, an accessible name, a dialog.
_JS_TEXT_SINKS = [
    r"(?:textContent|innerText|innerHTML|outerHTML)\s*[+]?=\s*[\"'`][^\"'`]*[A-Za-z]",
    r"setAttribute\(\s*[\"'](?:aria-label|aria-description|title|placeholder|alt)[\"']\s*,\s*[\"'`][^\"'`]*[A-Za-z]",
    r"(?:alert|confirm|prompt|createTextNode)\(\s*[\"'`][^\"'`]*[A-Za-z]",
    r"insertAdjacent(?:Text|HTML)\([^,]+,\s*[\"'`][^\"'`]*[A-Za-z]",
]


def test_scripts_hold_no_words_of_their_own():
    """Live text comes from the page (rendered through Babel, e.g. the inbox's JSON script tag), so the
    catalog test above covers it: a script writing a literal word into the page fails here."""
    scripts = sorted((ROOT / "static/js").glob("*.js"))
    assert scripts
    found = []
    for script in scripts:
        source = re.sub(r"^\s*//.*$", "", script.read_text(), flags=re.M)
        found += [f"{script.name}: {m.group(0)}" for pattern in _JS_TEXT_SINKS for m in re.finditer(pattern, source)]
    assert not found, found
    assert re.search(r"textContent\s*=\s*\"Live\"", 'status.textContent = "Live";')   # the check bites


def test_ago_patterns_for_live_times():
    assert persian.ago_patterns("en")["minute"] == {"one": "{n} min. ago", "other": "{n} min. ago"}
    assert persian.ago_patterns("en")["day"]["other"] == "{n} days ago"
    assert persian.ago_patterns("fa")["hour"]["other"] == "{n} ساعت پیش"    # the script writes Persian digits


def test_placeholders_match_in_translations():
    for m in _catalog_ids():
        if not m.id:
            continue
        ids = [m.id] if isinstance(m.id, str) else list(m.id)
        strings = [m.string] if isinstance(m.string, str) else list(m.string)
        want = set(re.findall(r"%\((\w+)\)s", ids[-1]))
        for s in strings:
            assert set(re.findall(r"%\((\w+)\)s", s)) == want, (m.id, s)


def test_stylesheet_uses_logical_properties_only():
    css = (ROOT / "static/css/opsboard.css").read_text()
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    physical = re.findall(r"(?<![\w-])(margin-left|margin-right|padding-left|padding-right|left|right|float"
                          r"|border-left|border-right)\s*:|text-align:\s*(?:left|right)", css)
    assert not physical, physical
    assert "Vazirmatn" in css and "//" not in re.sub(r"url\(\"\.\./", "", css).split("@font-face")[1].split("}")[0]
    assert (ROOT / "static/vendor/vazirmatn/OFL.txt").is_file()
    assert (ROOT / "static/vendor/vazirmatn/Vazirmatn-wght.woff2").stat().st_size > 50_000
