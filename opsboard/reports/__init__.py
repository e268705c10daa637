"""Reports: kinds, keyset slicing, chunked generation and assembly into a CSV.

A report can read millions of rows; done in one piece it would run for
minutes, hit a lease or fill memory.  So a run is split:

1. :func:`request_report` writes a ``report_runs`` row (``queued``) and enqueues
   ``reports.request``, in the caller's transaction, with an audit row.
2. ``reports.request`` calls :func:`plan_run`: the kind walks its range in key
   order and cuts it into slices of at most ``report_chunk_rows`` source rows,
   bounded by keys (``lower <= key < upper``, keyset, never OFFSET), and the run
   becomes a workflow (:mod:`opsboard.jobqueue.workflows`), inserted in one
   transaction with the run's ``workflow_id``: a ``reports.chunk`` task per slice
   (``chunk-<seq>``, the bounds in its payload, queue ``bulk``) and the
   ``reports.assemble`` task (``assemble``) depending on every chunk.
3. ``reports.chunk`` calls :func:`run_chunk`: streams its slice's rows from the
   database into a partial CSV in storage and returns ``{"rows", "part_key"}``,
   the task's recorded result.  The transaction that records the last chunk's
   success releases the assembly (the workflow's fan-in: exactly once, whatever
   order and however many workers).
4. ``reports.assemble`` calls :func:`assemble_run` with its dependencies' results:
   writes the final CSV (UTF-8 with a BOM so spreadsheet apps read Persian text
   right, the header, then the parts in order, streamed) under one key,
   atomically, and marks the run ``ready``.

Progress is the workflow's: chunk tasks done of the planned total; the run's
workflow is on the workflow pages.  Every step is idempotent, so a retry (or a
worker killed with SIGKILL) ends in the same single file.  A job of a run that
goes dead (or is cancelled) fails the run (a trigger, see
``migrations/0090_reports_on_workflows.sql``); replaying a dead chunk resumes
the workflow and the run.

A kind is one :func:`define_kind` call: its columns, parameters, how to plan
slices and how to read one slice.  ``job_activity`` is implemented; the
ticket SLA kind waits for the tickets tables.

One module per concern: :mod:`.kinds`, :mod:`.runs`, :mod:`.activity` (the job activity kind),
:mod:`.csv_cells`, :mod:`.registration` (``register(catalogue)``).
"""
from __future__ import annotations

from .kinds import all_kinds, define_kind, get_kind, pack, Param, ReportError, ReportKind, Slice  # noqa: F401
from .csv_cells import csv_cell, csv_row  # noqa: F401
from .runs import assemble_run, BOM, chunks, DEFAULT_CHUNK_ROWS, download_name, FETCH_ROWS, get_run, list_runs, plan_run, progress, request_report, run_chunk, run_prefix, start_scheduled  # noqa: F401
from .activity import _zone, MAX_DAYS  # noqa: F401
from .registration import register  # noqa: F401
