from opsboard.metrics import DURATION_BUCKETS_MS, add_hists, bucket_index, hist_quantile
from opsboard.web.charts import sparkline


def test_bucket_index_edges():
    assert bucket_index(0) == 0
    assert bucket_index(1) == 0
    assert bucket_index(2) == 1
    assert bucket_index(60000) == len(DURATION_BUCKETS_MS) - 1
    assert bucket_index(60001) == len(DURATION_BUCKETS_MS)


def test_hist_quantile():
    hist = [0] * (len(DURATION_BUCKETS_MS) + 1)
    hist[bucket_index(3)] = 90     # 90 handlers at <= 5 ms
    hist[bucket_index(150)] = 10   # 10 at <= 200 ms
    assert hist_quantile(hist, 0.5) == 5.0
    assert hist_quantile(hist, 0.95) == 200.0
    assert hist_quantile([0] * 16, 0.5) is None
    slow = [0] * 16
    slow[-1] = 1
    assert hist_quantile(slow, 0.5) == float("inf")


def test_add_hists():
    assert add_hists(None, [1, 2]) == [1, 2]
    assert add_hists([1, 2, 3], [1]) == [2, 2, 3]


def test_sparkline_scales_and_escapes():
    svg = str(sparkline([0, 5, 10], width=100, height=20, title='<b>"x"</b>'))
    assert svg.startswith("<svg") and "polyline" in svg
    assert "0.0,19.0" in svg and "100.0,1.0" in svg   # zero at the bottom, max at the top
    assert "<b>" not in svg
    assert "polyline" in str(sparkline([]))
