"""A tenant ready for tickets: policies, categories, an admin, an agent, a requester, an ops user."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from opsboard import auth
from opsboard.tickets import service


@dataclass
class Desk:
    tenant: dict
    admin: auth.Principal
    agent: auth.Principal
    ops: auth.Principal
    requester: dict

    def caller(self, role: str) -> service.Caller:
        if role == "requester":
            return service.Caller(self.requester["id"], self.requester["email"])
        principal = {"admin": self.admin, "support_agent": self.agent, "ops": self.ops}[role]
        return service.Caller.of(principal, self.tenant["id"])

    @property
    def scope(self):
        return auth.TenantScope(all=False, ids=(self.tenant["id"],))


def make_desk(conn, slug: str | None = None) -> Desk:
    slug = slug or f"t-{uuid.uuid4().hex[:8]}"
    tenant = auth.ensure_tenant(conn, slug)
    users = {}
    for role in ("admin", "support_agent", "ops"):
        u = auth.create_user(conn, f"{role.replace('_', '-')}-{uuid.uuid4().hex[:6]}@example.test",
                             "correct horse battery", role, slug)
        users[role] = auth.load_principal(conn, u["id"])
    for priority, (fr, res) in {"low": (480, 4320), "normal": (240, 1440), "high": (60, 480),
                                "urgent": (15, 240)}.items():
        service.set_policy(conn, tenant["id"], priority, fr, res)
    service.set_category(conn, tenant["id"], "billing", "Billing")
    service.set_category(conn, tenant["id"], "access", "Access request", is_request=True)
    requester = service.ensure_requester(conn, f"customer-{uuid.uuid4().hex[:6]}@example.test",
                                         tenant_id=tenant["id"])
    return Desk(tenant, users["admin"], users["support_agent"], users["ops"], requester)
