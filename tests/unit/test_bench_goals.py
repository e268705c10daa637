"""Bench figures carry their goals (issue 27, issue 24): each result with a goal says whether it met it, in
the printed table and in the JSON; the goal table names figures the scenarios really produce."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from opsboard_bench import harness, scenarios
from opsboard_bench.harness import GOALS, Bench, Goal, Result
from opsboard_bench.peers import Row, peer_goals


@pytest.mark.parametrize("op, target, value, met", [
    ("<", 250, 249.9, True), ("<", 250, 250, False), ("<=", 30, 30, True), ("<=", 30, 30.1, False),
    (">=", 1000, 1000, True), (">=", 1000, 999, False), (">", 1.3, 1.31, True), ("==", 0, 0, True),
    ("==", 0, 1, False),
])
def test_a_goal_is_met_or_not(op, target, value, met):
    assert Goal(op, target).met(value) is met


def test_no_figure_is_neither_met_nor_missed():
    assert Goal("<", 250).met(float("nan")) is None
    assert Goal("<", 250).met(None) is None


def test_a_result_takes_its_goal_from_the_table_and_the_json_carries_it():
    r = Result("streams", "commit -> every stream, p99", 717.0, "ms")
    assert (r.goal, r.met) == ("< 250 ms", False)
    assert r.__dict__["goal"] == "< 250 ms" and r.__dict__["met"] is False  # what --json writes
    ok = Result("api", "4x overload: 5xx other than 503 / errors", 0, "answers")
    assert ok.met is True
    plain = Result("streams", "commit -> every stream, p50", 300.0, "ms")
    assert (plain.goal, plain.met) == ("", None)


def test_add_prints_the_goal_beside_the_figure_and_takes_an_explicit_one(capsys):
    b = Bench("postgresql://unused", config=None, jobs=None)
    b.add("streams", "commit -> every stream, p99", 180.0, "ms")
    b.add("custom", "a figure", 3.0, "s", goal=Goal("<=", 2))
    out = capsys.readouterr().out.splitlines()
    assert "< 250 ms met" in out[0]
    assert "≤ 2 s NOT met" in out[1]
    assert [r.met for r in b.results] == [True, False]
    harness.print_goals(b.results)
    summary = capsys.readouterr().out
    assert "goals: 1 of 2 met" in summary and "NOT met" in summary


def test_every_goal_names_a_figure_a_scenario_adds():
    """A renamed metric would silently lose its goal: each table key must still be spelled by a scenario
    (the harness, where the table is, left out)."""
    package = Path(harness.__file__).parent
    source = "".join(p.read_text() for p in package.glob("*.py") if p.name != "harness.py")
    for scenario, metric in GOALS:
        assert f'"{metric}"' in source, (scenario, metric)


def test_peer_ratios_are_set_beside_issue_24s_goals(capsys):
    rows = [Row("opsboard, default=64", batch=48_000, single=2_400, p1=10_000, p2=14_000),
            Row("pgqueuer 1.6.0 (asyncpg)", batch=31_000, single=2_050, p1=3_400, p2=5_800),
            Row("bare UPDATE ... SKIP LOCKED LIMIT 100 loop", batch=72_000, single=4_900, p1=18_700, p2=32_900)]
    got = {r.metric: r for r in peer_goals(rows)}
    assert math.isclose(got["2 workers / bare loop's 2 workers"].value, round(14_000 / 32_900, 3))
    assert got["2 workers / bare loop's 2 workers"].met is False       # 0.43 < 0.5
    assert got["2 workers / 1 worker"].met is True                     # 1.4 >= 1.3
    assert got["single enqueue / pgqueuer's"].met is False             # 1.17 < 1.2
    assert got["batch enqueue / pgqueuer's"].met is True               # 1.55 >= 1.5
    assert "goal ≥ 1.5×" in capsys.readouterr().out
    # Without pgqueuer (not installed), its ratios have no figure rather than a wrong one.
    without = {r.metric: r for r in peer_goals([rows[0], rows[2]])}
    assert without["batch enqueue / pgqueuer's"].met is None


def test_peer_cpu_per_job_is_set_beside_issue_47s_goals(capsys):
    """Issue 47: machine CPU µs per job beside the bare loop's and the worker's own 1-worker figure, the
    enqueue rates beside the bare loop's, the idle p99 and 2-worker rate beside pgqueuer's."""
    rows = [Row("opsboard, default=64", batch=30_000, single=1_800, p1=14_000, p2=15_000, p99=4.0,
                cpu_us={1: 46.0, 2: 60.0}),
            Row("pgqueuer 1.6.0 (asyncpg)", batch=31_000, single=2_050, p1=3_400, p2=5_800, p99=4.33),
            Row("bare UPDATE ... SKIP LOCKED LIMIT 100 loop", batch=72_000, single=2_000, p1=30_000,
                p2=32_000, p99=2.0, cpu_us={1: 27.0, 2: 28.0})]
    got = {r.metric: r for r in peer_goals(rows)}
    assert math.isclose(got["CPU per job, 1 worker / bare loop's"].value, round(46 / 27, 3))
    assert got["CPU per job, 1 worker / bare loop's"].met is False       # 1.70 > 1.3
    assert got["CPU per job, 2 workers / own 1 worker"].met is False     # 1.30 > 1.1
    assert got["single enqueue / bare loop's"].met is True               # 0.90 >= 0.9
    assert got["batch enqueue / bare loop's"].met is False               # 0.42 < 0.5
    assert got["idle p99 / pgqueuer's"].met is True                      # 0.92 <= 1
    assert got["2 workers / pgqueuer's 2 workers"].met is True           # 2.6 > 1
    # A system whose CPU was not read has no figure rather than a wrong one.
    rows[0].cpu_us = {}
    assert {r.metric: r for r in peer_goals(rows)}["CPU per job, 1 worker / bare loop's"].met is None


def test_the_peers_table_prints_the_machine_cpu_per_job_beside_the_rates(capsys):
    from opsboard_bench.peers import CpuWindow, _process_cpu, cpu_us_per_job, print_table
    import os
    import time
    window = CpuWindow()
    until = time.monotonic() + 0.1
    while time.monotonic() < until:  # this process keeps a CPU busy for a few of /proc/stat's ticks
        pass
    window.stop()
    assert window.seconds is not None and 0.0 < window.seconds
    assert math.isclose(cpu_us_per_job(0.92, 20_000), 46.0)
    assert cpu_us_per_job(None, 20_000) is None
    print_table([Row("opsboard, default=64", p1=20_000, p2=22_000, split=[11_000, 11_000],
                     cpu_us={1: 46.04, 2: 59.96})])
    out = capsys.readouterr().out
    assert "CPU µs/job, 1 worker" in out and "| 20,000 | 46.0 | 22,000 | 60.0 |" in out
    # The system's own CPU (its workers and their backends, /proc/<pid>/stat) beside the machine's.
    assert _process_cpu(os.getpid()) > 0 and _process_cpu(-1) is None
    print_table([Row("opsboard, default=64", p1=20_000, p2=22_000, cpu_us={1: 90.0, 2: 80.0},
                     own_us={1: 41.0, 2: 44.5})])
    assert "| 20,000 | 90.0 (own 41.0) | 22,000 | 80.0 (own 44.5) |" in capsys.readouterr().out
    got = {r.metric: r for r in peer_goals([Row("opsboard, default=64", own_us={1: 40.0, 2: 44.0}),
                                            Row("bare UPDATE ... SKIP LOCKED LIMIT 100 loop", own_us={1: 25.0})])}
    assert math.isclose(got["own CPU per job, 1 worker / bare loop's"].value, 1.6)
    assert got["own CPU per job, 2 workers / own 1 worker"].goal == ""  # a reading, not a goal


def test_the_peers_table_says_how_busy_the_machine_was_while_each_system_processed(capsys):
    from opsboard_bench.peers import _busy_since, _cpu_ticks, print_table
    import time
    start = _cpu_ticks()
    until = time.monotonic() + 0.1
    while time.monotonic() < until:  # this process keeps a CPU busy for a few of /proc/stat's ticks
        pass
    share = _busy_since(start)
    assert share is not None and 0.0 < share <= 1.0
    rows = [Row("opsboard, default=64", p1=20_000, p2=22_000, split=[11_000, 11_000], busy={1: 0.68, 2: 0.83}),
            Row("bare UPDATE ... SKIP LOCKED LIMIT 100 loop", p1=40_000, p2=60_000, busy={1: 0.43, 2: 0.75})]
    print_table(rows)
    out = capsys.readouterr().out
    assert "opsboard, default=64: 1 worker 68 %, 2 workers 83 %" in out
    assert "bare UPDATE ... SKIP LOCKED LIMIT 100 loop: 1 worker 43 %, 2 workers 75 %" in out
    # The ceiling of 2 workers / 1 worker: one worker kept 68 % of the machine busy, so at its CPU per
    # job two reach at most 1 / 0.68 = 1.47x; printed for opsboard only (the peers have no such goal).
    assert "opsboard, default=64: 2 workers / 1 worker at most 1.47x" in out
    assert "bare UPDATE ... SKIP LOCKED LIMIT 100 loop: 2 workers / 1 worker at most" not in out


def test_a_cpu_ceiling_is_what_every_core_carries_at_the_measured_cost():
    from opsboard_bench.harness import cpu_ceiling
    from opsboard_bench.peers import two_worker_ceiling
    # 5,800 events cost 19.7 s of machine CPU (3.4 ms each): 2 cores carry 588 a second, whatever waits.
    assert math.isclose(cpu_ceiling(2, 19.72, 5_800), 2 * 5_800 / 19.72)
    assert round(cpu_ceiling(2, 19.72, 5_800)) == 588
    # Nothing measured (no events, no CPU read): no ceiling rather than an infinite or zero one.
    assert math.isnan(cpu_ceiling(2, 0.0, 5_800)) and math.isnan(cpu_ceiling(2, 19.72, 0))
    assert math.isclose(two_worker_ceiling(0.79), 1 / 0.79) and two_worker_ceiling(0.79) < 1.3
    assert math.isnan(two_worker_ceiling(0.0))


def test_notify_scale_runs_the_notification_tier_and_is_not_run_twice_by_default():
    assert "notify_scale" in scenarios.REGISTRY.scenarios and "notify_scale" in scenarios.REGISTRY.groups
    ran = []
    b = Bench("postgresql://unused", config=None, jobs=None)
    saved = {name: getattr(scenarios, name) for name in ("streams", "broadcast", "api", "webhooks")}
    try:
        for name in saved:
            setattr(scenarios, name, lambda b, name=name: ran.append((name, b.streams)))
        scenarios.notify_scale(b)
    finally:
        for name, fn in saved.items():
            setattr(scenarios, name, fn)
    assert ran == [("streams", 10_000), ("broadcast", 10_000), ("api", 10_000), ("webhooks", 10_000)]
    assert b.streams is None  # --streams given or not, the Bench is left as it was


def test_a_scenario_whose_program_is_missing_is_refused_before_anything_starts(monkeypatch):
    """No traceback and no scratch database for a missing wrk: one line, exit status 2 (the CLI's UsageError)."""
    from opsboard.errors import UsageError
    monkeypatch.setattr(harness.shutil, "which", lambda name: None)
    with pytest.raises(UsageError, match=r"api_worker scenario needs wrk \(apt-get install wrk\)"):
        harness.run_bench(None, scenarios.REGISTRY, scenarios=["api_worker"])


def test_the_otp_producers_samples_are_told_apart_by_what_its_backend_waited_on():
    from opsboard_bench.broadcast import WAIT_KINDS, wait_kind, wait_profile

    assert wait_kind("idle", "Client", "ClientRead") is None  # between transactions: not counted
    assert wait_kind("active", "IO", "WALSync") == "WAL"
    assert wait_kind("active", "LWLock", "WALWrite") == "WAL"
    assert wait_kind("active", "IO", "WALInitWrite") == "WAL"
    assert wait_kind("active", None, None) == "CPU"
    assert wait_kind("idle in transaction", "Client", "ClientRead") == "client"
    assert wait_kind("active", "Lock", "object") == "locks"
    assert wait_kind("active", "LWLock", "BufferContent") == "locks"
    assert wait_kind("active", "IO", "DataFileRead") == "other I/O"
    samples = ([("active", "IO", "WALSync")] * 6 + [("active", None, None)] * 2
               + [("idle in transaction", "Client", "ClientRead")] + [("active", "Lock", "object")]
               + [("idle", "Client", "ClientRead")] * 30)
    profile = wait_profile(samples)
    assert set(profile) == set(WAIT_KINDS)
    assert profile["WAL"] == 60.0 and profile["CPU"] == 20.0 and profile["client"] == 10.0
    assert profile["locks"] == 10.0 and math.isclose(sum(profile.values()), 100.0)
    assert wait_profile([("idle", "Client", "ClientRead")]) == {}
