"""Maintenance services, run only by the elected leader.

Each service module has the same shape: a config dataclass with defaults, a
class with ``name``, ``interval`` and ``run_once(conn, now=None) -> int`` (rows
handled), which tests call directly instead of waiting on timers.
"""
from __future__ import annotations

import logging

import psycopg

from opsboard.config import Config
from opsboard.schema import LEADER_LOCK_KEY

log = logging.getLogger("worker.leader")


class LeaderLock:
    """Leadership through a session advisory lock on a dedicated connection.

    The lock lives as long as the connection: a leader that dies (or loses its
    connection) frees it, and another worker takes over on its next try.
    """

    def __init__(self, url: str, key: int = LEADER_LOCK_KEY):
        self.url, self.key, self.conn = url, key, None
        self.held = False

    def try_hold(self) -> bool:
        try:
            if self.conn is None or self.conn.closed:
                self.held = False
                self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
            if self.held:
                self.conn.execute("SELECT 1")  # still connected, so still held
                return True
            self.held = bool(self.conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0])
            if self.held:
                log.info("this worker is now the leader")
            return self.held
        except psycopg.Error:
            self.held = False
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return False

    def release(self) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.close()
        self.conn, self.held = None, False


def default_services(config: Config) -> list:
    """The leader's maintenance services, configured from ``config``.

    Every service's settings come from its config dataclass's ``from_config``:
    a setting the configuration holds is read from it there, never repeated
    as a literal (a new service follows the same shape).
    """
    from opsboard.alerts import AlertConfig

    from .alerts import Alerts
    from .depth import DepthConfig, DepthSampler
    from .expiry import Expiry, ExpiryConfig
    from .outbox_pruner import OutboxPruner, OutboxPrunerConfig
    from .pruner import Pruner, PrunerConfig
    from .reaper import Reaper, ReaperConfig
    from .scheduler import Scheduler

    return [Reaper(ReaperConfig.from_config(config)), Expiry(ExpiryConfig.from_config(config)),
            DepthSampler(DepthConfig.from_config(config)), Pruner(PrunerConfig.from_config(config)),
            Alerts(AlertConfig.from_config(config)), Scheduler(),
            OutboxPruner(OutboxPrunerConfig.from_config(config))]
