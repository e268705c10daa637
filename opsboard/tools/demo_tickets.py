"""Demo tickets for ``opsboard demo``: English (acme) and Persian (parsian) tickets in several
states, back-dated so the queue shows every SLA badge (on track, at risk, breached, paused, met)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from .. import auth, db
from ..tickets import service

#: (tenant, subject, body, category, priority, minutes ago, actions after creation)
_TICKETS = [
    ("acme", "Cannot sign in after password reset", "The reset link says it expired.", "access", "normal", 5, []),
    ("acme", "Invoice shows the wrong VAT rate", "November invoice uses 19% instead of 9%.", "billing", "high", 50,
     [("triage", {})]),
    ("acme", "Webhook deliveries failing since Monday", "We get 401 on every delivery.", "technical", "urgent", 300,
     [("start", {}), ("note", {"body": "Customer rotated their secret without telling us."})]),
    ("acme", "Please add a second admin", "Access for our new CTO.", "access", "normal", 90,
     [("start", {}), ("reply", {"body": "Could you confirm the e-mail address of the new admin?"}),
      ("wait_on_customer", {})]),
    ("acme", "Export of last month's report", "CSV export please.", "billing", "low", 600,
     [("start", {}), ("reply", {"body": "Attached to the reports page."}),
      ("resolve", {"resolution_code": "answered", "resolution_summary": "Pointed to the reports page."})]),
    ("parsian", "پیامک رمز یک‌بار مصرف نمی‌رسد", "از صبح امروز هیچ پیامکی دریافت نکرده‌ایم.", "technical", "urgent", 20,
     [("triage", {})]),
    ("parsian", "درخواست دسترسی برای کارمند جدید", "لطفاً به خانم احمدی دسترسی مدیر بدهید.", "access", "high", 400,
     [("start", {}), ("note", {"body": "یادداشت داخلی: تأیید مدیر لازم است."})]),
    ("parsian", "صورتحساب آذر ماه", "مبلغ صورتحساب با قرارداد همخوانی ندارد.", "billing", "normal", 30, []),
    ("parsian", "تغییر شماره تماس", "شماره جدید ما را ثبت کنید.", "technical", "low", 2000,
     [("start", {}), ("reply", {"body": "انجام شد."}),
      ("resolve", {"resolution_code": "done", "resolution_summary": "شماره به‌روز شد."}), ("close", {})]),
]


#: The demo end user's own tickets (issue 43): signed in as them, /my/tickets shows one waiting on their
#: answer and one resolved that they may reopen.
END_USER_TICKETS = frozenset({"Please add a second admin", "Export of last month's report"})


def seed_tickets(conn, tenants: dict, agent_email: str = "support@opsboard.demo",
                 end_user_email: str = "user@acme.demo") -> int:
    """Create the demo tickets once (skipped when the demo tenants have tickets already)."""
    if service.list_queue(conn, auth.TenantScope(all=False, ids=(tenants["acme"], tenants["parsian"])), limit=1):
        return 0
    user = db.one(conn, "user_get_by_email", {"email": agent_email})
    agent = auth.load_principal(conn, user["id"]) if user else None
    names = {"acme": {"billing": "Billing", "access": "Access request", "technical": "Technical"},
             "parsian": {"billing": "صورتحساب", "access": "درخواست دسترسی", "technical": "فنی"}}
    for slug in ("acme", "parsian"):
        tid = tenants[slug]
        zone = "Asia/Tehran" if slug == "parsian" else "UTC"
        for priority, (fr, res) in {"low": (480, 4320), "normal": (120, 1440), "high": (60, 480),
                                    "urgent": (15, 240)}.items():
            service.set_policy(conn, tid, priority, fr, res, time_zone=zone)
        for cat, name in names[slug].items():
            service.set_category(conn, tid, cat, name, is_request=(cat == "access"), team="support")
    now = datetime.now(timezone.utc)
    made = 0
    for i, (slug, subject, body, cat, priority, ago, steps) in enumerate(_TICKETS):
        tid = tenants[slug]
        email = end_user_email if subject in END_USER_TICKETS else f"customer{i}@{slug}.demo"
        customer = service.ensure_requester(conn, email, tenant_id=tid)
        requester = service.Caller(customer["id"], customer["email"])
        at = now - timedelta(minutes=ago)
        t = service.create_ticket(conn, requester, tenant_id=tid, subject=subject, body=body, category=cat,
                                  priority=priority, now=at)
        if agent is not None:
            caller = service.Caller.of(agent, tid)
            for n, (action, fields) in enumerate(steps):
                if action == "resolve" and cat == "access":
                    service.act(conn, t["id"], "decide", caller, scope=auth.TenantScope(all=True),
                                fields={"decision": "approved", "reason": "ok"}, now=at + timedelta(minutes=n + 1))
                service.act(conn, t["id"], action, caller, scope=auth.TenantScope(all=True), fields=fields,
                            now=at + timedelta(minutes=n + 1))
            if not steps:
                service.act(conn, t["id"], "assign", caller, scope=auth.TenantScope(all=True),
                            fields={"assignee_id": agent.id}, now=at)
        made += 1
    return made
