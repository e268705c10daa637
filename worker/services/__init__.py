"""Maintenance services, run only by the elected leader.

Each service module has the same shape: a config dataclass with defaults, a
class with ``name``, ``interval`` and ``run_once(conn, now=None) -> int`` (rows
handled), which tests call directly instead of waiting on timers.
"""
from __future__ import annotations

from opsboard.config import Config


def default_services(config: Config) -> list:
    """The leader's maintenance services, configured from ``config``."""
    from .alerts import Alerts
    from .depth import DepthSampler
    from .expiry import Expiry
    from .pruner import Pruner, PrunerConfig
    from .reaper import Reaper

    return [Reaper(), Expiry(), DepthSampler(), Pruner(PrunerConfig(retention_days=config.retention_days)),
            Alerts()]
