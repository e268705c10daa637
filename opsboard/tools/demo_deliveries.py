"""The demo's real deliveries: a provider sandbox in the demo process, endpoints and
subscriptions pointing at it, a few injected faults, and a trickle of real sends."""
from __future__ import annotations

import random

from .sandbox import Sandbox

#: Routes that misbehave for the whole demo: a receiver that is down (its breaker
#: opens, deliveries wait), and one that refuses the payload (dead letters).
STANDING_FAULTS = [("/hooks/acme-3", {"kind": "status", "status": 503, "retry_after": "20"}),
                   ("/hooks/globex-2", {"kind": "status", "status": 400})]


def start(url: str, tenants: dict, creds: dict, host: str = "127.0.0.1") -> tuple[Sandbox, dict, dict]:
    """Start the sandbox, seed endpoints and push subscriptions; returns (sandbox, worker env, state)."""
    from .. import auth
    from ..deliveries import messages, webhooks
    from ..db import connect

    sb = Sandbox(host, 0, 0, sms_key="demo-sms-key").start()
    for route, fault in STANDING_FAULTS:
        sb.fault(route, **fault)
    if "vapid_private_key" not in creds:
        creds["vapid_private_key"] = messages.generate_vapid_keys()[0]
    env = {"OPSBOARD_SMTP_HOST": host, "OPSBOARD_SMTP_PORT": str(sb.smtp_port), "OPSBOARD_SMTP_FROM": "demo@opsboard.demo",
           "OPSBOARD_SMS_URL": f"{sb.url}/sms", "OPSBOARD_SMS_KEY": sb.sms_key, "OPSBOARD_WEBHOOK_ALLOW": host,
           "OPSBOARD_VAPID_PRIVATE_KEY": creds["vapid_private_key"], "OPSBOARD_BREAKER_COOLDOWN": "15"}
    # This process seeds subscriptions pointing at the sandbox on loopback: it
    # allows what the workers' settings (the env above) allow.
    from ..config import ProviderSettings
    allow = ProviderSettings.from_env(env).webhook_allow
    state = {"subscriptions": {}}
    with connect(url) as conn:
        # Endpoints from an earlier demo run point at an old sandbox port: disable them.
        conn.execute("UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'demo restarted' "
                     "WHERE enabled AND url NOT LIKE %s", (f"{sb.url}/%",))
        for slug, tid in tenants.items():
            if slug == "operator":
                continue
            for n in range(1, 5):
                webhooks.create_endpoint(conn, tid, f"{sb.url}/hooks/{slug}-{n}",
                                         ["*"] if n != 4 else ["order.refunded"], description=f"{slug} receiver {n}")
            sub = messages.add_push_subscription(conn, tid, sb.new_push_subscription(), user_ref=f"{slug}-user",
                                                 allow=allow)
            state["subscriptions"][slug] = sub["id"]
    return sb, env, state


def traffic_tick(conn, sb: Sandbox, tenants: dict, state: dict, rng: random.Random, tick: int) -> None:
    """One second of delivery traffic: events fanned out to webhooks, emails, SMS, OTPs, pushes."""
    from psycopg.types.json import Jsonb

    from .. import jobqueue
    from ..deliveries import messages
    from ..schema import new_id

    if tick % 30 == 7:  # a mail server hiccup now and then: 4xx replies, retried
        sb.fault("smtp", status=451, count=3)
    if tick % 45 == 20:  # the SMS gateway throttles
        sb.fault("/sms/messages", status=429, retry_after="5", count=2)
    for slug, tid in tenants.items():
        if slug == "operator" or rng.random() < 0.5:
            continue
        with conn.transaction():
            event_id = new_id()
            conn.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, "
                         "payload) VALUES (%s, %s, 1, 'order', %s, %s, %s)",
                         (event_id, rng.choice(["order.paid", "order.shipped", "order.refunded"]),
                          f"o-{rng.randint(1, 9999)}", tid, Jsonb({"order_id": rng.randint(1, 9999)})))
            jobqueue.enqueue(conn, "webhook.fanout", {"event_id": str(event_id)}, tenant=tid, event_id=event_id)
            r = rng.random()
            if r < 0.3:
                messages.send_email(conn, tid, f"user{rng.randint(1, 99)}@{slug}.demo", "welcome",
                                     {"name": f"User {rng.randint(1, 99)}"})
            elif r < 0.5:
                messages.send_sms(conn, tid, f"+1555{rng.randint(1000000, 9999999)}", "otp",
                                   {"code": f"{rng.randint(0, 999999):06d}", "minutes": 2}, otp=True,
                                   expires_in=120)
            elif r < 0.6 and slug in state["subscriptions"]:
                try:
                    messages.send_push(conn, tid, state["subscriptions"][slug], str(new_id()))
                except messages.InvalidRecipient:
                    pass
