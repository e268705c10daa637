"""The worker's own entry: ``python -m worker`` runs one worker process until
SIGTERM, and ``opsboard worker`` delegates here (the worker never imports the CLI).

Wrong arguments or a bad configuration exit with status 2 and one line.
"""
from __future__ import annotations

import argparse
import sys

from opsboard.config import Config, ConfigError, parse_queue_slots
from opsboard.errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The worker's options, shared by ``python -m worker`` and ``opsboard worker``."""
    p.add_argument("--queues", help="slots per queue, e.g. critical=2,default=8,bulk=2")
    p.add_argument("--id", help="worker id (default host:pid:random)")
    p.add_argument("--no-services", action="store_true", help="never run the leader-only maintenance services")
    p.add_argument("--exit-without-database", action="store_true",
                   help="exit at once when the database is unreachable at start (default: wait for it)")
    p.add_argument("--processes", type=int, default=0,
                   help="supervise N worker processes, restarting any that dies (default: one, unsupervised)")
    # Set by the supervisor for its children (worker.running_file), not by people.
    p.add_argument("--running-file", help=argparse.SUPPRESS)


def run(config: Config, args: argparse.Namespace) -> int:
    """Run a worker with ``config`` and the options of :func:`add_arguments` until SIGTERM."""
    from opsboard.db import resolve_direct_url, resolve_url
    from opsboard.features import build_catalogue

    from .runner import Worker

    catalogue = build_catalogue(config)  # a handler that points nowhere: one line, status 2
    from opsboard import tenancy
    # The claim, the outcomes and the maintenance services act on every tenant's jobs set-wise;
    # each job's handler runs in its own tenant's scope (worker.executor).
    tenancy.process_bypass(tenancy.Bypass.CLAIM)

    try:
        queues = parse_queue_slots(args.queues) if args.queues else None
    except ConfigError as exc:
        raise ConfigError(f"--queues {args.queues!r}: {exc}") from None
    from opsboard import tracing
    # Spans over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (a malformed one: ConfigError); else nothing.
    tracing.setup("worker")
    if args.processes:
        if not 1 <= args.processes <= 64:
            raise UsageError("--processes must be between 1 and 64")
        from .supervisor import supervise
        child = (["--queues", args.queues] if args.queues else []) + (["--no-services"] if args.no_services else [])
        # The supervisor's own queries (settling a dead child's jobs) are few and session-free; it
        # uses the direct connection so that it needs nothing of the pooler's settings.
        return supervise(config, resolve_direct_url(config), args.processes, child, base_id=args.id)
    w = Worker(config, resolve_url(config), queues=queues, worker_id=args.id, run_services=not args.no_services,
               running_file=args.running_file, catalogue=catalogue, direct_url=resolve_direct_url(config))
    w.wait_for_database = not args.exit_without_database
    w.install_signals()
    return w.run()  # the SDK flushes the spans still batched at exit (test_tracing: sent only then)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m worker`` (the docs check parses documented commands with it)."""
    parser = _Parser(prog="python -m worker", description="Run an opsboard worker process until SIGTERM.")
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = Config.from_env()
        from opsboard.logs import configure
        configure(config.log_format)
        return run(config, args) or 0
    except (ConfigError, UsageError) as exc:
        print(f"opsboard: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        import psycopg

        from opsboard.db import DatabaseUnavailable
        if isinstance(exc, DatabaseUnavailable):
            print(f"opsboard: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, psycopg.errors.UndefinedTable):
            first = (str(exc).strip().splitlines() or ["a table is missing"])[0]
            print(f"opsboard: the database is not migrated ({first}); run `opsboard migrate` first",
                  file=sys.stderr)
            return 2
        raise
