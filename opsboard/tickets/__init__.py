"""Support tickets: the workflow (:mod:`.workflow`), the SLA clock (:mod:`.sla`) and the
service every caller goes through (:mod:`.service`).  See README, "Support tickets"."""
