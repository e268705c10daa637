"""Events whose policies digest, for the digest tests (integration and the journey's worker, through
``OPSBOARD_JOB_MODULES``): each notifies the listed ``user_ids`` in the inbox, by email and by SMS, and
says ``{{ title }}`` on every channel, so a digest's first and last items can be told apart.

- ``test.digest_window``: a 10-minute window from the first item;
- ``test.digest_daily``: daily at 09:00 in the recipient's time zone;
- ``test.digest_keyed``: a 10-minute window per value of the payload's ``thread``;
- ``test.digest_quick``: a 4-second window (the journey waits it out in real time);
- ``test.digest_plain``: no digest (only quiet hours collect it);
- ``test.digest_critical``: a critical category (security): never collected.
"""
from opsboard import outbox
from opsboard.notifications import digest, policy

CHANNELS = ("inbox", "email", "sms")
QUICK_SECONDS = 4
EVENTS = {
    "test.digest_window": ("ticket", digest.window(minutes=10)),
    "test.digest_daily": ("ticket", digest.daily("09:00")),
    "test.digest_keyed": ("ticket", digest.window(minutes=10, key="thread")),
    "test.digest_quick": ("ticket", digest.window(seconds=QUICK_SECONDS)),
    "test.digest_plain": ("ticket", None),
    "test.digest_critical": ("security", None),
}


def _recipients(conn, event):
    return event["payload"]["user_ids"]


def register(cat) -> None:
    for name, (category, how) in EVENTS.items():
        outbox.define_event(cat, name, 1, aggregate="notice",
                            fields={"user_ids": outbox.EventField(list), "title": outbox.EventField(str),
                                    "thread": outbox.EventField(str, required=False)},
                            description="Test-only: a notice to the listed users, for the digest tests.")
        policy.declare(cat, name, category=category, channels=CHANNELS, recipients=_recipients, digest=how)
        for channel in CHANNELS:
            for locale in ("fa", "en"):
                subject = "" if channel == "sms" else "{{ title }}"
                cat.ship_template(name, channel, locale, subject, "{{ title }}", "title", {"title": "hello"})
