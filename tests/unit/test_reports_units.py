"""Pure parts of reports and storage: slice packing, parameter checks, storage keys."""
from __future__ import annotations

import pytest

from opsboard import reports
from opsboard.storage import LocalStorage, StorageError, check_key


def test_pack_keeps_each_slice_under_the_limit_and_in_order():
    counts = [({"k": i}, n) for i, n in enumerate([40, 30, 50, 10, 250, 5, 5])]
    slices = list(reports.pack(iter(counts), 100))
    assert [(s.lower, s.upper, s.est_rows) for s in slices] == [
        ({"k": 0}, {"k": 2}, 70), ({"k": 2}, {"k": 4}, 60), ({"k": 4}, {"k": 5}, 250), ({"k": 5}, None, 10)]
    # Contiguous: every upper bound is the next lower bound; the last is open.
    assert all(a.upper == b.lower for a, b in zip(slices, slices[1:]))
    assert list(reports.pack(iter([]), 100)) == []


def test_activity_parameters_are_normalized():
    kind = reports.get_kind("job_activity")
    assert kind.validate({"date_from": " 2026-01-01", "date_to": "2026-01-31"}) == {
        "date_from": "2026-01-01", "date_to": "2026-01-31", "time_zone": "UTC"}
    with pytest.raises(reports.ReportError) as e:
        kind.validate({"date_from": "2000-01-01", "date_to": "2026-01-31"})
    assert e.value.code == "invalid_date"
    with pytest.raises(reports.ReportError) as e:
        kind.validate({"date_from": "2026-01-01", "date_to": "2026-01-31", "time_zone": "../../etc/passwd"})
    assert e.value.code == "invalid_time_zone"
    with pytest.raises(reports.ReportError) as e:
        reports.get_kind("no_such_kind")
    assert e.value.code == "unknown_report_kind"


@pytest.mark.parametrize("key", ["../x", "a/../b", "/abs", "a//b", "a/.tmp", "", "a\\b", "a/b/", "x" * 600])
def test_bad_storage_keys_are_refused(key):
    with pytest.raises(StorageError):
        check_key(key)


def test_local_storage_writes_atomically(tmp_path):
    store = LocalStorage(tmp_path)
    with store.open_write("reports/t/r/a.csv") as f:
        f.write("گزارش".encode())
    with pytest.raises(RuntimeError):
        with store.open_write("reports/t/r/b.csv") as f:
            f.write(b"half")
            raise RuntimeError("killed mid-write")
    assert store.list("reports/t/r") == ["reports/t/r/a.csv"]
    assert store.size("reports/t/r/b.csv") is None
    with store.open_read("reports/t/r/a.csv") as f:
        assert f.read().decode() == "گزارش"
    with pytest.raises(StorageError) as e:
        store.open_read("reports/t/r/b.csv")
    assert e.value.code == "not_found"
    assert store.delete_prefix("reports/t") == 1 and store.list("reports/t") == []
