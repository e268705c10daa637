"""Issue 46's chaos run, small: 5,000 events (x ``chaos_scale``; ``opsboard bench --scenario
event_export`` runs 100,000) published while ``python -m worker`` exports them to a ``nats-server -js``
of the test's own; the worker is SIGKILLed once (a new one takes over) and NATS restarted once.
Every event id must arrive, and a re-send may only be one that JetStream's duplicate window dropped:
none is stored twice."""
from __future__ import annotations

import pytest

from opsboard import auth
from opsboard_bench.event_export import chaos_run
from tests.conftest import connect
from tests.support.natsbox import NATS_SERVER


@pytest.mark.chaos
def test_every_event_arrives_once_through_a_killed_exporter_and_a_restarted_nats(db_url, tmp_path, chaos_scale):
    import os
    if not os.path.exists(NATS_SERVER):
        pytest.fail(f"{NATS_SERVER} is missing: install Debian's nats-server package (.ci/run does)")
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "chaos-export")["id"]
    n = int(5_000 * chaos_scale)
    result = chaos_run(db_url, tenant, n, tmp_path, timeout=600)
    logs = "\n".join(open(p).read()[-2000:] for p in result["worker_logs"])
    assert result["killed"] and result["restarted"], result
    assert result["events"] == n, result
    assert result["missing"] == 0, (result, logs)
    assert result["stored_twice"] == 0, (result, logs)
    assert result["in_stream"] == n, result
    assert "Traceback" not in logs, logs
