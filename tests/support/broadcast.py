"""A broadcast for the tests: ``test.announced`` notifies every member of the event's tenant, read in
pages of 100 (opsboard.notifications.policy.tenant_members), in the inbox and by push, one page at a
time; ``test.announced_in_lanes`` the same with the product's default lanes (two pages at a time)."""
from opsboard import outbox
from opsboard.notifications import policy

EVENT = "test.announced"
#: The same broadcast with the default lanes: two pages at a time (job groups as lanes).
EVENT_LANES = "test.announced_in_lanes"
PAGE = 100


def register(cat) -> None:
    outbox.define_event(cat, EVENT, 1, aggregate="announcement",
                        fields={"text": outbox.EventField(str, max_length=200)},
                        description="A test announcement to every member of a tenant.")
    policy.declare(cat, EVENT, category="system", channels=("inbox", "push"),
                   audience=policy.tenant_members(page_size=PAGE, lanes=1))
    outbox.define_event(cat, EVENT_LANES, 1, aggregate="announcement",
                        fields={"text": outbox.EventField(str, max_length=200)},
                        description="A test announcement to every member of a tenant, two pages at a time.")
    policy.declare(cat, EVENT_LANES, category="system", channels=("inbox", "push"),
                   audience=policy.tenant_members(page_size=PAGE))
