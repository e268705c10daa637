"""Every role's main pages in a real browser, in fa and en (issue 23, "Persian and right-to-left, all the way",
"The end user's pages", "Small screens and accessibility"):

- no English left on a fa page (Latin words that are not ids, codes, names or inside a left-to-right island);
- axe-core (vendored here for the tests only: tests/browser/axe.min.js, axe-core 4.14.1, MPL-2.0) finds no serious
  or critical violation on any page, in fa and en, at 1280 and 390 px, light and dark (all eight combinations);
- a walk at desktop and phone widths saves a screenshot of every page to test-output/<test name>/, runs axe on
  it in both themes, and checks that no page is wider than the phone.

Same setup as test_ops_journey (Debian's chromium, a real threaded server).  The walk is bounded: one world,
one browser, each page loaded once per language and width.
"""
from __future__ import annotations

import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from opsboard import auth, audit
from opsboard.notifications import templates
from opsboard.reports import runs as report_runs
from opsboard.tickets import service
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed
from tests.support.tickets import make_desk

pytestmark = pytest.mark.browser

AXE = (Path(__file__).parent / "axe.min.js").read_text(encoding="utf-8")


@pytest.fixture
def every_role(app):
    """One operator admin, a tenant's ops user, a support agent, a template author and an end user, with
    something on each of their pages: dead jobs and an alert, a ticket with a reply and an assignment,
    a report run, a template, audit rows and inbox notifications."""
    emails = {"admin": "admin-walk@example.test", "ops": "ops-walk@example.test",
              "support_agent": "support-walk@example.test", "template_author": "author-walk@example.test",
              "member": "end-user@example.test"}
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        admin = auth.create_user(c, emails["admin"], PASSWORD, "admin", "operator")
        auth.create_user(c, emails["template_author"], PASSWORD, "template_author", "operator")
        desk = make_desk(c, "walk-desk")
        auth.create_user(c, emails["ops"], PASSWORD, "ops", "walk-desk")
        agent = auth.create_user(c, emails["support_agent"], PASSWORD, "support_agent", "walk-desk")
        member = auth.create_user(c, emails["member"], PASSWORD, "member", "walk-desk")
        tenant_id = desk.tenant["id"]
        now = seed.db_now(c)
        dead = seed.jobs(c, tenant_id, 4, "test.permanent", {"note": "ارسال پیامک"})
        seed.kill(c, dead, "http_410", at=now - timedelta(minutes=3), detail="پیامک نرسید")
        seed.jobs(c, tenant_id, 3)
        # A webhook endpoint with a dead delivery (its page), and a worker (its controls), issue 44.
        from opsboard.deliveries import webhooks
        endpoint = webhooks.create_endpoint(c, tenant_id, "https://hooks.example.com/walk", ("*",))
        hook_dead = seed.jobs(c, tenant_id, 1, "webhook.deliver",
                              {"endpoint_id": str(endpoint["id"]), "event_id": str(uuid.uuid4())})
        seed.kill(c, hook_dead, "http_400", at=now - timedelta(minutes=2),
                  detail='HTTP 400: {"error": "invalid_payload", "api_key": [redacted]}')
        # It serves only critical: the ready default jobs keep their no_worker alert (test_persian_and_end_user reads it).
        seed.worker(c, "walk-host:100:w1", {"critical": 1})
        from opsboard.alerts import AlertService as Alerts
        from worker.services.depth import DepthSampler
        DepthSampler().run_once(c)
        Alerts().run_once(c)
        ticket = service.create_ticket(c, desk.caller("requester"), tenant_id=tenant_id,
                                       subject="پرینتر کار نمی‌کند", body="از صبح چاپ نمی‌شود.",
                                       category="billing", priority="high")
        agent_caller = service.Caller.of(auth.load_principal(c, agent["id"]), tenant_id)
        service.act(c, ticket["id"], "assign", agent_caller, scope=desk.scope, fields={"assignee_id": agent["id"]})
        service.act(c, ticket["id"], "reply", agent_caller, scope=desk.scope, fields={"body": "در حال بررسی است."})
        templates.seed(c, "order.paid", "inbox", "fa", "پرداخت سفارش", "مبلغ {{ amount_cents }} پرداخت شد.",
                       "amount_cents", {"amount_cents": 125000})
        templates.seed(c, "order.paid", "inbox", "en", "Order paid", "{{ amount_cents }} was paid.",
                       "amount_cents", {"amount_cents": 125000})
        report_runs.request_report(c, tenant_id, "job_activity",
                                   {"date_from": "2026-03-21", "date_to": "2026-03-22", "time_zone": "Asia/Tehran"},
                                   audit.Actor(emails["admin"], admin["id"], "req-walk"))
        for i, (locale, title, body) in enumerate([("fa", "سفارش شما ارسال شد", "بستهٔ شما امروز می‌رسد."),
                                                   ("fa", "پاسخ به درخواست", "پشتیبانی پاسخ داد."),
                                                   ("en", "Welcome", "Your account is ready.")]):
            c.execute("""INSERT INTO notifications (id, tenant_id, recipient_id, event_id, event_type, category,
                         template_key, locale, title, body, read_at)
                         VALUES (%s, %s, %s, %s, 'walk.notice', 'ticket', 'walk.notice', %s, %s, %s, %s)""",
                      (uuid.uuid4(), tenant_id, member["id"], uuid.uuid4(), locale, title, body,
                       now if i == 1 else None))
    return {"emails": emails, "dead": dead, "ticket": ticket, "endpoint": endpoint["id"], "hook_dead": hook_dead[0]}


def pages(world) -> dict[str, list[str]]:
    """Each role's main pages (what its navigation offers, and a detail page of each kind)."""
    ticket = world["ticket"]["id"]
    return {
        "admin": ["/queues/", "/tenants/", "/jobs/", f"/jobs/{world['dead'][0]}", "/dead/", "/workers/",
                  "/deliveries/", "/webhooks/", "/notifications/", "/alerts/", "/reports/", "/reports/schedules",
                  "/tickets/", f"/tickets/{ticket}", "/templates/", "/templates/order.paid/edit?channel=inbox&locale=fa",
                  "/audit/", "/api-keys/", "/account", f"/webhooks/{world['endpoint']}", f"/jobs/{world['hook_dead']}",
                  "/workers/walk-host:100:w1/controls"],
        "ops": ["/queues/", "/jobs/", "/dead/", "/alerts/", "/reports/", "/audit/"],
        "support_agent": ["/tickets/", f"/tickets/{ticket}"],
        "template_author": ["/templates/", "/templates/order.paid/edit?channel=inbox&locale=fa"],
        "member": ["/inbox/", "/inbox/preferences", "/account", "/my/tickets/", "/my/tickets/new"],
    }


def _set_locale(app, email: str, locale: str) -> None:
    with connect(app.extensions["test_db_url"]) as c:
        c.execute("UPDATE users SET locale = %s WHERE email = %s", (locale, email))


def _sign_in(page, server, email):
    page.goto(f"{server}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)


#: Visible text of the page outside left-to-right islands (code, bdi, dir=ltr, times, inputs' values) and
#: outside content people wrote (dir=auto: a ticket's subject, a notification in its own language).
VISIBLE_TEXT = """() => {
  const skip = 'code, pre, kbd, samp, bdi, time, [dir="ltr"], [dir="auto"], [lang="en"], script, style, svg title,'
             + ' [hidden], [aria-hidden="true"], option, textarea, .lang-switch, .brand,'
             // a template's rendered preview: the notification as its author wrote it, digits included
             + ' .preview-cell';
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const el = node.parentElement;
    if (!el || el.closest(skip) || !node.textContent.trim()) continue;
    if (!el.getClientRects().length) continue;        // not rendered (a closed menu on a phone is still text)
    out.push(node.textContent.trim());
  }
  for (const el of document.querySelectorAll('[placeholder], [aria-label], [title]')) {
    if (el.closest(skip)) continue;
    for (const a of ['placeholder', 'aria-label']) if (el.getAttribute(a)) out.push(el.getAttribute(a));
  }
  return out;
}"""

#: Latin words a Persian page may show as they are: product, protocol and standard names, units, and the
#: names this world gives things (queues, a tenant, a ticket category).
ALLOWED_LATIN = {"opsboard", "CSV", "JSON", "UTC", "SLA", "API", "SMS", "URL", "HTTP", "HTTPS", "HTML", "ID", "IRR",
                 "cron", "loopback", "OpenAPI", "Bearer", "Standard", "Webhooks", "pid",
                 "default", "critical", "bulk", "walk-desk", "Billing"}
#: Ids and codes written inline: a dotted key, a snake_case code, an address, a path, key=value.
ID_LIKE = re.compile(r"\S*[._@/:=]\S*")


def latin_words(texts: list[str]) -> list[str]:
    found = []
    for text in texts:
        for word in re.findall(r"[A-Za-z][A-Za-z'’-]+", ID_LIKE.sub(" ", text)):
            if word in ALLOWED_LATIN or word.upper() in ALLOWED_LATIN:
                continue
            found.append(f"{word!r} in {text[:80]!r}")
    return found


#: A number written the Latin way on a Persian page: a Latin digit, or Persian digits around a Latin separator
#: (۱.۵, ۱,۲۳۴) or before a Latin percent sign; fa numbers read ۱٬۲۳۴٫۵ and ۲۵٪ (issue 44).
#: (Latin digits count outside ids and codes; Persian digits are never an id's, so their separators count anywhere.)
LATIN_DIGIT = re.compile(r"[0-9]")
LATIN_SEPARATOR = re.compile(r"[۰-۹][.,][۰-۹]|[۰-۹]%")


def latin_numbers(texts: list[str]) -> list[str]:
    return [repr(text[:80]) for text in texts
            if LATIN_DIGIT.search(ID_LIKE.sub(" ", text)) or LATIN_SEPARATOR.search(text)]


def test_no_english_on_fa_pages(app, server, browser, every_role):  # noqa: F811
    """Every page of every role in fa: no Latin word outside ids, codes, names and left-to-right islands, and
    every number in Persian digits and separators."""
    leftovers: dict[str, list[str]] = {}
    for role, paths in pages(every_role).items():
        email = every_role["emails"][role]
        _set_locale(app, email, "fa")
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        _sign_in(page, server, email)
        for path in paths:
            page.goto(server + path)
            page.wait_for_load_state("networkidle")
            assert page.get_attribute("html", "lang") == "fa", path
            texts = page.evaluate(VISIBLE_TEXT)
            words = latin_words(texts) + [f"number {n}" for n in latin_numbers(texts)]
            if words:
                leftovers[f"{role} {path}"] = words
        context.close()
    assert leftovers == {}, "\n".join(f"{k}: {v}" for k, v in leftovers.items())


def _axe(page) -> list[str]:
    page.add_script_tag(content=AXE)
    result = page.evaluate("""() => axe.run(document, {resultTypes: ['violations']}).then(r =>
        r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
          .map(v => v.id + ' (' + v.impact + '): ' + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | ')))""")
    return result


#: Inputs whose placeholder is wider than the box it is shown in (issue 44: "placeholders are cut off"), measured
#: in the input's own font: "name: placeholder (text px > box px)".
CUT_PLACEHOLDERS = """() => {
  const canvas = document.createElement('canvas').getContext('2d');
  const out = [];
  for (const el of document.querySelectorAll('input[placeholder], textarea[placeholder]')) {
    if (!el.getClientRects().length || el.type === 'hidden') continue;
    const st = getComputedStyle(el);
    canvas.font = st.font;
    const box = el.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
    const longest = el.tagName === 'TEXTAREA' ? 0 : canvas.measureText(el.placeholder).width;
    if (longest > box + 1) out.push(`${el.name || el.id}: ${el.placeholder} (${Math.ceil(longest)} > ${Math.floor(box)} px)`);
  }
  return out;
}"""


#: Each language is walked at two widths, a desktop and a phone; at each width every page is loaded once and met by
#: axe twice, in the light and in the dark theme (the system's setting, emulated on the loaded page: no second load
#: or sign-in), so every page meets axe in all eight combinations of fa/en, 1280/390 px and light/dark.  The
#: screenshot is taken in the first scheme of the width (light on the desktop, dark on the phone).
PASSES = [(1280, 900, ("light", "dark")), (390, 844, ("dark", "light"))]


@pytest.mark.parametrize("locale", ["fa", "en"])
def test_walk_every_role_with_axe_on_desktop_and_phone(app, server, browser, every_role, shots, locale):  # noqa: F811
    """Every role's pages at 1280 px and 390 px, each in the light and the dark theme: a screenshot each
    (test-output/<test name>/), no serious or critical axe-core violation, no page wider than the phone and no
    placeholder wider than its input."""
    violations: dict[str, list[str]] = {}
    too_wide = []
    cut: list[str] = []
    combos = set()
    for role, paths in pages(every_role).items():
        email = every_role["emails"][role]
        _set_locale(app, email, locale)
        for width, height, schemes in PASSES:
            # The page's CSP forbids inline scripts; axe is the test's own script, injected past it.
            context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=schemes[0],
                                          is_mobile=width < 500, has_touch=width < 500, bypass_csp=True)
            page = context.new_page()
            _sign_in(page, server, email)
            for path in paths:
                page.goto(server + path)
                page.wait_for_load_state("networkidle")
                assert page.get_attribute("html", "lang") == locale
                name = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")[:40] or "home"
                shots(page, f"{role}-{width}-{schemes[0]}-{name}")
                for scheme in schemes:
                    page.emulate_media(color_scheme=scheme)
                    assert page.evaluate(f"matchMedia('(prefers-color-scheme: {scheme})').matches"), scheme
                    found = _axe(page)
                    combos.add((width, scheme))
                    if found:
                        violations[f"{role} {width} {scheme} {path}"] = found
                page.emulate_media(color_scheme=schemes[0])
                cut.extend(f"{width} {path} {c}" for c in page.evaluate(CUT_PLACEHOLDERS))
                if width < 500 and not page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"):
                    too_wide.append(f"{role} {path}: {page.evaluate('document.documentElement.scrollWidth')} px")
            context.close()
    assert combos == {(w, s) for w in (1280, 390) for s in ("light", "dark")}
    assert violations == {}, "\n".join(f"{k}: {v}" for k, v in violations.items())
    assert too_wide == []
    assert sorted(set(cut)) == [], "placeholders cut off:\n" + "\n".join(sorted(set(cut)))


def test_back_link_names_queue_health_when_opened_from_it(app, server, browser, every_role):  # noqa: F811
    """Issue 44's smaller finding, in the browser: Queue health → "Cancel waiting…" → the confirmation's back link
    reads "← Queue health" (it read "← Dead letters") and leads there; a job page opened from the Workers page
    leads back to Workers, through the Referer the browser sends."""
    email = every_role["emails"]["admin"]
    _set_locale(app, email, "en")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    _sign_in(page, server, email)
    page.goto(server + "/queues/")
    page.locator("a.cancel-many-link").first.click()
    page.wait_for_url("**/jobs/cancel-many/confirm**")
    back = page.locator("a[data-back]")
    assert back.inner_text() == "← Queue health"
    back.click()
    page.wait_for_url(f"{server}/queues/")
    page.goto(f"{server}/jobs/{every_role['dead'][0]}")         # typed in: no list page before it, the default
    assert page.locator("a[data-back]").inner_text() == "← Jobs"
    # The walk's worker runs no job, so the Workers page has no job link of its own: one is added to it, to
    # follow from that page as a reader would.
    page.goto(f"{server}/workers/")
    page.evaluate("id => { const a = document.createElement('a'); a.href = '/jobs/' + id; a.id = 'go';"
                  " document.querySelector('main').append(a); a.textContent = 'go'; }", str(every_role["dead"][0]))
    page.click("#go")
    page.wait_for_url(f"**/jobs/{every_role['dead'][0]}")
    assert page.locator("a[data-back]").inner_text() == "← Workers"
    context.close()
