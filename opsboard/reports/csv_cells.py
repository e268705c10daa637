"""CSV cells as every export writes them: a cell that a spreadsheet would read as a formula is
prefixed with a quote (OWASP CSV injection).
"""
from __future__ import annotations


#: A spreadsheet reads a cell starting with one of these as a formula (or strips the control character and
#: then does): OWASP "CSV injection".
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """``value`` as a CSV cell a spreadsheet shows as text: a string starting like a formula gets a ``'``.

    Every CSV export writes its rows through this (header included).  Numbers stay numbers: ``-5`` is
    a value, only a *string* starting with ``-`` is prefixed.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_row(row) -> list:
    return [csv_cell(v) for v in row]
