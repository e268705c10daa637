"""The tickets bench's set-based seed (opsboard_bench/tickets.py): it loads without foreign-key
triggers and with the secondary indexes dropped, so check that what it leaves is consistent, that
the indexes are back, that the queue sees every SLA badge, and that the same size is reused."""
from __future__ import annotations

from opsboard import auth
from opsboard.tickets import service
from opsboard_bench.tickets import _secondary_indexes, seed
from tests.conftest import connect


def test_seed_is_consistent_shows_every_badge_and_is_reused(db_url):
    with connect(db_url) as c:
        tenants = [auth.ensure_tenant(c, f"bench-{i}")["id"] for i in range(20)]
        auth.ensure_tenant(c, "operator", is_operator=True)
        ops = auth.create_user(c, "ops@bench.test", "bench-password", "admin", "operator")
        agent = auth.create_user(c, "agent@bench.test", "bench-password", "support_agent", "bench-7")
        customer = auth.create_user(c, "customer@bench.test", "bench-password", "member", "bench-0")
        indexes = sorted(_secondary_indexes(c, ("tickets", "ticket_messages")))
        args = {"total": 52_000, "per": 2, "tenants": tenants, "requester": customer["id"], "ops": ops["id"],
                "agent": agent["id"], "agent_tenant": 7}
        assert seed(c, **args) is not None
        assert sorted(_secondary_indexes(c, ("tickets", "ticket_messages"))) == indexes
        assert c.execute("SELECT count(*) AS n FROM tickets").fetchone()["n"] == 52_000
        assert c.execute("SELECT count(*) AS n FROM ticket_messages").fetchone()["n"] == 104_000
        # what the foreign keys would have checked, and per-tenant numbers 1..n
        assert c.execute("""SELECT count(*) AS n FROM ticket_messages m LEFT JOIN tickets t ON t.id = m.ticket_id
                            WHERE t.id IS NULL OR t.tenant_id <> m.tenant_id""").fetchone()["n"] == 0
        assert c.execute("""SELECT count(*) AS n FROM tickets t
                            LEFT JOIN ticket_categories k ON k.id = t.category_id
                            LEFT JOIN sla_policies p ON p.id = t.sla_policy_id
                            WHERE t.tenant_id <> ALL(%s) OR (t.category_id IS NOT NULL AND k.tenant_id <> t.tenant_id)
                               OR p.tenant_id <> t.tenant_id OR p.priority <> t.priority""",
                         (tenants,)).fetchone()["n"] == 0
        assert c.execute("""SELECT count(*) AS n FROM (SELECT tenant_id FROM tickets GROUP BY tenant_id
                            HAVING min(number) <> 1 OR max(number) <> count(*)) x""").fetchone()["n"] == 0
        # the agent of bench-7 is assigned only tickets of bench-7
        assert c.execute("SELECT count(DISTINCT tenant_id) AS n FROM tickets WHERE assignee_id = %s",
                         (agent["id"],)).fetchone()["n"] == 1
        everyone = auth.TenantScope(all=True)
        for state in service.SLA_STATES:
            assert service.list_queue(c, everyone, sla_state=state), state
        assert service.list_queue(c, everyone, search="كيبورد")  # Persian subject, typed with Arabic letters
        assert seed(c, **args) is None  # the same size is reused
