"""What ``opsboard bench`` runs (imported by :func:`opsboard.cli.cmd_bench` when that command runs)."""
from __future__ import annotations

from opsboard.config import Config


def run(config: Config, *, scenarios: list[str] | None = None, jobs: int | None = None,
        json_path: str | None = None, list_only: bool = False, database: str | None = None,
        streams: int | None = None, peers: bool = False,
        pin_seconds: int | None = None) -> int:
    """``--peers``: opsboard beside pgqueuer and a bare loop (:func:`opsboard_bench.peers.run_peers`);
    else the ``scenarios`` of :data:`opsboard_bench.scenarios.REGISTRY` (all but its groups when none)."""
    if peers:
        from .peers import run_peers
        return run_peers(config, jobs=jobs, json_path=json_path)
    from .harness import run_bench
    from .scenarios import REGISTRY
    return run_bench(config, REGISTRY, scenarios=scenarios, jobs=jobs, json_path=json_path,
                     list_only=list_only, database=database, streams=streams,
                     pin_seconds=pin_seconds)
