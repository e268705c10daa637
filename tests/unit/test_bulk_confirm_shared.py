"""Bulk replay and bulk cancel confirm through one macro (templates/jobs/_bulk_confirm.html):
the filter, the cap, the reason and the form are written once (issue 28)."""
from pathlib import Path

JOBS = Path(__file__).resolve().parents[2] / "templates" / "jobs"


def test_both_bulk_confirmations_use_the_one_macro_and_hold_no_form_of_their_own():
    for name in ("_replay_many_confirm.html", "_cancel_many_confirm.html"):
        text = (JOBS / name).read_text()
        assert 'import bulk_confirm with context' in text and "bulk_confirm(" in text, name
        assert "<form" not in text and "csrf_token" not in text and "Matching:" not in text, name
    shared = (JOBS / "_bulk_confirm.html").read_text()
    assert shared.count("<form") == 1 and "{% macro bulk_confirm(" in shared
