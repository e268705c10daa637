"""Languages, calendars and time zones of the dashboard (flask-babel).

The locale is the signed-in user's saved choice (``users.locale``), else the
choice made on the sign-in page (kept in the session), else the best match of
the browser's ``Accept-Language``, else English.  The calendar and time zone
are the user's too, defaulting from the locale (fa: Jalali, Asia/Tehran; en:
Gregorian, UTC).  The formatting itself is :mod:`opsboard.persian` (no Flask).

Templates get ``page_lang``/``page_dir`` (``<html lang dir>``) and the
helpers ``fmt_ts`` (a timestamp in the user's calendar and zone), ``utc_title``
(its exact UTC time, the hover title), ``num`` (a count in the locale's
digits), ``dec`` and ``pct`` (a measure and a percentage, with the locale's
separators: ۱٬۲۳۴٫۵ and ۲۵٪ in fa) and ``ago`` (a translated duration).
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from urllib.parse import urlparse

from flask import Blueprint, flash, g, redirect, request, session, url_for
from flask_babel import Babel, get_locale
from flask_babel import gettext as _
from flask_babel import lazy_gettext as _l
from flask_login import current_user
from markupsafe import Markup

from .. import audit, channels, persian
from ..auth import set_display_prefs
from ..config import resource_dir
from ..errors import OpsError
from .context import get_db, request_id

bp = Blueprint("i18n", __name__)


def select_locale() -> str:
    saved = getattr(current_user, "locale", None) if current_user and current_user.is_authenticated else None
    if saved in persian.LOCALES:
        return saved
    chosen = session.get("locale")
    if chosen in persian.LOCALES:
        return chosen
    return request.accept_languages.best_match(persian.LOCALES) or "en"


def prefs() -> tuple[str, str, str]:
    """(locale, calendar, time zone) of this request."""
    cached = getattr(g, "_display_prefs", None)
    if cached is not None:
        return cached
    locale = str(get_locale() or "en")
    user = current_user if current_user and current_user.is_authenticated else None
    calendar = getattr(user, "calendar", None) or ("jalali" if locale == "fa" else "gregorian")
    time_zone = getattr(user, "time_zone", None) or persian.DEFAULT_TIMEZONE.get(locale, "UTC")
    g._display_prefs = (locale, calendar, time_zone)
    return g._display_prefs


def fmt_ts(value, seconds: bool = True) -> str:
    locale, calendar, time_zone = prefs()
    return persian.format_timestamp(value, locale=locale, calendar=calendar, timezone=time_zone, seconds=seconds)


def fmt_ts_in(value, time_zone: str) -> Markup:
    """A timestamp in another zone (a schedule's own), in the user's calendar and digits, as a left-to-right
    island (a date and a time side by side keep their order in a right-to-left sentence)."""
    locale, calendar, _zone = prefs()
    text = persian.format_timestamp(value, locale=locale, calendar=calendar, timezone=time_zone, seconds=False)
    return Markup('<bdi dir="ltr">%s</bdi>') % text


def fmt_day(value) -> str:
    locale, calendar, _zone = prefs()
    return persian.format_day(value, locale=locale, calendar=calendar)


def num(value) -> str:
    return persian.format_count(value, prefs()[0])


def digits(value) -> str:
    return persian.digits_for(value, prefs()[0])


def dec(value, places: int = 1) -> str:
    """A measure (a duration, a rate) with at most ``places`` decimals, in the locale's digits and separators."""
    return persian.format_decimal(value, prefs()[0], places)


def pct(ratio, places: int = 0) -> str:
    """A ratio (0.25) as a percentage in the locale's digits and signs (25% / ۲۵٪)."""
    return persian.format_percent(ratio, prefs()[0], places)


def ago(seconds) -> str:
    return persian.format_ago(seconds, prefs()[0])


def live_text() -> dict:
    """What a page's script needs to write numbers and relative times in the page's language:
    the locale's digits 0-9, Babel's "N units ago" patterns and the right-to-left languages (rendered into
    a JSON script tag)."""
    locale = prefs()[0]
    return {"digits": digits("0123456789"), "ago": persian.ago_patterns(locale), "just_now": _("just now"),
            "rtl": sorted(persian.RTL_LOCALES)}


def _context() -> dict:
    locale, calendar, time_zone = prefs()
    return {"page_lang": locale, "page_dir": "rtl" if locale in persian.RTL_LOCALES else "ltr",
            "display_calendar": calendar, "display_time_zone": time_zone}


#: Status words shown on pages (jobs, report runs, tickets); the CSS class keeps the raw value.
STATUS_LABELS = {
    "pending": _l("pending"), "running": _l("running"), "succeeded": _l("succeeded"),
    "retryable": _l("retryable"), "dead": _l("dead"), "cancelled": _l("cancelled"),
    "queued": _l("queued"), "done": _l("done"), "failed": _l("failed"), "expired": _l("expired"), "ready": _l("ready"),
    "snoozed": _l("snoozed"), "released": _l("released"), "lease_expired": _l("lease expired"),
    "info": _l("info"), "warning": _l("warning"), "critical": _l("critical"),
    "open": _l("open"), "closed": _l("closed"), "resolved": _l("resolved"), "ignored": _l("ignored"),
    # tickets
    "new": _l("new"), "triaged": _l("triaged"), "in_progress": _l("in progress"),
    "waiting_on_customer": _l("waiting on customer"),
    # notification deliveries, templates
    "sent": _l("sent"), "delivered": _l("delivered"), "suppressed": _l("suppressed"), "bounced": _l("bounced"),
    "digested": _l("in a digest"),
    "draft": _l("draft"), "published": _l("published"),
}


ROLE_LABELS = {"admin": _l("admin"), "ops": _l("ops"), "support_agent": _l("support agent"),
               "template_author": _l("template author"), "member": _l("member")}


def role_label(value) -> str:
    raw = str(getattr(value, "value", value))
    label = ROLE_LABELS.get(raw)
    return str(label) if label is not None else raw.replace("_", " ")


def staff_label(role) -> str:
    """Operator staff as a tenant sees them: by role, never by address."""
    return _("operator staff (%(role)s)", role=role_label(role))


def actor_name(row, key: str) -> str:
    """``row[key]`` (an actor), or the translated :func:`staff_label` where the
    core hid operator staff (``opsboard.audit.hide_staff``)."""
    role = row.get(key + "_staff_role")
    return staff_label(role) if role else (row.get(key) or "")


BREAKER_LABELS = {"closed": _l("closed"), "open": _l("open"), "half_open": _l("half-open")}


def breaker_label(value) -> str:
    label = BREAKER_LABELS.get(str(value))
    return str(label) if label is not None else str(value).replace("_", "-")


#: The ticket workflow's actions (opsboard.tickets.workflow declares them with English labels: the
#: core knows no Flask) and the ticket fields shown as words.
TICKET_ACTION_LABELS = {
    "triage": _l("Triage"), "start": _l("Start work"), "wait_on_customer": _l("Wait on customer"),
    "resume": _l("Resume"), "resolve": _l("Resolve"), "close": _l("Close"), "reopen": _l("Reopen"),
    "cancel": _l("Cancel"), "assign": _l("Assign"), "reply": _l("Reply"), "note": _l("Internal note"),
    "decide": _l("Decide"), "set_priority": _l("Change priority"),
}
TICKET_WORDS = {
    "low": _l("low"), "normal": _l("normal"), "high": _l("high"), "urgent": _l("urgent"),
    "approved": _l("approved"), "rejected": _l("rejected"), "requester": _l("requester"),
}


def action_label(transition) -> str:
    """A ticket action (a workflow ``Transition`` or its name) in the page's language."""
    action = getattr(transition, "action", transition)
    label = TICKET_ACTION_LABELS.get(str(action))
    return str(label) if label is not None else str(getattr(transition, "label", action))


def ticket_word(value) -> str:
    """A ticket priority or decision in the page's language (unknown values as they are)."""
    label = TICKET_WORDS.get(str(value))
    return str(label) if label is not None else str(value)


#: The ticket service's system messages (opsboard.tickets.service: stored in English, the API shows them
#: so); pages show them in the reader's language.  A test renders real ones in fa.
_SYSTEM_OPENED = re.compile(r"Ticket #(?P<number>[0-9]+) opened \((?P<priority>\w+)\)")
_SYSTEM_STATUS = re.compile(r"Status (?P<src>[a-z ]+) → (?P<dst>[a-z ]+) \((?P<action>[a-z ]+) by (?P<role>\w+)\)"
                            r"(?:: (?P<code>.+))?")
_SYSTEM_BREACH = re.compile(r"SLA breached: (?P<kind>[a-z ]+) was due "
                            r"(?P<due>[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}) UTC")
SLA_KINDS = {"first response": _l("first response"), "resolution": _l("resolution")}


def system_text(body: str) -> Markup:
    """A ticket's system message in the page's language (its due time in the user's calendar, the exact
    UTC time on hover); a message of another shape as it is."""
    if m := _SYSTEM_OPENED.fullmatch(body):
        return Markup.escape(_("Ticket #%(number)s opened (%(priority)s)", number=digits(m["number"]),
                               priority=ticket_word(m["priority"])))
    if m := _SYSTEM_STATUS.fullmatch(body):
        text = _("Status changed from %(src)s to %(dst)s (%(action)s, by %(role)s)",
                 src=status_label(m["src"].replace(" ", "_")), dst=status_label(m["dst"].replace(" ", "_")),
                 action=word_label(m["action"]), role=word_label(m["role"]))
        if m["code"]:
            return Markup.escape(text) + Markup(': <code dir="ltr">%s</code>') % m["code"]
        return Markup.escape(text)
    if m := _SYSTEM_BREACH.fullmatch(body):
        due = datetime.strptime(m["due"], "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc)
        text = Markup.escape(_("SLA breached: %(kind)s was due %(due)s", kind=str(SLA_KINDS.get(m["kind"], m["kind"])),
                               due="\x00"))
        when = Markup('<time datetime="%s" title="%s">%s</time>') % (due.isoformat(), persian.format_utc(due),
                                                                    fmt_ts(due, seconds=False))
        return Markup(str(text).replace("\x00", str(when)))
    return Markup.escape(body)


def word_label(value: str) -> str:
    """A workflow word inside a refusal of the core (a ticket action, code or lower-cased label, a status,
    a priority, a role) in the page's language; anything else as it is (names, ids and codes stay Latin)."""
    from ..tickets import workflow

    by_label = {t.label.lower(): a for a, t in workflow.ALL.items()}
    action = value if value in TICKET_ACTION_LABELS else by_label.get(value)
    if action:
        return str(TICKET_ACTION_LABELS[action])
    for labels in (STATUS_LABELS, TICKET_WORDS, ROLE_LABELS):
        if value in labels:
            return str(labels[value])
    return value


#: A suppression reason (deliveries' suppression_reason), as readers name it.  A channel's label is its
#: catalogue entry's (opsboard.channels: the built-ins' are message ids of the catalog).
SUPPRESSION_LABELS = {"permission": _l("no permission"), "membership": _l("not a member"),
                      "preference": _l("turned off by the recipient"), "unreachable": _l("no address or device"),
                      "sensitivity": _l("too sensitive for this channel")}


def channel_label(value) -> str:
    """A notification channel's label in the page's language (its catalogue entry's; the name of a
    channel no longer registered)."""
    locale = get_locale()
    return channels.label_of(str(value), locale.language if locale is not None else None, _)


def suppression_label(value) -> str:
    label = SUPPRESSION_LABELS.get(str(value))
    return str(label) if label is not None else str(value).replace("_", " ")


#: Fixed attempt details of the core (stored in English, as every attempt detail: the API shows them so),
#: shown in the reader's language; any other detail (a provider's own words) as it is.
#: Keep in step with opsboard.deliveries.providers.http's DETAIL_* strings (test_http_head_limits).
DETAIL_LABELS = {
    "too many headers": _l("too many headers"),
    "too many interim answers": _l("too many interim answers"),
    "answer headers too large": _l("answer headers too large"),
    "answer headers too slow": _l("answer headers too slow"),
}


def detail_label(value) -> str:
    """An attempt's detail in the page's language when it is one of the core's fixed ones."""
    if value is None:
        return ""
    label = DETAIL_LABELS.get(str(value))
    return str(label) if label is not None else str(value)


def status_label(value) -> str:
    raw = str(getattr(value, "value", value))
    label = STATUS_LABELS.get(raw)
    return str(label) if label is not None else raw.replace("_", " ")


#: Each language named in itself (the switch shows these, never translated).
LOCALE_NAMES = {"en": "English", "fa": "فارسی"}


def init_app(app) -> None:
    app.config.setdefault("BABEL_DEFAULT_LOCALE", "en")
    app.config.setdefault("BABEL_TRANSLATION_DIRECTORIES", str(resource_dir("translations")))
    Babel(app, locale_selector=select_locale)
    app.context_processor(_context)
    # Globals, not context: macros imported without context ({% from ... import ts %}) see them too.
    app.jinja_env.globals.update(fmt_ts=fmt_ts, fmt_ts_in=fmt_ts_in, fmt_day=fmt_day, utc_title=persian.format_utc,
                                 num=num, digits=digits, dec=dec, pct=pct,
                                 ago_text=ago,
                                 locale_names=LOCALE_NAMES, status_label=status_label, role_label=role_label,
                                 channel_label=channel_label, suppression_label=suppression_label,
                                 breaker_label=breaker_label, action_label=action_label, ticket_word=ticket_word,
                                 live_text=live_text, system_text=system_text, actor_name=actor_name,
                                 detail_label=detail_label)
    app.register_blueprint(bp)
    from . import backlinks
    backlinks.register(app)


def _back() -> str:
    target = request.form.get("next") or ""
    parts = urlparse(target)
    if target.startswith("/") and not target.startswith("//") and not parts.netloc and "\\" not in target:
        return target
    return url_for("home.index")


@bp.route("/locale", methods=["POST"])
def switch_locale():
    """The header's language switch: saved on the user (audited), or in the session before sign-in."""
    locale = request.form.get("locale", "")
    if locale not in persian.LOCALES:
        # Answered by web.errors like any refusal (400, bad_locale, in the reader's language); raised, not
        # built here, since web.errors imports this module for that language.
        raise OpsError("Unknown language.", "bad_locale")
    session["locale"] = locale
    if current_user.is_authenticated:
        from ..notifications import preferences
        with get_db().connection() as conn, conn.transaction():
            set_display_prefs(conn, current_user.id, locale=locale, calendar=current_user.calendar,
                              time_zone=current_user.time_zone)
            # Signed in, the switch is the person's language: their notifications follow it (issue 43).
            preferences.set_locale(conn, current_user.id, locale)
            audit.record(conn, audit.Actor(current_user.email, current_user.id, request_id()), "user.display_prefs",
                         target_type="user", target_id=current_user.id,
                         after={"locale": locale, "notification_locale": locale})
    return redirect(_back())


@bp.route("/account/display", methods=["POST"])
def save_display():
    """Language, calendar and time zone from the account page."""
    if not current_user.is_authenticated:
        return redirect(url_for("auth.login"))
    locale = request.form.get("locale") or None
    calendar = request.form.get("calendar") or None
    time_zone = (request.form.get("time_zone") or "").strip() or None
    try:
        with get_db().connection() as conn, conn.transaction():
            set_display_prefs(conn, current_user.id, locale=locale, calendar=calendar, time_zone=time_zone)
            audit.record(conn, audit.Actor(current_user.email, current_user.id, request_id()), "user.display_prefs",
                         target_type="user", target_id=current_user.id,
                         after={"locale": locale, "calendar": calendar, "time_zone": time_zone})
    except OpsError as exc:
        messages = {"bad_locale": _("Unknown language."), "bad_calendar": _("Unknown calendar."),
                    "bad_time_zone": _("Unknown time zone.")}
        flash(messages.get(exc.code, _("The settings were not saved.")))
        return redirect(url_for("auth.account")), 303
    # "From the browser" forgets the header switch's choice too; the confirmation is in the language just
    # chosen (this request was read in the old one).
    if locale:
        session["locale"] = locale
    else:
        session.pop("locale", None)
    current_user.locale, current_user.calendar, current_user.time_zone = locale, calendar, time_zone
    g.pop("_display_prefs", None)
    from flask_babel import refresh
    refresh()
    flash(_("Display settings saved."))
    return redirect(url_for("auth.account")), 303
