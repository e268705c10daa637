"""The durable job queue, one module per concern:

* :mod:`.enqueue` -- :func:`enqueue` / :func:`enqueue_many` on the producer's own connection,
  inside its own transaction: the job exists exactly when the domain change commits;
* :mod:`.reads` -- a job, its attempts, :func:`cancel` and the bulk :func:`cancel_many`;
* :mod:`.claim` -- the worker's tenant-fair batch claim (:func:`claim_batch`);
* :mod:`.outcomes` -- the worker's batched outcomes (:func:`record_outcomes`) and heartbeats;
* :mod:`.effects` -- the effect ledger (at most one external effect where it matters);
* :mod:`.replay` -- audited replay of dead jobs, one (:func:`replay`) or a group (:func:`replay_many`);
* :mod:`.prune` -- retention: :func:`prune_finished` deletes old succeeded and cancelled jobs
  (:func:`prune_finished_slice`: a bounded slice of that walk, resumed by the next;
  :func:`walk_in_index_order` keeps each batch of it, and of the expiry, on its index's order,
  with or without statistics).

Callers use the package: ``from opsboard import jobqueue``, ``jobqueue.enqueue(...)`` (it was
``opsboard.queue``, which shadowed the standard library's ``queue``).
"""
from __future__ import annotations

from .enqueue import ALL_TENANTS, enqueue, enqueue_many, NewJob, prepare_row, QueueError, row_json, tenant_id_of  # noqa: F401
from .reads import attempts, BulkCancel, cancel, cancel_many, CancelFilter, count_cancellable, get_by_keys, get_job, summary_tenant  # noqa: F401,E501
from .claim import Claim, claim, claim_batch, claim_params, ZERO_TENANT  # noqa: F401
from .outcomes import heartbeat, OutcomeRecord, record_outcomes  # noqa: F401
from .effects import begin_effect, set_effect_ref  # noqa: F401
from .replay import BulkReplay, DeadFilter, replay, replay_many  # noqa: F401
from .prune import PruneSlice, prune_finished, prune_finished_slice, walk_in_index_order  # noqa: F401
