"""Back links that name where the reader came from (issue 44: "← Dead letters" on a page opened from Queue
health).

A page with a back link asks :func:`back_link` for it with its usual origin as the default.  The origin is
one of the list pages of :data:`ORIGINS`, named by a ``back`` parameter (a key of that allow-list, carried by
the links and forms that lead there) or, failing that, by the ``Referer`` when it is this site's own address
of one of those list pages.  Nothing else is ever linked: an unknown ``back`` or a foreign Referer gives the
default, so the link can never leave the site.  A Referer's query (a list's filter) is kept: the reader goes
back to the list as they left it.
"""
from __future__ import annotations

from urllib.parse import urlparse

from flask import current_app, request, url_for
from flask_babel import lazy_gettext as _l
from markupsafe import Markup
from werkzeug.exceptions import HTTPException

#: The list pages a back link may name: key -> (endpoint, the link's text).
ORIGINS = {
    "queues": ("queues.index", _l("← Queue health")),
    "dead": ("deadletters.index", _l("← Dead letters")),
    "jobs": ("jobs.index", _l("← Jobs")),
    "workers": ("workers.index", _l("← Workers")),
    "tenants": ("tenants.index", _l("← All tenants")),
    "alerts": ("alerts.index", _l("← Alerts")),
    "webhooks": ("webhooks.index", _l("← Webhook endpoints")),
    "deliveries": ("deliveries.index", _l("← Deliveries")),
}
#: A filter longer than this is not carried back (a list's query is short).
MAX_QUERY = 1000


def _paths() -> dict[str, str]:
    found = {}
    for key, (endpoint, _label) in ORIGINS.items():
        if endpoint.split(".")[0] in current_app.blueprints:
            found[url_for(endpoint)] = key
    return found


def origin(default: str) -> tuple[str, str]:
    """(key of :data:`ORIGINS`, the query to keep) of where this request came from; ``(default, "")``
    when neither ``back`` nor the Referer names a known list page of this site."""
    named = request.values.get("back")
    if named in ORIGINS:
        return named, ""
    referrer = request.referrer or ""
    if referrer and len(referrer) <= 4000:
        parts = urlparse(referrer)
        if parts.scheme in ("http", "https") and parts.netloc == request.host and not parts.fragment:
            key = _paths().get(parts.path)
            if key is not None:
                return key, parts.query if len(parts.query) <= MAX_QUERY else ""
    return default, ""


def back_href(default: str) -> str:
    key, query = origin(default)
    return url_for(ORIGINS[key][0]) + ("?" + query if query else "")


def back_link(default: str) -> Markup:
    """``<a href=list>← List</a>`` for where the reader came from (``default``: a key of :data:`ORIGINS`)."""
    key, query = origin(default)
    endpoint, label = ORIGINS[key]
    try:
        href = url_for(endpoint) + ("?" + query if query else "")
    except HTTPException:                                    # pragma: no cover (a blueprint left out)
        return Markup("")
    return Markup('<a href="%s" data-back="%s">%s</a>') % (href, key, str(label))


def back_field(default: str | None = None) -> Markup:
    """A hidden ``back`` input for a form whose answer page shows a back link (the form's own address is
    not a list page, so the origin travels with the form)."""
    named = request.values.get("back")
    if named not in ORIGINS:
        named = origin(default)[0] if default else None
    if not named:
        return Markup("")
    return Markup('<input type="hidden" name="back" value="%s">') % named


def register(app) -> None:
    app.jinja_env.globals.update(back_link=back_link, back_field=back_field, back_href=back_href)
