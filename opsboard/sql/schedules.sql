-- name: schedule_state_ensure
-- The scheduler's row for a schedule, created the first time it is seen.
INSERT INTO schedule_state (name) VALUES (%(name)s) ON CONFLICT (name) DO NOTHING;

-- name: schedule_state_lock
-- A schedule's state, locked: two schedulers (a leader change) serialize here.
SELECT * FROM schedule_state WHERE name = %(name)s FOR UPDATE;

-- name: schedule_state_set
-- A slot was handled (fired, or taken as the baseline the first time).
UPDATE schedule_state
SET last_slot = %(slot)s, last_fired_at = CASE WHEN %(fired)s THEN coalesce(%(now)s::timestamptz, now())
                                              ELSE last_fired_at END,
    last_jobs = CASE WHEN %(fired)s THEN %(jobs)s ELSE last_jobs END,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s;

-- name: schedule_state_list
-- Every schedule's state, for the dashboard.
SELECT * FROM schedule_state ORDER BY name;

-- name: schedule_tenants
-- The tenants a per-tenant schedule runs for: every customer tenant (not the operator's own).
SELECT id, slug FROM tenants WHERE NOT is_operator ORDER BY slug;
