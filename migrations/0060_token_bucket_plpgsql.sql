-- The token-bucket take (0016, and the reserve-keeping one of 0054) in PL/pgSQL, same arithmetic.
--
-- Why: a LANGUAGE sql function that is not inlined (this one writes: an UPSERT) is parsed and
-- planned again on every call, inside the calling statement, even when that statement is itself a
-- prepared statement with a cached plan.  For POST /api/v1/events that was 0.15 ms of the 0.18 ms
-- outbox_event_admit took on an idle server (EXPLAIN ANALYZE: the Function Scan on
-- opsboard_take_token), once per request.  PL/pgSQL keeps the UPSERT's plan for the session, so a
-- call is an execution only (one take through a prepared SELECT: 0.21 -> 0.12 ms a round trip with
-- synchronous_commit off; docs/performance.md, "The producer API beside its worker, part 3").
-- The row lock of the UPSERT still serialises concurrent takers of one bucket.
CREATE OR REPLACE FUNCTION opsboard_take_token(p_name text, p_capacity float8, p_rate float8, p_now timestamptz,
                                               OUT granted boolean, OUT tokens float8, OUT wait_seconds float8)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO rate_limits AS r (name, capacity, refill_rate, tokens, last_granted, updated_at)
    VALUES (p_name, p_capacity, p_rate, p_capacity - 1, true, p_now)
    ON CONFLICT (name) DO UPDATE SET
        capacity = excluded.capacity,
        refill_rate = excluded.refill_rate,
        last_granted = least(excluded.capacity, r.tokens + greatest(0, extract(epoch FROM excluded.updated_at - r.updated_at)) * excluded.refill_rate) >= 1,
        tokens = least(excluded.capacity, r.tokens + greatest(0, extract(epoch FROM excluded.updated_at - r.updated_at)) * excluded.refill_rate)
                 - CASE WHEN least(excluded.capacity, r.tokens + greatest(0, extract(epoch FROM excluded.updated_at - r.updated_at)) * excluded.refill_rate) >= 1
                        THEN 1 ELSE 0 END,
        updated_at = greatest(r.updated_at, excluded.updated_at)
    RETURNING r.last_granted, r.tokens, CASE WHEN r.last_granted THEN 0 ELSE (1 - r.tokens) / r.refill_rate END
    INTO granted, tokens, wait_seconds;
END
$$;

CREATE OR REPLACE FUNCTION opsboard_take_token(p_name text, p_capacity float8, p_rate float8, p_now timestamptz,
                                               p_floor float8,
                                               OUT granted boolean, OUT tokens float8, OUT wait_seconds float8)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO rate_limits AS r (name, capacity, refill_rate, tokens, last_granted, updated_at)
    VALUES (p_name, p_capacity, p_rate, p_capacity - CASE WHEN p_capacity >= 1 + p_floor THEN 1 ELSE 0 END,
            p_capacity >= 1 + p_floor, p_now)
    ON CONFLICT (name) DO UPDATE SET
        capacity = excluded.capacity,
        refill_rate = excluded.refill_rate,
        last_granted = least(excluded.capacity, r.tokens + greatest(0, extract(epoch FROM excluded.updated_at - r.updated_at)) * excluded.refill_rate) >= 1 + p_floor,
        tokens = least(excluded.capacity, r.tokens + greatest(0, extract(epoch FROM excluded.updated_at - r.updated_at)) * excluded.refill_rate)
                 - CASE WHEN least(excluded.capacity, r.tokens + greatest(0, extract(epoch FROM excluded.updated_at - r.updated_at)) * excluded.refill_rate) >= 1 + p_floor
                        THEN 1 ELSE 0 END,
        updated_at = greatest(r.updated_at, excluded.updated_at)
    RETURNING r.last_granted, r.tokens, CASE WHEN r.last_granted THEN 0 ELSE (1 + p_floor - r.tokens) / r.refill_rate END
    INTO granted, tokens, wait_seconds;
END
$$;
