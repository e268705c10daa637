-- name: workflow_insert
-- The workflows of one insert (a workflow and its sub-workflows), from one JSON array.
INSERT INTO workflows (id, tenant_id, name, kind, parent_id, idempotency_key, correlation_id)
SELECT id, tenant_id, name, kind, parent_id, idempotency_key, correlation_id
FROM jsonb_to_recordset(%(rows)s::jsonb)
     AS w(id uuid, tenant_id uuid, name text, kind text, parent_id uuid, idempotency_key text, correlation_id text);

-- name: workflow_insert_keyed
-- A workflow with an idempotency key: nothing when the tenant's key is taken (then workflow_get_by_key).
INSERT INTO workflows (id, tenant_id, name, kind, idempotency_key, correlation_id)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(kind)s, %(idempotency_key)s, %(correlation_id)s)
ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id;

-- name: workflow_get_by_key
-- The workflow an idempotency key made already (a repeated insert returns it).
SELECT * FROM workflows WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s;

-- name: workflow_task_insert_many
-- The tasks of one insert, all waiting: the roots are released after (workflow_task_release), by the
-- same statement that releases any other task.
INSERT INTO workflow_tasks (id, workflow_id, tenant_id, name, job_id, type, version, queue, priority, payload,
                            max_attempts, sub_workflow_id, policy, deps_total, deps_left, state)
SELECT id, workflow_id, tenant_id, name, job_id, type, version, queue, priority, payload, max_attempts,
       sub_workflow_id, policy, deps, deps, 'waiting'
FROM jsonb_to_recordset(%(rows)s::jsonb)
     AS t(id uuid, workflow_id uuid, tenant_id uuid, name text, job_id uuid, type text, version smallint,
          queue text, priority smallint, payload jsonb, max_attempts int, sub_workflow_id uuid, policy text,
          deps int);

-- name: workflow_dep_insert_many
-- The edges of one insert (dep_id before task_id).
INSERT INTO workflow_deps (dep_id, task_id)
SELECT * FROM unnest(%(deps)s::uuid[], %(tasks)s::uuid[]);

-- name: workflow_task_release
-- Release waiting tasks whose dependencies are all done: a job task becomes ready and its job is
-- inserted here (its idempotency key wf:<task id> makes a second release insert nothing, and tells
-- the worker that the job is a task); a sub-workflow's node succeeds at once (its own tasks depend
-- on it); a death callback (policy if_failed) with no failed dependency is skipped.  Returns the
-- tasks finished here, for their own dependents (opsboard.jobqueue.workflows.advance).
WITH r AS (
    UPDATE workflow_tasks t
    SET state = CASE WHEN t.policy = 'if_failed' AND t.deps_failed = 0 THEN 'skipped'
                     WHEN t.job_id IS NULL THEN 'succeeded' ELSE 'ready' END,
        released_at = statement_timestamp(),
        finished_at = CASE WHEN (t.policy = 'if_failed' AND t.deps_failed = 0) OR t.job_id IS NULL
                           THEN statement_timestamp() END
    WHERE t.id = ANY (%(ids)s::uuid[]) AND t.state = 'waiting' AND t.deps_left = 0
    RETURNING t.*
), j AS (
    INSERT INTO jobs (id, type, version, tenant_id, queue, priority, idempotency_key, payload, max_attempts,
                      available_at)
    SELECT job_id, type, version, tenant_id, queue, priority, 'wf:' || id, payload, max_attempts,
           statement_timestamp()
    FROM r WHERE state = 'ready'
    ON CONFLICT (tenant_id, type, idempotency_key) WHERE idempotency_key IS NOT NULL AND status <> 'dead'
    DO NOTHING
)
SELECT id, state FROM r WHERE state <> 'ready';

-- name: workflow_release_dependents
-- Tasks whose job finished (%(finish_*)s: succeeded, dead or cancelled; only a ready task running that
-- very job moves, so a stale attempt or a second report changes nothing), and tasks already finished
-- (%(ids)s, %(states)s: cancelled or skipped ones, sub-workflow nodes), followed to their dependents in
-- the same statement (one round trip of the completing transaction, not two).  Returns the finished
-- tasks that moved here (finished true), then the dependents finished here (finished false).
--
-- The dependents of tasks that just finished, set-based for the whole batch, in one statement: each
-- waiting dependent counts its finished dependencies down and, with nothing left to wait for, is
-- released here (a job task becomes ready and its job is inserted, as workflow_task_release does; a
-- sub-workflow's node succeeds; a death callback without a failed dependency is skipped), or (policy
-- cancel, a dependency failed) is cancelled.  Returns the dependents finished here (cancelled,
-- succeeded, skipped): their own dependents follow (opsboard.jobqueue.workflows.advance).
--
-- Dependents are locked in id order first: two completers finishing tasks of the same layer touch
-- the same dependents, and locks taken in one order cannot deadlock.  The lock CTE runs first, as
-- the update's one-time filter.  A fan-in's dependent (a batch's callback, the sink of 10,000) is one
-- row that every completing transaction of its dependencies updates: the row lock serializes their
-- commits, which is what tells the last one that it is the last.
--
-- Every join here is a probe of a primary key, whatever the planner believes of the sizes (a batch's
-- array reads as 1 to 10 rows; a fan-out's root has 10,000 dependents): the edges are read per
-- finished task through a LATERAL subquery kept apart by OFFSET 0 (as a plain join the planner read
-- the whole of workflow_deps for each batch: 12 of 12.4 ms for 64 outcomes), and the update joins
-- the counts to workflow_tasks by id alone (restricted by an id array too, the root's 10,000 counts
-- were matched by a nested loop's filter: 50 million comparisons, 14 s).  Counting down and
-- releasing in one update writes each dependent once instead of twice (the root of the fan-out:
-- 2.4 + 0.8 s before, for 10,000 dependents, on a loaded machine).
WITH fin AS (
    UPDATE workflow_tasks t SET state = x.state, finished_at = statement_timestamp()
    FROM unnest(%(finish_ids)s::uuid[], %(finish_job_ids)s::uuid[], %(finish_states)s::text[]) AS x(id, job_id, state)
    WHERE t.id = x.id AND t.state = 'ready' AND t.job_id = x.job_id
    RETURNING t.id, t.state
), f AS (
    SELECT id, state FROM fin
    UNION ALL
    SELECT * FROM unnest(%(ids)s::uuid[], %(states)s::text[]) AS f(id, state)
), e AS MATERIALIZED (
    SELECT d.task_id,
           count(*) FILTER (WHERE f.state IN ('succeeded', 'skipped')) AS ok,
           count(*) FILTER (WHERE f.state NOT IN ('succeeded', 'skipped')) AS bad
    FROM f CROSS JOIN LATERAL (SELECT d.task_id FROM workflow_deps d WHERE d.dep_id = f.id OFFSET 0) d
    GROUP BY d.task_id
), l AS MATERIALIZED (
    SELECT t.id FROM workflow_tasks t
    WHERE t.id = ANY (ARRAY(SELECT task_id FROM e)) AND t.state = 'waiting'
    ORDER BY t.id
    FOR UPDATE
), u AS (
    -- The new state, written out in each SET (an UPDATE's FROM cannot see the row it updates):
    -- cancelled (policy cancel, a dependency failed), waiting (dependencies left), skipped (a death
    -- callback without a failed dependency), succeeded (a sub-workflow's node), else ready.
    UPDATE workflow_tasks t
    SET deps_left = CASE WHEN t.policy = 'cancel' AND e.bad > 0 THEN t.deps_left ELSE t.deps_left - e.ok - e.bad END,
        deps_failed = t.deps_failed + e.bad,
        state = CASE WHEN t.policy = 'cancel' AND e.bad > 0 THEN 'cancelled'
                     WHEN t.deps_left - e.ok - e.bad > 0 THEN 'waiting'
                     WHEN t.policy = 'if_failed' AND t.deps_failed + e.bad = 0 THEN 'skipped'
                     WHEN t.job_id IS NULL THEN 'succeeded'
                     ELSE 'ready' END,
        cancel_cause = CASE WHEN t.policy = 'cancel' AND e.bad > 0 THEN 'dependency' ELSE t.cancel_cause END,
        released_at = CASE WHEN NOT (t.policy = 'cancel' AND e.bad > 0) AND t.deps_left - e.ok - e.bad = 0
                           THEN statement_timestamp() ELSE t.released_at END,
        finished_at = CASE WHEN (t.policy = 'cancel' AND e.bad > 0)
                                OR (t.deps_left - e.ok - e.bad = 0
                                    AND ((t.policy = 'if_failed' AND t.deps_failed + e.bad = 0) OR t.job_id IS NULL))
                           THEN statement_timestamp() ELSE t.finished_at END
    FROM e
    WHERE t.id = e.task_id AND t.state = 'waiting' AND (SELECT count(*) FROM l) >= 0
    RETURNING t.*
), j AS (
    INSERT INTO jobs (id, type, version, tenant_id, queue, priority, idempotency_key, payload, max_attempts,
                      available_at)
    SELECT job_id, type, version, tenant_id, queue, priority, 'wf:' || id, payload, max_attempts,
           statement_timestamp()
    FROM u WHERE state = 'ready'
    ON CONFLICT (tenant_id, type, idempotency_key) WHERE idempotency_key IS NOT NULL AND status <> 'dead'
    DO NOTHING
)
SELECT id, state, true AS finished FROM fin
UNION ALL
SELECT id, state, false FROM u WHERE state IN ('cancelled', 'skipped', 'succeeded');

-- name: workflow_job_results_set
-- The recorded results of a batch of outcomes (only the jobs that returned one), with the outcomes.
UPDATE jobs j SET result = r.result
FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(id uuid, result jsonb)
WHERE j.id = r.id;

-- name: workflow_job_notify_done
-- Wake the producers waiting for these jobs (opsboard.jobqueue.results.wait), one notification
-- per job: its id is the key their waiters registered.
SELECT pg_notify('opsboard_job_done', id::text) FROM unnest(%(ids)s::uuid[]) AS id;

-- name: workflow_job_get_result
-- A job's state and recorded result, in the caller's scope.
SELECT id, tenant_id, status, result, last_error_code, finished_at FROM jobs
WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: workflow_tasks_stranded
-- The sweeper: ready tasks whose job finished outside the completer (the lease reaper made it dead,
-- the expiry, an operator's cancel): their workflow would otherwise wait for them.
SELECT t.id, t.job_id, j.status::text AS state
FROM workflow_tasks t JOIN jobs j ON j.id = t.job_id
WHERE t.state = 'ready' AND j.status IN ('succeeded', 'dead', 'cancelled')
LIMIT %(limit)s;

-- name: workflow_get
-- One workflow in the caller's scope, with its state read from its tasks.
SELECT w.*, s.*
FROM workflows w
CROSS JOIN LATERAL (
    SELECT count(*) AS tasks_total,
           count(*) FILTER (WHERE t.state IN ('succeeded', 'dead', 'cancelled', 'skipped')) AS tasks_done,
           count(*) FILTER (WHERE t.state IN ('dead', 'cancelled')) AS tasks_failed,
           count(*) FILTER (WHERE t.state IN ('waiting', 'ready')) AS tasks_open
    FROM workflow_tasks t WHERE t.workflow_id = w.id
) s
WHERE w.id = %(id)s AND (%(scope_all)s OR w.tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: workflow_task_list
-- A workflow's tasks with their jobs' states and times, and each task's dependencies by name.
SELECT t.id, t.name, t.type, t.queue, t.policy, t.state, t.job_id, t.sub_workflow_id, t.deps_left,
       t.deps_failed, t.cancel_cause, t.released_at, t.finished_at,
       j.status::text AS job_status, j.attempts, j.last_error_code, j.started_at, j.finished_at AS job_finished_at,
       j.result,
       ARRAY(SELECT d.dep_id FROM workflow_deps d WHERE d.task_id = t.id ORDER BY d.dep_id) AS deps
FROM workflow_tasks t LEFT JOIN jobs j ON j.id = t.job_id
WHERE t.workflow_id = %(id)s
ORDER BY t.created_at, t.name
LIMIT %(limit)s;

-- name: workflow_list
-- Workflows in the caller's scope, newest first, filtered (state is read from the tasks).
SELECT * FROM (
    SELECT w.id, w.tenant_id, w.name, w.kind, w.parent_id, w.created_at, w.cancelled_at, s.*,
           CASE WHEN w.cancelled_at IS NOT NULL THEN 'cancelled'
                WHEN s.tasks_open > 0 THEN 'running'
                WHEN s.tasks_failed > 0 THEN 'failed' ELSE 'succeeded' END AS state
    FROM workflows w
    CROSS JOIN LATERAL (
        SELECT count(*) AS tasks_total,
               count(*) FILTER (WHERE t.state IN ('succeeded', 'dead', 'cancelled', 'skipped')) AS tasks_done,
               count(*) FILTER (WHERE t.state IN ('dead', 'cancelled')) AS tasks_failed,
               count(*) FILTER (WHERE t.state IN ('waiting', 'ready')) AS tasks_open
        FROM workflow_tasks t WHERE t.workflow_id = w.id
    ) s
    WHERE (%(scope_all)s OR w.tenant_id = ANY(%(scope_ids)s::uuid[]))
      AND (%(tenant_id)s::uuid IS NULL OR w.tenant_id = %(tenant_id)s)
      AND (%(kind)s::text IS NULL OR w.kind = %(kind)s)
    ORDER BY w.id DESC
    LIMIT %(limit)s
) x
WHERE %(state)s::text IS NULL OR x.state = %(state)s;

-- name: workflow_dependency_results
-- What a task reads of its dependencies: each one's name, state and its job's recorded result.
SELECT t.name, t.state, j.result
FROM workflow_deps d JOIN workflow_tasks t ON t.id = d.dep_id LEFT JOIN jobs j ON j.id = t.job_id
WHERE d.task_id = %(task_id)s
ORDER BY t.name;

-- name: workflow_cancel
-- Cancel a workflow and its sub-workflows: every task that waits is cancelled (cause 'workflow'),
-- every ready task's job that has not started is cancelled with it.  A running job runs on; its
-- dependents are cancelled already.  Returns the tasks cancelled (their dependents in other
-- workflows follow: opsboard.jobqueue.workflows.advance).
WITH RECURSIVE tree AS (
    SELECT id FROM workflows WHERE id = %(id)s
    UNION ALL
    SELECT w.id FROM workflows w JOIN tree ON w.parent_id = tree.id
), marked AS (
    UPDATE workflows w SET cancelled_at = coalesce(w.cancelled_at, statement_timestamp())
    WHERE w.id IN (SELECT id FROM tree)
), jobs_cancelled AS (
    UPDATE jobs j SET status = 'cancelled', finished_at = statement_timestamp()
    FROM workflow_tasks t
    WHERE t.workflow_id IN (SELECT id FROM tree) AND t.state = 'ready' AND j.id = t.job_id
      AND j.status IN ('pending', 'retryable')
    RETURNING j.id
)
UPDATE workflow_tasks t
SET state = 'cancelled', cancel_cause = 'workflow', finished_at = statement_timestamp()
WHERE t.workflow_id IN (SELECT id FROM tree)
  AND (t.state = 'waiting' OR (t.state = 'ready' AND t.job_id IN (SELECT id FROM jobs_cancelled)))
RETURNING t.id, t.state;

-- name: workflow_task_get
-- One task, locked (replay's resume and a batch's additions).
SELECT t.*, w.kind, w.cancelled_at FROM workflow_tasks t JOIN workflows w ON w.id = t.workflow_id
WHERE t.id = %(id)s
FOR UPDATE OF t;

-- name: workflow_task_downstream
-- Every task downstream of %(id)s with the states of all its dependencies: what a replay of a dead
-- task looks at to bring back the tasks its death cancelled.
WITH RECURSIVE down AS (
    SELECT d.task_id AS id FROM workflow_deps d WHERE d.dep_id = %(id)s
    UNION
    SELECT d.task_id FROM workflow_deps d JOIN down ON d.dep_id = down.id
)
SELECT t.id, t.state, t.policy, t.cancel_cause,
       ARRAY(SELECT d.dep_id FROM workflow_deps d WHERE d.task_id = t.id) AS deps
FROM workflow_tasks t WHERE t.id IN (SELECT id FROM down)
ORDER BY t.id
FOR UPDATE OF t;

-- name: workflow_task_states
-- The states of these tasks.
SELECT id, state FROM workflow_tasks WHERE id = ANY (%(ids)s::uuid[]);

-- name: workflow_task_revive
-- A replay: the dead task runs its replay's job; the tasks its death cancelled wait again; the
-- run-anyway dependents that counted a failure wait for the replay instead.
WITH revived AS (
    UPDATE workflow_tasks t
    SET state = CASE WHEN t.id = %(task_id)s THEN 'ready' ELSE 'waiting' END,
        job_id = CASE WHEN t.id = %(task_id)s THEN %(job_id)s::uuid ELSE t.job_id END,
        cancel_cause = NULL, finished_at = NULL
    WHERE t.id = ANY (%(ids)s::uuid[])
    RETURNING t.id
)
UPDATE workflow_tasks t
SET deps_left = t.deps_left + c.n, deps_failed = t.deps_failed - c.n
FROM (SELECT d.task_id, count(*) AS n FROM workflow_deps d WHERE d.dep_id IN (SELECT id FROM revived)
      GROUP BY d.task_id) c
WHERE t.id = c.task_id AND t.state = 'waiting' AND t.policy <> 'cancel' AND t.deps_failed >= c.n
  AND NOT (t.id = ANY (%(ids)s::uuid[]));

-- name: workflow_batch_callbacks_lock
-- A batch's callbacks, locked, with their states: the batch is open while one waits.
SELECT id, state FROM workflow_tasks
WHERE workflow_id = %(id)s AND name IN ('on_success', 'on_complete', 'on_death')
ORDER BY id
FOR UPDATE;

-- name: workflow_batch_callbacks_extend
-- A member added to an open batch: each waiting callback waits for it too.
WITH e AS (
    INSERT INTO workflow_deps (dep_id, task_id)
    SELECT m, c FROM unnest(%(members)s::uuid[]) AS m CROSS JOIN unnest(%(callbacks)s::uuid[]) AS c
)
UPDATE workflow_tasks t SET deps_left = t.deps_left + cardinality(%(members)s::uuid[]),
                            deps_total = t.deps_total + cardinality(%(members)s::uuid[])
WHERE t.id = ANY (%(callbacks)s::uuid[]);
