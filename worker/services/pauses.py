"""The pauses service: holds whose ``resume_at`` has passed are deleted and audited as
automatic resumes (see :mod:`opsboard.pauses`).  The claim already ignores them; this
records the release and wakes the fleet (the table's trigger notifies)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from opsboard import pauses
from opsboard.config import Config


@dataclass(frozen=True)
class PausesConfig:
    interval: float = 1.0

    @classmethod
    def from_config(cls, config: Config) -> "PausesConfig":
        """The service's settings from ``config`` (none of them is configurable yet: the defaults)."""
        return cls()


class Pauses:
    name = "pauses"

    def __init__(self, config: PausesConfig = PausesConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        return pauses.resume_expired(conn, now)
