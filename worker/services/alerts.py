"""The alert service: evaluates the alert rules (:mod:`opsboard.alerts`) on an
interval, leader-only like every maintenance service, so that one process
opens and closes alerts.
"""
from __future__ import annotations

import logging
from datetime import datetime

from opsboard import alerts

log = logging.getLogger("worker.alerts")


class Alerts:
    name = "alerts"

    def __init__(self, config: alerts.AlertConfig = alerts.AlertConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        """Evaluate every rule once; returns the alerts opened plus those closed."""
        counts = alerts.evaluate(conn, self.config, now)
        if counts["opened"] or counts["closed"]:
            log.warning("alerts: %d opened, %d closed, %d still open", counts["opened"], counts["closed"],
                        counts["refreshed"])
        return counts["opened"] + counts["closed"]
