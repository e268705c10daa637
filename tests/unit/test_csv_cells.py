"""CSV exports neutralize formula-looking cells (OWASP CSV injection, issue 25)."""
from __future__ import annotations

import csv
import io

from hypothesis import given
from hypothesis import strategies as st

from opsboard import reports

_DANGEROUS = ("=", "+", "-", "@", "\t", "\r")


@given(first=st.sampled_from(_DANGEROUS), rest=st.text())
def test_a_cell_starting_like_a_formula_is_prefixed(first, rest):
    cell = reports.csv_cell(first + rest)
    assert cell == "'" + first + rest


@given(text=st.text().filter(lambda t: not t.startswith(_DANGEROUS)))
def test_any_other_text_is_unchanged(text):
    assert reports.csv_cell(text) == text


@given(value=st.one_of(st.integers(), st.floats(allow_nan=False), st.none(), st.booleans()))
def test_non_text_values_are_unchanged(value):
    assert reports.csv_cell(value) == value   # -5 is a number, not a formula


@given(row=st.lists(st.one_of(st.text(), st.integers()), max_size=6))
def test_no_written_cell_reads_as_a_formula(row):
    out = io.StringIO()
    csv.writer(out).writerow(reports.csv_row(row))
    (back,) = csv.reader(io.StringIO(out.getvalue(), newline=""))
    for original, written in zip(row, back):
        if isinstance(original, str):
            assert not written.startswith(_DANGEROUS)
            if original.startswith(_DANGEROUS):
                assert written == "'" + original


def test_every_export_writes_through_csv_row():
    """Each csv.writer(...).writerow in opsboard/ passes its row through csv_row."""
    import pathlib
    import re

    root = pathlib.Path(reports.__file__).parent
    calls = [(p.name, m.group(0)) for p in root.rglob("*.py")
             for m in re.finditer(r"writerows?\((?!csv_row\()[^)]*\)", p.read_text())]
    assert not calls, calls
