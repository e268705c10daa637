"""Queue health: depth, age, throughput, retry rate, handler times; Prometheus exposition."""
from __future__ import annotations

import bisect

#: Upper bounds (ms) of the handler-time histogram buckets in job_stats.duration_hist;
#: the last bucket (index len(DURATION_BUCKETS_MS)) counts everything slower.
DURATION_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)


def bucket_index(duration_ms: int) -> int:
    """The histogram bucket of a handler time."""
    return bisect.bisect_left(DURATION_BUCKETS_MS, duration_ms)


def hist_quantile(hist: list[int], q: float) -> float | None:
    """Estimate the ``q`` quantile (0..1) in ms from bucket counts (upper bound of its bucket)."""
    total = sum(hist)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(hist):
        seen += count
        if seen >= rank and count:
            return float(DURATION_BUCKETS_MS[i]) if i < len(DURATION_BUCKETS_MS) else float("inf")
    return float("inf")
