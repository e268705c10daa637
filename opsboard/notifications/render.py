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
* Left-to-right islands (issue 43, docs/i18n.md): the ``ltr`` filter wraps an id, a path, a number
  or an address -- Unicode isolates (U+2066 ... U+2069) in plain text, ``<bdi dir="ltr">`` in an
  email's HTML -- so that a right-to-left sentence never reorders it; ``duration`` writes seconds as
  words of the locale (``10 min`` / ``۱۰ دقیقه``).
* Links: :func:`object_link` is the path of what a notification is about (the policy's ``link``
  variable, else the event's aggregate); :func:`absolute_links` and :func:`absolute_url` make them
  absolute for an email or a push from ``OPSBOARD_PUBLIC_URL``; :func:`email_text` keeps each link's
  address in the text part.
"""
from __future__ import annotations

import contextvars
import functools
import re
from dataclasses import dataclass, field

from jinja2 import StrictUndefined, TemplateError, meta, nodes
from markupsafe import Markup, escape
from jinja2.runtime import markup_join, str_join
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


#: Where a rendered text came from (``Layers.pick``): the tenant's own version, the platform's, the shipped text.
OWN, PLATFORM, SHIPPED = "own", "platform", "shipped"


@dataclass(frozen=True)
class Layers:
    """The live versions a tenant's notification may be rendered from, in the lookup order.

    ``own`` and ``platform`` map ``(channel, locale)`` to a published version (a row); ``shipped`` to the
    catalogue's shipped template (subject and body, no version).  Each layer is tried with the whole
    locale chain (user -> tenant default -> ``fa``) before the next: a tenant's own ``fa`` version wins
    over the platform's ``en`` one, because the tenant chose its words for its recipients.
    """

    own: dict = field(default_factory=dict)
    platform: dict = field(default_factory=dict)
    shipped: dict = field(default_factory=dict)

    def pick(self, channel: str, chain: list[str]) -> tuple[str, str, object] | None:
        """``(source, locale, template)`` of the first layer with a version of ``channel`` in ``chain``."""
        for source, live in ((OWN, self.own), (PLATFORM, self.platform), (SHIPPED, self.shipped)):
            locale = pick_locale({loc for (ch, loc) in live if ch == channel}, chain)
            if locale is not None:
                return source, locale, live[(channel, locale)]
        return None

    def is_shipped_text(self, channel: str, locale: str, tpl) -> bool:
        """``tpl`` is the shipped text of (channel, locale) (itself, or a platform version with its words):
        the product's own, trusted to render in the worker's process."""
        shipped = self.shipped.get((channel, locale))
        return shipped is not None and (tpl is shipped or (
            tpl.get("tenant_id") is None and tpl["subject"] == shipped["subject"] and tpl["body"] == shipped["body"]))

    def locales(self, channel: str) -> set[str]:
        """Every locale some layer has a version of ``channel`` in."""
        return {loc for live in (self.own, self.platform, self.shipped) for (ch, loc) in live if ch == channel}


#: Left-to-right isolate and pop directional isolate: an LTR island inside a right-to-left text.
LRI, PDI = "\u2066", "\u2069"


def ltr_text(value) -> str:
    """``value`` as a left-to-right island of plain text (inbox, SMS, push)."""
    return f"{LRI}{value}{PDI}"


def ltr_html(value) -> Markup:
    """``value`` as a left-to-right island of HTML (email): ``<bdi dir="ltr">``, escaped."""
    return Markup('<bdi dir="ltr">%s</bdi>') % (value,)


_DURATION_UNITS = {"en": ("s", "min", "h"), "fa": ("ثانیه", "دقیقه", "ساعت")}


def duration(seconds, locale: str = "en") -> str:
    """Seconds in words of ``locale`` (``90 s``, ``10 min``, ``2.5 h``; Persian units and digits for ``fa``)."""
    try:
        seconds = int(round(float(seconds)))
    except (TypeError, ValueError):
        return str(seconds)
    sec, minute, hour = _DURATION_UNITS.get(locale, _DURATION_UNITS["en"])
    if seconds < 120:
        text = f"{seconds} {sec}"
    elif seconds < 7200:
        text = f"{seconds // 60} {minute}"
    else:
        text = f"{seconds / 3600:.1f} {hour}"
    return fa_digits(text) if locale == "fa" else text


_OBJECT_PATHS = {"alert": "/alerts/{}", "job": "/jobs/{}", "ticket": "/tickets/{}"}


def safe_path(value) -> str | None:
    """``value`` when it is a path on this site (``/...``, not ``//host``, no backslash or control
    character), else None: what a notification may link to."""
    if not isinstance(value, str) or not value.startswith("/") or value.startswith("//") or len(value) > 500:
        return None
    if any(c == "\\" or ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        return None
    return value


def object_link(variables: dict | None, aggregate: str | None = None) -> str | None:
    """The path of what a notification is about: the policy's ``link`` variable (a ticket's requester
    gets the portal's page, an agent the dashboard's), else the page of the event's aggregate
    (``alert:<id>``, ``job:<id>``, ``ticket:<id>``); None when it is about nothing with a page."""
    link = safe_path((variables or {}).get("link"))
    if link:
        return link
    kind, _, ident = (aggregate or "").partition(":")
    if kind in _OBJECT_PATHS and ident and safe_path("/" + ident):
        return _OBJECT_PATHS[kind].format(ident)
    return None


def absolute_url(base: str | None, link: str | None) -> str | None:
    """``base`` + ``link`` (a path on this site); the path alone without a base; None without a path."""
    path = safe_path(link)
    if path is None:
        return None
    return f"{base.rstrip('/')}{path}" if base else path


_HREF = re.compile(r'(\s(?:href|src)=")(/(?!/)[^"]*)"')


def absolute_links(html: str, base: str | None) -> str:
    """Every ``href``/``src`` of ``html`` that is a path on this site made absolute on ``base``
    (an email is read outside the site: a bare path opens nothing)."""
    if not base:
        return html
    base = base.rstrip("/")
    return _HREF.sub(lambda m: f'{m.group(1)}{base}{m.group(2)}"', html)


def money(cents, currency: str = "") -> str:
    try:
        amount = f"{int(cents) / 100:,.2f}"
    except (TypeError, ValueError):
        amount = str(cents)
    return f"{amount} {currency}".strip()


# ---------------------------------------------------------------- bounds (issue 25)
#
# A template is code written by a template author and run by the web (preview) and the worker (sending),
# which every tenant shares.  The sandbox below bounds what one render may take: steps (loop iterations
# and calls), integer size, the size of strings and lists built by ``*``/``+``, numeric arguments, and
# the output.  What Python cannot interrupt (one C call) is refused before it is made where it can be
# recognised (``3**(10**7)``, ``'x' * 10**9``); the preview also renders in a separate process with a
# hard deadline and a memory limit (:mod:`.render_sandbox`), and sending runs under the job's timeout.

#: Loop iterations plus calls (functions, macros, methods, filters' iterations are not counted) per render.
MAX_STEPS = 100_000
#: Characters of one rendered subject or body.
MAX_OUTPUT = 40_000
#: Bits of any integer a ``**`` or ``*`` may produce (1,233 decimal digits: far below Python's 4,300 limit).
MAX_INT_BITS = 4096
#: Length of a string or list a ``*`` or ``+`` may produce, and the largest number argument of a call.
MAX_SEQUENCE = 40_000
MAX_ARGUMENT = 100_000


class RenderLimit(TemplateError):
    """A render went past one of the bounds: ``code`` names which (``too_many_steps``, ``too_large``...)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


_steps: contextvars.ContextVar[list] = contextvars.ContextVar("opsboard_template_steps")
_WIDE_FORMAT = re.compile(r"[%{][^%{}]*?\d{6,}")


def _step(n: int = 1) -> None:
    budget = _steps.get(None)
    if budget is None:
        return
    budget[0] += n
    if budget[0] > MAX_STEPS:
        raise RenderLimit("too_many_steps", f"the template takes more than {MAX_STEPS} steps (loops and calls)")


def _check_argument(value) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int) and abs(value) > MAX_ARGUMENT:
        raise RenderLimit("too_large", f"a number argument above {MAX_ARGUMENT} is not allowed in templates")
    if isinstance(value, str) and _WIDE_FORMAT.search(value):
        raise RenderLimit("too_large", "a format width of six or more digits is not allowed in templates")


def _size(value) -> int | None:
    return len(value) if isinstance(value, (str, list, tuple)) else None


class BoundedEnvironment(SandboxedEnvironment):
    """The sandbox with bounds: counts steps, refuses big powers, repeats and arguments, caps the output.

    No loader: ``include``, ``import``, ``extends`` and ``from`` are refused when the source is
    checked (:func:`_parse`); ``lipsum`` is gone and ``range`` counts its items as steps.
    """

    intercepted_binops = frozenset(["**", "*", "+", "%", "//", "/"])

    def call_binop(self, context, operator_name, left, right):
        if operator_name == "**":
            if isinstance(left, (int, float)) and isinstance(right, (int, float)) and not isinstance(right, bool):
                base_bits = abs(int(left)).bit_length() if abs(left) >= 1 else 1
                if abs(right) > MAX_INT_BITS or base_bits * max(right, 0) > MAX_INT_BITS:
                    raise RenderLimit("too_large", f"a power above {MAX_INT_BITS} bits is not allowed in templates")
        elif operator_name == "*":
            for seq, n in ((left, right), (right, left)):
                size = _size(seq)
                if size is not None and isinstance(n, int) and size * max(n, 0) > MAX_SEQUENCE:
                    raise RenderLimit("too_large", f"a repeat longer than {MAX_SEQUENCE} is not allowed in templates")
            if isinstance(left, int) and isinstance(right, int) and \
                    left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise RenderLimit("too_large", f"a product above {MAX_INT_BITS} bits is not allowed in templates")
        elif operator_name == "+":
            a, b = _size(left), _size(right)
            if a is not None and b is not None and a + b > MAX_SEQUENCE:
                raise RenderLimit("too_large", f"a value longer than {MAX_SEQUENCE} is not allowed in templates")
        elif operator_name == "%" and isinstance(left, str):
            _check_argument(left)
        return super().call_binop(context, operator_name, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805  (the sandbox's own signature)
        _step()
        for value in (*args, *kwargs.values()):
            _check_argument(value)
        target = getattr(__obj, "__wrapped__", __obj)    # the sandbox wraps str.format
        owner = getattr(target, "__self__", None)
        if isinstance(owner, str):
            name = getattr(target, "__name__", None)
            if name in ("format", "format_map"):
                _check_argument(owner)
            elif name == "replace" and len(args) >= 2:
                _check_replace(owner, args[0], args[1])
            elif name == "join" and args:
                _check_join(args[0], owner)
        return super().call(__context, __obj, *args, **kwargs)

    def bounded_concat(self, items):
        """Every ``~`` goes through this (wired in by :func:`_parse`): the joined length is bounded."""
        parts = list(items)
        if sum(len(p) if isinstance(p, str) else len(str(p)) for p in parts) > MAX_SEQUENCE:
            raise RenderLimit("too_large", f"a value longer than {MAX_SEQUENCE} is not allowed in templates")
        return (markup_join if self.autoescape else str_join)(parts)

    def bounded_iter(self, iterable):
        """Every ``for`` loop iterates through this (wired in by :func:`_parse`): one step per item."""
        for item in iterable:
            _step()
            yield item


def _check_replace(value, old, new) -> None:
    if isinstance(value, str) and isinstance(old, str) and isinstance(new, str):
        count = value.count(old) if old else len(value) + 1
        if len(value) + count * max(len(new) - len(old), 0) > MAX_SEQUENCE:
            raise RenderLimit("too_large", f"a value longer than {MAX_SEQUENCE} is not allowed in templates")


def _check_join(items, separator="") -> None:
    if isinstance(items, (list, tuple)):
        total = sum(len(x) if isinstance(x, str) else 1 for x in items) + len(items) * len(str(separator))
        if total > MAX_SEQUENCE:
            raise RenderLimit("too_large", f"a value longer than {MAX_SEQUENCE} is not allowed in templates")


def _bounded_range(*args):
    for value in args:
        _check_argument(value)
    rng = range(*args)
    if len(rng) > MAX_SEQUENCE:
        raise RenderLimit("too_large", f"range() is limited to {MAX_SEQUENCE} items in templates")
    return rng


def _bounded_filter(fn):
    """A filter whose extra arguments (not the value) are checked like a call's."""
    passes_context = hasattr(fn, "jinja_pass_arg")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # (context?, value, *extra): the value itself may be any size (money(cents)); the extra arguments not.
        value, extra = (args[1], args[2:]) if passes_context else (args[0], args[1:])
        for arg in (*extra, *kwargs.values()):
            _check_argument(arg)
        if fn.__name__ == "do_format":   # the value is the format string
            _check_argument(value)
        elif fn.__name__ == "do_replace" and len(extra) >= 2:
            _check_replace(value, extra[0], extra[1])
        elif fn.__name__ == "do_join":
            _check_join(value, extra[0] if extra else kwargs.get("d", ""))
        return fn(*args, **kwargs)
    for attr in ("jinja_pass_arg",):
        if hasattr(fn, attr):
            setattr(wrapper, attr, getattr(fn, attr))
    return wrapper


def _env(autoescape: bool) -> SandboxedEnvironment:
    env = BoundedEnvironment(autoescape=autoescape, undefined=StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters.update(fa_digits=fa_digits, jalali=jalali, money=money, duration=duration,
                       ltr=ltr_html if autoescape else ltr_text)
    env.filters = {name: _bounded_filter(fn) for name, fn in env.filters.items()}
    env.globals.pop("lipsum", None)
    env.globals["range"] = _bounded_range
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
    except (RecursionError, MemoryError):   # ((((...)))) thousands deep
        raise TemplateProblem("too_many_steps", "the template is nested too deeply") from None
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        if isinstance(name, str) and name.startswith("_"):
            raise TemplateProblem("unsafe", f"attribute {name!r} is not allowed in templates", name)
    for node in ast.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        # There is no loader: a notification template is one self-contained text.
        tag = {"Include": "include", "Import": "import", "FromImport": "from", "Extends": "extends"}[type(node).__name__]
        raise TemplateProblem("unsupported_tag", f"{{% {tag} %}} is not available in notification templates", tag)
    for node in ast.find_all(nodes.For):
        node.iter = nodes.Call(nodes.EnvironmentAttribute("bounded_iter"), [node.iter], [], None, None,
                               lineno=node.lineno)
    for node in ast.find_all(nodes.Concat):
        # ``a ~ b`` compiles to one join that no binop hook sees: route it through a bounded one.
        node.nodes = [nodes.Call(nodes.EnvironmentAttribute("bounded_concat"), [nodes.List(node.nodes)], [], None,
                                 None, lineno=node.lineno)]
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
    #: The stable code of ``error`` (``syntax``, ``too_large``, ``too_many_steps``...): pages translate by it.
    error_code: str | None = None
    sms: dict | None = None
    push: dict | None = None


def render(channel: str, locale: str, subject: str, body: str, variables: dict) -> tuple[str, str]:
    """Render one template; raises :class:`TemplateProblem` (missing variable, unsafe access)."""
    env = _env_for(channel)
    trees = _parse(subject, channel), _parse(body, channel)
    token = _steps.set([0])
    try:
        out_subject, out_body = (_render_capped(env.from_string(tree), variables) for tree in trees)
    except RenderLimit as exc:
        raise TemplateProblem(exc.code, str(exc)) from None
    except TemplateError as exc:  # UndefinedError, SecurityError
        code = "unsafe" if type(exc).__name__ == "SecurityError" else "missing_variable"
        raise TemplateProblem(code, str(exc)) from None
    except RecursionError:
        raise TemplateProblem("too_many_steps", "the template recurses too deeply") from None
    except MemoryError:
        raise TemplateProblem("too_large", "the template needs too much memory") from None
    except Exception as exc:  # noqa: BLE001  (a template author's mistake: 1/0, int('x'), a huge number...)
        raise TemplateProblem("render_error", f"the template failed: {type(exc).__name__}: {exc}"[:300]) from None
    finally:
        _steps.reset(token)
    if channel == "email" and locale in RTL_LOCALES:
        out_body = f'<div dir="rtl" lang="{locale}" style="direction:rtl;text-align:right">{out_body}</div>'
    return out_subject.strip(), out_body.strip()


def _render_capped(template, variables: dict) -> str:
    """Render chunk by chunk, stopping as soon as the output passes :data:`MAX_OUTPUT` characters."""
    parts, size = [], 0
    for chunk in template.generate(variables):
        size += len(chunk)
        if size > MAX_OUTPUT:
            raise RenderLimit("too_large", f"the rendered text is longer than {MAX_OUTPUT} characters")
        parts.append(chunk)
    return "".join(parts)


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


_LTR_BDI = re.compile(r'<bdi dir="ltr">(.*?)</bdi>', re.S)
_ANCHOR = re.compile(r'<a\s[^>]*?href="([^"]+)"[^>]*>(.*?)</a>', re.S | re.I)


def email_text(body_html: str) -> str:
    """The text/plain alternative of a rendered HTML email body: its text, tags removed, entities decoded;
    a link keeps its address after its words (``View the alert: https://...``), as a left-to-right
    island, so the text part opens what the HTML part does."""
    def anchor(m):
        href, words = m.group(1), m.group(2)
        if Markup(words).striptags() == Markup(href).unescape():
            return words
        return f"{words}: {LRI}{href}{PDI}"
    text = _LTR_BDI.sub(lambda m: f"{LRI}{m.group(1)}{PDI}", _ANCHOR.sub(anchor, body_html))
    return Markup(text).striptags()


def preview(channel: str, locale: str, subject: str, body: str, declared, sample: dict) -> Rendered:
    """Render for the authoring page: never raises; lists used and missing variables."""
    out = Rendered("", "", locale, locale in RTL_LOCALES)
    try:
        out.used = check_source(subject, body, declared, channel)
    except TemplateProblem as exc:
        out.error, out.error_code = f"{exc.code}: {exc}", exc.code
        try:
            out.used = variables_used(subject, channel) | variables_used(body, channel)
        except TemplateProblem:
            return out
    out.missing = sorted(v for v in out.used if v not in sample)
    if out.error is None and not out.missing:
        try:
            out.subject, out.body = render(channel, locale, subject, body, sample)
        except TemplateProblem as exc:
            out.error, out.error_code = f"{exc.code}: {exc}", exc.code
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
