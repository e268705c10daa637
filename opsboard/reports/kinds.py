"""Report kinds in the catalogue: what a kind declares (parameters, plan, rows), and the keyset slicing
every kind's plan uses (:func:`pack`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from .. import catalogue as _catalogue
from ..errors import OpsError


class ReportError(OpsError):
    """A request the reports refuse (unknown kind, bad parameter, not found); ``code`` is stable.
    An :class:`~opsboard.errors.OpsError` (status from the code, message template and ``params``)."""

    def __init__(self, message: str, code: str = "invalid_report", *, params: dict | None = None):
        super().__init__(message, code, params=params)


@dataclass(frozen=True)
class Param:
    """One parameter of a kind, for the request form and validation."""

    name: str
    label: str
    type: str = "text"          # "date", "text", "time_zone"
    required: bool = True
    default: str | None = None


@dataclass(frozen=True)
class Slice:
    lower: dict
    upper: dict | None
    est_rows: int


@dataclass(frozen=True)
class ReportKind:
    name: str
    title: str
    columns: tuple[str, ...]
    params: tuple[Param, ...]
    #: ``validate(params) -> params``: normalized, or raise ReportError.
    validate: Callable[[dict], dict]
    #: ``plan(conn, tenant_id, params, max_rows) -> Iterable[Slice]`` in key order.
    plan: Callable[..., Iterable[Slice]]
    #: ``rows(conn, tenant_id, params, lower, upper) -> Iterator[tuple]`` in key order, streamed.
    rows: Callable[..., Iterator[tuple]]
    #: ``filename(params) -> str`` for the download.
    filename: Callable[[dict], str] = field(default=lambda p: "report.csv")
    description: str = ""


def define_kind(cat: _catalogue.Catalogue, kind: ReportKind) -> ReportKind:
    """Register a report kind in ``cat`` (one declaration per kind)."""
    cat.report_kinds[kind.name] = kind
    cat.changed()
    return kind


def get_kind(name: str) -> ReportKind:
    """The active catalogue's report kind, or :class:`ReportError` (``unknown_report_kind``)."""
    kinds = _catalogue.active().report_kinds
    try:
        return kinds[name]
    except (KeyError, TypeError):
        raise ReportError("unknown report kind %(kind)s (known: %(names)s)", "unknown_report_kind",
                          params={"kind": repr(name), "names": ", ".join(sorted(kinds))}) from None


def all_kinds() -> list[ReportKind]:
    """The active catalogue's report kinds, by name."""
    return sorted(_catalogue.active().report_kinds.values(), key=lambda k: k.name)


def pack(keyed_counts: Iterable[tuple[dict, int]], max_rows: int) -> Iterator[Slice]:
    """Cut ``(key, source rows)`` pairs, in key order, into slices of at most ``max_rows``
    source rows (a single key with more rows is a slice of its own).

    Streams: holds one slice's bounds at a time, never the keys.
    """
    lower, acc = None, 0
    for key, n in keyed_counts:
        if lower is None:
            lower, acc = key, n
        elif acc + n > max_rows:
            yield Slice(lower, key, acc)
            lower, acc = key, n
        else:
            acc += n
    if lower is not None:
        yield Slice(lower, None, acc)
