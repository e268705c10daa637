"""Maintenance services, run only by the elected leader.

Each service module has the same shape: a config dataclass with defaults, a
class with ``name``, ``interval`` and ``run_once(conn, now=None) -> int`` (rows
handled), which tests call directly instead of waiting on timers.
"""
from __future__ import annotations

from opsboard.config import Config


def default_services(config: Config, catalogue=None) -> list:
    """The leader's maintenance services, configured from ``config``: the runtime's own, then those
    the features contribute through ``catalogue.services`` (the alert rules).

    Every service's settings come from its config dataclass's ``from_config``:
    a setting the configuration holds is read from it there, never repeated
    as a literal (a new service follows the same shape).
    """
    from .depth import DepthConfig, DepthSampler
    from .expiry import Expiry, ExpiryConfig
    from .history import History, HistoryConfig
    from .outbox_pruner import OutboxPruner, OutboxPrunerConfig
    from .pauses import Pauses, PausesConfig
    from .pruner import Pruner, PrunerConfig
    from .reaper import Reaper, ReaperConfig
    from .scheduler import Scheduler, SchedulerConfig

    return [Reaper(ReaperConfig.from_config(config)), Expiry(ExpiryConfig.from_config(config)),
            DepthSampler(DepthConfig.from_config(config)), History(HistoryConfig.from_config(config)),
            Pruner(PrunerConfig.from_config(config)),
            Scheduler(SchedulerConfig.from_config(config)),
            OutboxPruner(OutboxPrunerConfig.from_config(config)), Pauses(PausesConfig.from_config(config))] + [
        make(config) for make in (catalogue.services.values() if catalogue is not None else ())]
