-- 0078: work that depends on work (issue 45): recorded results, workflows and batches.
--
-- 1. A job's recorded result: the JSON value its handler returned (bounded by
--    OPSBOARD_JOB_RESULT_MAX_BYTES in the worker).  Nullable without a default: adding it
--    rewrites nothing, and a job whose handler returns nothing never writes it (the worker
--    sends the results of a batch in a statement of their own, only when there is one).
ALTER TABLE jobs ADD COLUMN result jsonb;

-- 2. Workflows.  A workflow (or a batch: the same DAG, built by opsboard.jobqueue.batches) is a set
--    of named tasks with dependencies.  A task's job is inserted into jobs only when the task is
--    released (all its dependencies succeeded, or its policy lets it run anyway): jobs without
--    dependencies never see these tables, and a waiting task is invisible to the claim.
--
--    Its state is read from its tasks (opsboard.jobqueue.workflows.workflow_state): running while a
--    task waits or runs, else failed when one died or was cancelled, else succeeded.  Only an
--    operator's cancel of the whole workflow is written here (cancelled_at): a counter per
--    workflow would be one row every completing transaction of a 10,000-task fan-out updates.
CREATE TABLE workflows (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id),
    name            text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    kind            text NOT NULL DEFAULT 'workflow' CHECK (kind IN ('workflow', 'batch')),
    -- A sub-workflow: the workflow it is a task of (that task's sub_workflow_id names it back).
    parent_id       uuid REFERENCES workflows (id) ON DELETE CASCADE,
    idempotency_key text CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    correlation_id  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    cancelled_at    timestamptz
);
CREATE UNIQUE INDEX workflows_idempotency_idx ON workflows (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX workflows_tenant_idx ON workflows (tenant_id, id DESC);
CREATE INDEX workflows_parent_idx ON workflows (parent_id) WHERE parent_id IS NOT NULL;

-- A task's states, and what moves it:
--   waiting   inserted with dependencies left (workflow_insert); out by the completing transaction
--             of its last dependency (workflow_release_dependents) or a cancel.
--   ready     its job exists (id = job_id at first; a replay's job after it) and is the truth;
--             out when that job succeeds, dies or is cancelled (workflow_task_finish: the completer,
--             or the sweeper for the paths that finish jobs outside the completer).
--   succeeded, dead, cancelled   final, except that a replay of a dead task makes it ready again
--             and the tasks its death cancelled waiting again (workflow_task_resume).
--   skipped   a task of policy 'if_failed' (a batch's death callback) whose dependencies all
--             succeeded: it has nothing to do.
CREATE TABLE workflow_tasks (
    id              uuid PRIMARY KEY,
    workflow_id     uuid NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    tenant_id       uuid NOT NULL,
    name            text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- The job of a task that is a job (NULL for a sub-workflow's node).
    job_id          uuid,
    type            text,
    version         smallint,
    queue           text,
    priority        smallint,
    payload         jsonb,
    max_attempts    integer,
    -- A task that is a workflow: no job; its dependents wait for that workflow's last tasks.
    sub_workflow_id uuid REFERENCES workflows (id),
    -- What a dependency that died or was cancelled means: cancel this task (the default), run it
    -- anyway, or run it only then (a batch's death callback).
    policy          text NOT NULL DEFAULT 'cancel' CHECK (policy IN ('cancel', 'run', 'if_failed')),
    deps_total      integer NOT NULL DEFAULT 0,
    deps_left       integer NOT NULL CHECK (deps_left >= 0),
    deps_failed     integer NOT NULL DEFAULT 0,
    state           text NOT NULL CHECK (state IN ('waiting', 'ready', 'succeeded', 'dead', 'cancelled',
                                                   'skipped')),
    -- Why a cancelled task was cancelled: 'dependency' (a replay may bring it back) or 'workflow'.
    cancel_cause    text,
    released_at     timestamptz,
    finished_at     timestamptz,
    -- A task may be added to an open batch by a job of that batch (opsboard.jobqueue.batches.add).
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workflow_id, name),
    CHECK ((job_id IS NULL) = (type IS NULL)),
    CHECK (job_id IS NULL OR sub_workflow_id IS NULL)
);
-- The sweeper's walk: tasks whose job runs (a job finished outside the completer is found here).
CREATE INDEX workflow_tasks_ready_idx ON workflow_tasks (job_id) WHERE state = 'ready';

-- dep_id must finish before task_id may run.  The primary key serves the completing transaction's
-- lookup of a finished task's dependents; the second index the page's and the replay's reverse walk.
CREATE TABLE workflow_deps (
    dep_id  uuid NOT NULL REFERENCES workflow_tasks (id) ON DELETE CASCADE,
    task_id uuid NOT NULL REFERENCES workflow_tasks (id) ON DELETE CASCADE,
    PRIMARY KEY (dep_id, task_id)
);
CREATE INDEX workflow_deps_task_idx ON workflow_deps (task_id);
