"""The effect ledger: an external effect is recorded as started before its provider is called and
confirmed with the job's success, so a retry reconciles instead of sending twice.
"""
from __future__ import annotations

import psycopg

from .. import db
from ..errors import OpsError


def begin_effect(conn: psycopg.Connection, key: str, job: dict, provider: str, *, relaxed: bool = False) -> dict:
    """Record an external effect as started, or return the existing record.

    The returned row has ``created`` true for a new record.  A row that exists
    and is ``started`` means an earlier attempt (or the dead job this one
    replays) may have reached the provider: reconcile before sending again; the
    row now belongs to this job, so this job's success confirms it.
    ``confirmed`` means it happened: do not send again.  Confirmation happens
    in :func:`record_outcomes`, in the transaction that marks the job succeeded.

    ``relaxed`` (the job type's ``relaxed_effects``: its started effects are
    reconciled by sending again with the same id, as webhooks are) writes the
    ``started`` row without waiting for the WAL flush (``synchronous_commit =
    off`` for that one transaction): losing it in a server crash changes
    nothing, the retry sends again either way.  ``confirmed`` is still written
    durably with the job's success.
    """
    params = {"key": key, "job_id": job["id"], "tenant_id": job["tenant_id"], "provider": provider}
    if relaxed and conn.autocommit and conn.info.transaction_status == 0:
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            row = db.one(conn, "effect_begin", params)
    else:
        row = db.one(conn, "effect_begin", params)
    if row is None:
        raise OpsError("this effect key belongs to another tenant", "effect_key_conflict")
    return row


def set_effect_ref(conn: psycopg.Connection, key: str, job: dict, ref: str) -> dict | None:
    """Remember the provider's reference (message id...) of a started effect, for reconciliation."""
    return db.one(conn, "effect_set_ref", {"key": key, "job_id": job["id"], "tenant_id": job["tenant_id"],
                                           "ref": ref})
