-- Queries of the event export to NATS JetStream (opsboard/outbox/export.py).

-- name: event_export_batch
-- The next events to export: up to %(limit)s unexported events, oldest id
-- first, with their tenant's slug (the subject's second token).  Read in
-- autocommit, no lock: one exporter runs (the leader's), and a second one
-- during a leader hand-over only sends again what JetStream's duplicate
-- window drops (Nats-Msg-Id = the event id).  Walks the partial index
-- outbox_events_unexported_idx, so its cost follows the batch, not the table.
SELECT e.id, e.type, e.version, e.aggregate_type, e.aggregate_id, e.tenant_id, t.slug AS tenant_slug,
       e.occurred_at, e.correlation_id, e.payload
FROM outbox_events e
JOIN tenants t ON t.id = e.tenant_id
WHERE e.exported_at IS NULL
ORDER BY e.id
LIMIT %(limit)s;

-- name: event_export_mark
-- Mark events exported once JetStream acknowledged them, and count them on the
-- stream's state row, in one statement.  %(duplicates)s: how many of them
-- JetStream reported as duplicates (already stored: a re-send).
WITH marked AS (
    UPDATE outbox_events SET exported_at = coalesce(%(now)s::timestamptz, now())
    WHERE id = ANY(%(ids)s::uuid[]) AND exported_at IS NULL
    RETURNING id
)
UPDATE event_export_state
SET exported = exported + (SELECT count(*) FROM marked),
    duplicates = duplicates + %(duplicates)s,
    last_event_id = coalesce((SELECT id FROM marked ORDER BY id DESC LIMIT 1), last_event_id),
    last_exported_at = coalesce(%(now)s::timestamptz, now()),
    heartbeat_at = coalesce(%(now)s::timestamptz, now()),
    connected = true, last_error = NULL
WHERE stream = %(stream)s
RETURNING (SELECT count(*) FROM marked)::int AS marked;

-- name: event_export_state_touch
-- The exporter's heartbeat: its stream's row (made on first use), whether it
-- is connected and its last trouble (NULL when fine).
INSERT INTO event_export_state AS s (stream, subject_prefix, server, connected, last_error, heartbeat_at)
VALUES (%(stream)s, %(prefix)s, %(server)s, %(connected)s, left(%(error)s, 500), coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (stream) DO UPDATE
SET subject_prefix = EXCLUDED.subject_prefix, server = EXCLUDED.server, connected = EXCLUDED.connected,
    last_error = EXCLUDED.last_error, heartbeat_at = EXCLUDED.heartbeat_at;

-- name: event_export_lag
-- The export's lag: events not yet exported and the age of the oldest (0 when
-- none; the oldest by id, read off the partial index), with the state of each
-- stream exported to.  No row when no exporter
-- ever ran (the outbox is not "behind" a stream nobody configured).
SELECT s.stream, s.server, s.connected, s.last_error, s.exported, s.duplicates, s.heartbeat_at,
       s.last_exported_at,
       (SELECT count(*) FROM outbox_events WHERE exported_at IS NULL)::bigint AS lag_events,
       coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - (
           SELECT occurred_at FROM outbox_events WHERE exported_at IS NULL ORDER BY id LIMIT 1)), 0)::float8
           AS lag_seconds
FROM event_export_state s
ORDER BY s.stream;
