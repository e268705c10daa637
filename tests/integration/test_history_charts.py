"""The queue's history (issue 44): the leader's rollup of job_stats and the depth into job_history,
the charts of 24 hours and 7 days read from it, axes drawn from the data, and one job type's page."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest

from opsboard import db as named, history, metrics
from opsboard.metrics import DURATION_BUCKETS_MS, bucket_index
from tests.conftest import connect
from tests.support import dashboard as seed
from worker.services.depth import DepthSampler
from worker.services.history import History

JSON = {"Accept": "application/json"}


@pytest.fixture
def db(app):
    return app.extensions["test_db_url"]


def _stats(c, minute, type_, *, worker="w1", queue="default", succeeded=0, retried=0, dead=0, hist_ms=None):
    hist = [0] * (len(DURATION_BUCKETS_MS) + 1)
    for ms, n in (hist_ms or {}).items():
        hist[bucket_index(ms)] += n
    c.execute("""INSERT INTO job_stats (minute, worker_id, queue, type, succeeded, retried, dead, duration_hist)
                 VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""", (minute, worker, queue, type_, succeeded, retried, dead, hist))


def _row(c, bucket, type_):
    return c.execute("SELECT * FROM job_history WHERE bucket = %s AND queue = 'default' AND type = %s",
                     (bucket, type_)).fetchone()


def test_the_rollup_sums_workers_and_minutes_takes_late_flushes_and_samples_depth(db):
    with connect(db) as c:
        now = history.bucket_start(seed.db_now(c)) + timedelta(minutes=7)
        current, previous = history.bucket_start(now), history.bucket_start(now) - timedelta(minutes=15)
        _stats(c, previous + timedelta(minutes=3), "diag.noop", worker="w1", succeeded=10, retried=2,
               hist_ms={15: 12})
        _stats(c, previous + timedelta(minutes=3), "diag.noop", worker="w2", succeeded=5, dead=1, hist_ms={40: 6})
        _stats(c, current + timedelta(minutes=1), "diag.noop", worker="w1", succeeded=7, hist_ms={15: 7})
        t = seed.tenant(c)
        seed.jobs(c, t, 4, "diag.noop", queue="default")
        DepthSampler().run_once(c)

        assert History().run_once(c, now=now) == 2
        old = _row(c, previous, "diag.noop")
        assert (old["succeeded"], old["retried"], old["dead"]) == (15, 2, 1)
        hist = old["duration_hist"]
        assert hist[bucket_index(15)] == 12 and hist[bucket_index(40)] == 6 and sum(hist) == 18
        new = _row(c, current, "diag.noop")
        assert new["succeeded"] == 7 and new["waiting"] == 4 and new["dead_jobs"] == 0
        assert c.execute("SELECT waiting FROM job_depth_minutes WHERE minute = %s AND type = 'diag.noop'",
                         (now.replace(second=0, microsecond=0),)).fetchone()["waiting"] == 4

        # Again: nothing counted twice.  A worker's late flush into the previous bucket is taken in.
        History().run_once(c, now=now)
        assert _row(c, previous, "diag.noop")["succeeded"] == 15
        _stats(c, previous + timedelta(minutes=14), "diag.noop", worker="w3", succeeded=1, hist_ms={15: 1})
        History().run_once(c, now=now + timedelta(seconds=30))
        assert _row(c, previous, "diag.noop")["succeeded"] == 16
        assert _row(c, current, "diag.noop")["waiting"] == 4  # the peak of the bucket's samples

        # What the 7-day chart shows comes from these rows: the jobs table is not read.
        queues, types = metrics.throughput_charts(c, "7d", now=now)
        week = types[("default", "diag.noop")]
        assert len(week.buckets) == 168 and week.buckets[1] - week.buckets[0] == timedelta(hours=1)
        assert round(sum(week.processed) * 60) == 16 + 2 + 1 + 7
        assert max(v for v in week.waiting if v is not None) == 4
        plan = "\n".join(r["QUERY PLAN"] for r in c.execute(
            "EXPLAIN " + named.queries["metrics_history_window"],
            {"bucket_minutes": 60, "origin": history.ORIGIN, "since": now - timedelta(days=7),
             "queue": None, "type": None}).fetchall())
        assert "job_history" in plan and "jobs" not in plan.replace("job_history", "")

        # The retention: a bucket older than it goes at the next run.
        c.execute("INSERT INTO job_history (bucket, queue, type, succeeded) VALUES (%s, 'default', 'old', 1)",
                  (current - timedelta(days=history.KEEP_DAYS + 1),))
        History().run_once(c, now=now)
        assert c.execute("SELECT count(*) AS n FROM job_history WHERE type = 'old'").fetchone()["n"] == 0


def test_the_backfill_builds_a_week_and_the_24h_chart_reads_it(db):
    with connect(db) as c:
        now = seed.db_now(c).replace(second=0, microsecond=0)
        _stats(c, now - timedelta(days=5), "sms.send", succeeded=30, hist_ms={400: 30})
        _stats(c, now - timedelta(hours=20), "sms.send", succeeded=60, dead=15, hist_ms={400: 75})
        assert history.roll_up(c, now, since_days=7) == 2
        day, types = metrics.throughput_charts(c, "24h", now=now)
        assert sum(day["default"].processed) * 15 == 75 and sum(day["default"].failed) * 15 == 15
        week, _ = metrics.throughput_charts(c, "7d", now=now)
        assert sum(week["default"].processed) * 60 == 105
        # p95 inside the 200-500 ms bucket, not its bound: 200 + 300 x 0.95
        assert [v for v in week["default"].p95 if v] == [pytest.approx(485.0)] * 2


def _svgs(html: str) -> dict[str, str]:
    """Each chart's svg by its title."""
    return {m.group(1): m.group(0) for m in re.finditer(r'<svg class="chart-svg"[^>]*aria-label="([^"]*)".*?</svg>',
                                                         html, re.S)}


def _line_top(svg: str) -> float:
    """The smallest y (the highest point) of the svg's lines and dots."""
    ys = [float(y) for pts in re.findall(r'<polyline[^>]*points="([^"]*)"', svg)
          for y in re.findall(r",([0-9.]+)", pts)]
    ys += [float(y) for y in re.findall(r'<circle[^>]*cy="([0-9.]+)"', svg)]
    return min(ys)


def test_chart_axes_come_from_the_data_and_its_largest_value_stays_below_the_top(client, login_as, db):
    with connect(db) as c:
        now = seed.db_now(c).replace(second=0, microsecond=0)
        # Every handler time in the 20-50 ms bucket: p95 interpolates to 48.5 ms, the bucket bound is 50.
        for m in (2, 3, 4):
            _stats(c, now - timedelta(minutes=m), "email.send", succeeded=50, hist_ms={30: 50})
        history.roll_up(c, now, since_days=1)
    login_as("ops")
    for range_name in ("1h", "24h", "7d"):
        html = client.get(f"/queues/?range={range_name}").get_data(as_text=True)
        svg = _svgs(html)["default: p95 handler time"]
        y_max = float(re.search(r'data-y-max="([^"]+)"', svg).group(1))
        peak = float(re.search(r'data-peak="([^"]+)"', svg).group(1))
        assert peak == pytest.approx(48.5)                 # the data, not the bucket bound (50)
        assert peak < y_max <= 2 * peak, (range_name, y_max)   # a readable top just above the data
        assert _line_top(svg) > 10 + 1                   # the plot's top edge is at y = 10
        labels = re.findall(r'data-label="y">([^<]*)<', svg)
        assert labels[-1] == f"{y_max:g} ms"
        assert "default: waiting jobs" in _svgs(html)


def test_line_chart_axis_is_a_nice_number_above_the_peak(app):
    from opsboard.web.charts import line_chart
    from datetime import datetime, timezone
    buckets = [datetime(2026, 12, 1, 10, m, tzinfo=timezone.utc) for m in range(4)]
    with app.test_request_context("/"):
        for values, top in (([10, 50, 20, 5], 60), ([0.2, 0.9, 1.0, 0.4], 1.2), ([100, 100, 100, 100], 120),
                            ([3000, 9000, 400, 0], 10000)):
            svg = str(line_chart(buckets, [("v", values, "p95")], title="t", unit="ms"))
            assert float(re.search(r'data-y-max="([^"]+)"', svg).group(1)) == top, values
            assert _line_top(svg) > 10 + 1


def test_a_job_types_page_has_its_history_over_each_range(client, login_as, db):
    with connect(db) as c:
        now = seed.db_now(c).replace(second=0, microsecond=0)
        _stats(c, now - timedelta(minutes=5), "email.send", succeeded=12, retried=3, hist_ms={80: 15})
        _stats(c, now - timedelta(minutes=5), "sms.send", succeeded=99, hist_ms={80: 99})
        _stats(c, now - timedelta(days=3), "email.send", succeeded=600, hist_ms={80: 600})
        history.roll_up(c, now, since_days=7)
    login_as("ops")
    html = client.get("/queues/?range=7d").get_data(as_text=True)
    assert '/queues/default/types/email.send?range=7d' in html
    week = client.get("/queues/default/types/email.send?range=7d").get_data(as_text=True)
    assert set(_svgs(week)) == {"email.send: attempts per minute", "email.send: p95 handler time",
                                "email.send: waiting jobs"}
    assert 'data-range="7d"' in week and "sms.send" not in week
    assert "processed / min: 10 /min" in week  # 600 attempts in the hour three days ago, 10 a minute
    hour = client.get("/queues/default/types/email.send").get_data(as_text=True)
    assert "processed / min: 15 /min; failed / min: 3 /min" in hour and "processed / min: 10 /min" not in hour
    r = client.get("/queues/default/types/email.send?range=30d", headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "invalid_range"


def test_a_tenants_staff_see_no_platform_history(client, login_as, db):
    with connect(db) as c:
        now = seed.db_now(c).replace(second=0, microsecond=0)
        _stats(c, now - timedelta(minutes=5), "email.send", succeeded=12, hist_ms={80: 12})
        seed.tenant(c, "acme")
    login_as("ops", tenant="acme", operator=False)
    html = client.get("/queues/default/types/email.send?range=7d").get_data(as_text=True)
    assert "chart-svg" not in html and "platform's staff" in html
    # A tenant's own chart stops at 24 hours (it reads the tenant's attempts, not the rollup).
    with connect(db) as c:
        tid = c.execute("SELECT id FROM tenants WHERE slug = 'acme'").fetchone()["id"]
    assert client.get(f"/tenants/{tid}?range=7d", headers=JSON).status_code == 400


def test_the_summed_histogram_cells_are_the_buckets_of_the_histogram():
    """The chart queries sum the histogram one cell at a time: as many cells as the histogram has."""
    cells = len(DURATION_BUCKETS_MS) + 1
    for name in ("metrics_history_window", "metrics_history_roll_up", "metrics_chart_hist"):
        found = sorted({int(n) for n in re.findall(r"duration_hist\[(\d+)\]", named.queries[name])})
        assert found == list(range(1, cells + 1)), name
