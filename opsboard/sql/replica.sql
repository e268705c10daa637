-- name: replica_primary_lsn
-- Where the primary's WAL is now: what a replica must have replayed to show every write committed so far.
SELECT pg_current_wal_lsn()::text AS lsn;

-- name: replica_status
-- A read replica's position: whether it is one, what it has replayed, and how
-- far behind %(primary_lsn)s it is in bytes and (when behind) in seconds since
-- the last transaction it replayed.
SELECT pg_is_in_recovery() AS in_recovery,
       pg_last_wal_replay_lsn()::text AS replay_lsn,
       CASE WHEN pg_last_wal_replay_lsn() IS NULL THEN NULL
            ELSE greatest(pg_wal_lsn_diff(%(primary_lsn)s::pg_lsn, pg_last_wal_replay_lsn()), 0)::bigint
       END AS behind_bytes,
       CASE WHEN pg_last_wal_replay_lsn() >= %(primary_lsn)s::pg_lsn THEN 0.0
            ELSE extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8
       END AS lag_seconds;
