"""Persian text, digits, calendars and time zones: pure functions, no Flask, no database.

One implementation shared by the dashboard (``opsboard.web.i18n``), the job
search (:func:`normalize_search` on the query; the same mapping in SQL,
``opsboard_search_normalize`` of migration 0014, on the stored column: a test
checks both over :data:`NORMALIZATION_TABLE`) and the notification filters.

* :func:`normalize_search` -- Arabic ي/ى/ك -> Persian ی/ک, ZWNJ and other
  zero-width joiners, tatweel and diacritics removed, Persian and Arabic-Indic
  digits -> Latin.  Case is left alone: the searches use ILIKE.
* :func:`fa_digits` / :func:`latin_digits` -- digit scripts.
* :func:`format_timestamp` -- a UTC timestamp in a user's zone and calendar
  (Gregorian or Jalali), Persian digits for ``fa``.
* :func:`format_ago` -- "3 minutes ago" in the locale (Babel's CLDR data).
"""
from __future__ import annotations

import datetime as _dt
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from babel.dates import format_timedelta as _babel_timedelta
from babel.numbers import format_decimal as _babel_decimal
from babel.numbers import format_percent as _babel_percent
from persiantools.jdatetime import JalaliDate, JalaliDateTime

LOCALES = ("en", "fa")
RTL_LOCALES = frozenset({"fa", "ar", "he", "ur"})
CALENDARS = ("gregorian", "jalali")
DEFAULT_TIMEZONE = {"fa": "Asia/Tehran", "en": "UTC"}

_FA = "۰۱۲۳۴۵۶۷۸۹"
_AR = "٠١٢٣٤٥٦٧٨٩"
_LATIN = "0123456789"
_TO_FA = str.maketrans(_LATIN + _AR, _FA + _FA)
_TO_LATIN = str.maketrans(_FA + _AR, _LATIN + _LATIN)

#: Characters replaced one for one (kept in step with opsboard_search_normalize in 0014).
SEARCH_FROM = "يىكۀة" + _FA + _AR
SEARCH_TO = "ییکهه" + _LATIN + _LATIN
#: Characters removed: ZWNJ, ZWJ, zero-width space, soft hyphen, tatweel,
#: Arabic diacritics (fathatan..sukun and the rest of U+064B-U+065F), superscript alef.
SEARCH_DROP = "\u200c\u200d\u200b\u00ad\u0640" + "".join(chr(c) for c in range(0x064B, 0x0660)) + "\u0670"
_SEARCH_TABLE = str.maketrans(SEARCH_FROM, SEARCH_TO, SEARCH_DROP)

#: (what was typed or stored, its normal form): the tests check the Python and
#: the SQL function against it.
NORMALIZATION_TABLE = [
    ("علي", "علی"),                       # Arabic yeh
    ("كتاب", "کتاب"),                      # Arabic kaf
    ("مصطفى", "مصطفی"),                    # alef maksura
    ("می\u200cخواهم", "میخواهم"),           # ZWNJ
    ("می\u200dخواهم", "میخواهم"),           # ZWJ
    ("ميخواهم", "میخواهم"),                 # no ZWNJ, Arabic yeh
    ("كِتَابٌ", "کتاب"),                      # diacritics
    ("سلـــام", "سلام"),                    # tatweel
    ("سفارش ۱۲۳۴", "سفارش 1234"),           # Persian digits
    ("سفارش ١٢٣٤", "سفارش 1234"),           # Arabic-Indic digits
    ("order 1234", "order 1234"),           # Latin untouched
    ("خانۀ ما", "خانه ما"),                 # heh with yeh above
]


def marked(message: str) -> str:
    """``message`` unchanged: marks a string of the core (a report kind's title, a schedule's description)
    for the catalogue.  Imported as ``_l`` so the extraction finds it; pages translate it when they show it."""
    return message


def normalize_search(text: str | None) -> str | None:
    """The search form of ``text`` (the query and the stored column both go through it)."""
    if text is None:
        return None
    return str(text).translate(_SEARCH_TABLE)


def fa_digits(value) -> str:
    """``value`` as text with Latin and Arabic-Indic digits written in Persian."""
    return str(value).translate(_TO_FA)


def latin_digits(value) -> str:
    return str(value).translate(_TO_LATIN)


def digits_for(value, locale: str | None) -> str:
    """Persian digits for ``fa``, the text unchanged otherwise."""
    return fa_digits(value) if locale == "fa" else str(value)


def format_count(value, locale: str | None) -> str:
    """A count with group separators, in the locale's digits (12,345 / ۱۲٬۳۴۵)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return digits_for(value, locale)
    text = f"{number:,}"
    return fa_digits(text.replace(",", "٬")) if locale == "fa" else text


def format_decimal(value, locale: str | None, places: int = 1) -> str:
    """A number with at most ``places`` decimals, group and decimal separators of the locale (Babel's CLDR
    symbols: 1,234.5 / ۱٬۲۳۴٫۵), in the locale's digits."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return digits_for(value, locale)
    pattern = "#,##0" + ("." + "#" * places if places > 0 else "")
    text = _babel_decimal(number, pattern, locale=locale or "en", numbering_system="default")
    return digits_for(text, locale)


def format_percent(ratio, locale: str | None, places: int = 0) -> str:
    """``ratio`` (0.25) as a percentage in the locale's digits and signs (25% / ۲۵٪)."""
    try:
        number = float(ratio)
    except (TypeError, ValueError):
        return digits_for(ratio, locale)
    pattern = "#,##0" + ("." + "#" * places if places > 0 else "") + "%"
    text = _babel_percent(number, pattern, locale=locale or "en", numbering_system="default")
    # CLDR's Persian percent sign is the Arabic one (U+066A); Babel keeps the Latin sign with Latin digits.
    return fa_digits(text).replace("%", "\u066a") if locale == "fa" else text


def load_zone(name) -> ZoneInfo | None:
    """The zone named ``name``, or None for anything that is not a zone name.

    The one place user input reaches :class:`ZoneInfo`: besides an unknown key
    (``ZoneInfoNotFoundError``) and a malformed one (``ValueError``), a long name
    makes the tzdata file lookup fail with ``OSError`` (file name too long), so
    names are bounded (the longest IANA name has 32 characters) and every
    failure means "not a zone".
    """
    if not isinstance(name, str) or not 0 < len(name) <= 64:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def zone(name: str | None, locale: str | None = None) -> ZoneInfo:
    """The named zone, else the locale's default (Asia/Tehran for fa), else UTC."""
    for candidate in (name, DEFAULT_TIMEZONE.get(locale or "", "UTC"), "UTC"):
        found = load_zone(candidate)
        if found is not None:
            return found
    return ZoneInfo("UTC")


def valid_timezone(name: str) -> bool:
    return load_zone(name) is not None


def format_timestamp(value: _dt.datetime, *, locale: str | None = "en", calendar: str | None = "gregorian",
                     timezone: str | None = None, seconds: bool = True) -> str:
    """``value`` in the user's zone and calendar: 2026-11-30 05:26:01 or ۱۴۰۵/۰۹/۰۹ ۰۵:۲۶:۰۱."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    local = value.astimezone(zone(timezone, locale))
    clock = "%H:%M:%S" if seconds else "%H:%M"
    if calendar == "jalali":
        text = JalaliDateTime(local.replace(tzinfo=None)).strftime("%Y/%m/%d ") + local.strftime(clock)
    else:
        text = local.strftime("%Y-%m-%d " + clock)
    return digits_for(text, locale)


def format_day(value, *, locale: str | None = "en", calendar: str | None = "gregorian") -> str:
    """A calendar day (a date or an ISO date string, no zone: a report's period) in the user's calendar:
    2026-11-23 or ۱۴۰۵/۰۹/۰۲."""
    if isinstance(value, str):
        value = _dt.date.fromisoformat(value[:10])
    if isinstance(value, _dt.datetime):
        value = value.date()
    if calendar == "jalali":
        text = JalaliDateTime(_dt.datetime(value.year, value.month, value.day)).strftime("%Y/%m/%d")
    else:
        text = value.isoformat()
    return digits_for(text, locale)


_JALALI_DAY = re.compile(r"([0-9]{4})/([0-9]{1,2})/([0-9]{1,2})")


def parse_day(text: str) -> _dt.date:
    """A day typed in a form: ISO ``2026-11-29`` (a date picker) or Jalali ``1405/09/08`` (the Jalali text
    input; Persian or Arabic-Indic digits too).  ValueError when it is neither or no such day."""
    raw = latin_digits(text.strip())
    if m := _JALALI_DAY.fullmatch(raw):
        return JalaliDate(int(m[1]), int(m[2]), int(m[3])).to_gregorian()
    return _dt.date.fromisoformat(raw)


def format_utc(value: _dt.datetime) -> str:
    """The exact UTC time (Latin digits, ISO-like): the hover title of every timestamp."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return value.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def jalali(value, fmt: str = "%Y/%m/%d") -> str:
    """A date/datetime (or ISO string) in the Jalali calendar, with Persian digits."""
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    return fa_digits(JalaliDateTime(value).strftime(fmt))


def format_ago(seconds: float | None, locale: str | None = "en") -> str:
    """A duration in the past, in words of the locale ("3 minutes ago", "۳ دقیقه پیش")."""
    if seconds is None:
        return "—"
    text = _babel_timedelta(_dt.timedelta(seconds=-float(seconds)), add_direction=True,
                            format="short", locale=locale or "en")
    return digits_for(text, locale)


#: Seconds in each unit a live relative time is counted in (see :func:`ago_patterns`).
AGO_UNITS = {"minute": 60, "hour": 3600, "day": 86400}


def ago_patterns(locale: str | None = "en") -> dict[str, dict[str, str]]:
    """Babel's "N units ago" wording per unit, with ``{n}`` where the number goes: what a page's script
    fills in for times that change while it is open ({"minute": {"one": "{n} min. ago", "other": ...}})."""
    out = {}
    for unit, seconds in AGO_UNITS.items():
        forms = {}
        for form, n in (("one", 1), ("other", 2)):
            text = latin_digits(format_ago(n * seconds, locale))
            forms[form] = text.replace(str(n), "{n}", 1)
        out[unit] = forms
    return out

