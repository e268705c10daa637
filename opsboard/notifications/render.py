"""Pure template rendering: sandboxed Jinja2, declared variables, locale chain -> ``fa``.

No database here: :mod:`.templates` loads versions and calls these.

* Sandbox: :class:`jinja2.sandbox.SandboxedEnvironment` with
  :class:`~jinja2.StrictUndefined`; any attribute starting with ``_`` is
  refused when the source is checked (``{{ ''.__class__.__mro__ }}``), and the
  sandbox refuses unsafe calls at render time as a second line.
* Variables: each template declares the variables it may use;
  :func:`check_source` reports undeclared ones (publish refuses them) and
  :func:`preview` flags declared ones missing from the sample payload.
* Locales: :func:`locale_chain` is user -> tenant default -> ``fa``.
* Filters: ``fa_digits`` (Persian digits), ``jalali`` (a date in the Jalali
  calendar, via persiantools), ``money``.
* Email HTML is autoescaped; ``fa`` email is wrapped right-to-left, and
  :func:`email_document` makes the whole ``<html lang dir>`` document sent as
  the HTML alternative.
* SMS: :func:`sms_parts` (GSM-7 160/153, UCS-2 70/67); push:
  :func:`push_preview` truncates like a phone's lock screen.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from jinja2 import StrictUndefined, TemplateError, meta, nodes
from markupsafe import Markup, escape
from jinja2.sandbox import SandboxedEnvironment

from ..persian import RTL_LOCALES, fa_digits, jalali  # one implementation (issue 14)

FALLBACK_LOCALE = "fa"

#: What a phone's lock screen shows of a push notification (characters).
PUSH_TITLE_LIMIT = 40
PUSH_BODY_LIMIT = 120


def locale_chain(user_locale: str | None, tenant_locale: str | None) -> list[str]:
    """The locales to try, in order: the user's, the tenant's default, then ``fa``."""
    chain = []
    for loc in (user_locale, tenant_locale, FALLBACK_LOCALE):
        if loc and loc not in chain:
            chain.append(loc)
    return chain


def pick_locale(available, chain: list[str]) -> str | None:
    """The first locale of ``chain`` among ``available`` (None when none is)."""
    for loc in chain:
        if loc in available:
            return loc
    return None


def money(cents, currency: str = "") -> str:
    try:
        amount = f"{int(cents) / 100:,.2f}"
    except (TypeError, ValueError):
        amount = str(cents)
    return f"{amount} {currency}".strip()


def _env(autoescape: bool) -> SandboxedEnvironment:
    env = SandboxedEnvironment(autoescape=autoescape, undefined=StrictUndefined, trim_blocks=True,
                               lstrip_blocks=True)
    env.filters.update(fa_digits=fa_digits, jalali=jalali, money=money)
    return env


_TEXT = _env(False)
_HTML = _env(True)


class TemplateProblem(ValueError):
    """A template that cannot be published: ``code`` is stable, ``detail`` names the culprit."""

    def __init__(self, code: str, message: str, detail: str | None = None):
        super().__init__(message)
        self.code, self.detail = code, detail


def _env_for(channel: str) -> SandboxedEnvironment:
    return _HTML if channel == "email" else _TEXT


def variables_used(source: str, channel: str = "inbox") -> set[str]:
    """The top-level variables ``source`` reads (raises :class:`TemplateProblem` on bad syntax)."""
    return meta.find_undeclared_variables(_parse(source, channel))


def _parse(source: str, channel: str):
    try:
        ast = _env_for(channel).parse(source)
    except TemplateError as exc:
        raise TemplateProblem("syntax", f"template syntax error: {exc}", getattr(exc, "lineno", None)) from None
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        if isinstance(name, str) and name.startswith("_"):
            raise TemplateProblem("unsafe", f"attribute {name!r} is not allowed in templates", name)
    return ast


def check_source(subject: str, body: str, declared, channel: str = "inbox") -> set[str]:
    """Check syntax, safety and that every variable used is declared; return the variables used."""
    used = variables_used(subject, channel) | variables_used(body, channel)
    undeclared = sorted(used - set(declared))
    if undeclared:
        raise TemplateProblem("undeclared_variable", "the template uses undeclared variable(s): "
                              + ", ".join(undeclared), undeclared[0])
    return used


@dataclass
class Rendered:
    subject: str
    body: str
    locale: str
    rtl: bool
    used: set[str] = field(default_factory=set)
    missing: list[str] = field(default_factory=list)
    error: str | None = None
    sms: dict | None = None
    push: dict | None = None


def render(channel: str, locale: str, subject: str, body: str, variables: dict) -> tuple[str, str]:
    """Render one template; raises :class:`TemplateProblem` (missing variable, unsafe access)."""
    env = _env_for(channel)
    _parse(subject, channel), _parse(body, channel)
    try:
        out_subject = env.from_string(subject).render(variables)
        out_body = env.from_string(body).render(variables)
    except TemplateError as exc:  # UndefinedError, SecurityError
        code = "unsafe" if type(exc).__name__ == "SecurityError" else "missing_variable"
        raise TemplateProblem(code, str(exc)) from None
    if channel == "email" and locale in RTL_LOCALES:
        out_body = f'<div dir="rtl" lang="{locale}" style="direction:rtl;text-align:right">{out_body}</div>'
    return out_subject.strip(), out_body.strip()


def email_document(subject: str, body_html: str, locale: str) -> str:
    """A whole HTML email around a rendered (autoescaped) body: ``<html lang dir>`` of ``locale``.

    Sent as the ``text/html`` alternative of a multipart/alternative email
    (the text part is the body without its tags).
    """
    direction = "rtl" if locale in RTL_LOCALES else "ltr"
    return ('<!DOCTYPE html>\n'
            f'<html lang="{escape(locale)}" dir="{direction}">\n'
            f'<head><meta charset="utf-8"><title>{escape(subject)}</title></head>\n'
            f'<body style="direction:{direction}">\n{body_html}\n</body>\n</html>\n')


def email_text(body_html: str) -> str:
    """The text/plain alternative of a rendered HTML email body: its text, tags removed, entities decoded."""
    return Markup(body_html).striptags()


def preview(channel: str, locale: str, subject: str, body: str, declared, sample: dict) -> Rendered:
    """Render for the authoring page: never raises; lists used and missing variables."""
    out = Rendered("", "", locale, locale in RTL_LOCALES)
    try:
        out.used = check_source(subject, body, declared, channel)
    except TemplateProblem as exc:
        out.error = f"{exc.code}: {exc}"
        try:
            out.used = variables_used(subject, channel) | variables_used(body, channel)
        except TemplateProblem:
            return out
    out.missing = sorted(v for v in out.used if v not in sample)
    if out.error is None and not out.missing:
        try:
            out.subject, out.body = render(channel, locale, subject, body, sample)
        except TemplateProblem as exc:
            out.error = f"{exc.code}: {exc}"
    if channel == "sms":
        out.sms = sms_parts(out.body)
    if channel == "push":
        out.push = push_preview(out.subject, out.body)
    return out


# GSM 03.38 basic character set (+ the extension table counted as two).
_GSM = set("@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§"
           "¿abcdefghijklmnopqrstuvwxyzäöñüà")
_GSM_EXT = set("^{}\\[~]|€\f")


def sms_parts(text: str) -> dict:
    """Characters, encoding and parts: GSM-7 160 (153 concatenated), UCS-2 70 (67) -- Persian is UCS-2."""
    if all(c in _GSM or c in _GSM_EXT for c in text):
        length = sum(2 if c in _GSM_EXT else 1 for c in text)
        single, multi, encoding = 160, 153, "GSM-7"
    else:
        # UCS-2 counts UTF-16 code units: a character outside the BMP (emoji) takes two.
        length = sum(2 if ord(c) > 0xFFFF else 1 for c in text)
        single, multi, encoding = 70, 67, "UCS-2"
    parts = 0 if length == 0 else 1 if length <= single else -(-length // multi)
    return {"chars": length, "encoding": encoding, "parts": parts, "per_part": single if parts <= 1 else multi}


def _truncate(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def push_preview(title: str, body: str) -> dict:
    """The title and body as a phone's lock screen shows them."""
    return {"title": _truncate(title, PUSH_TITLE_LIMIT), "body": _truncate(body, PUSH_BODY_LIMIT),
            "truncated": len(title) > PUSH_TITLE_LIMIT or len(" ".join(body.split())) > PUSH_BODY_LIMIT}
