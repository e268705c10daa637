-- One token-bucket take, shared by every statement that takes a token
-- (opsboard/sql/limits.sql rate_limit_take and admission_take, and
-- opsboard/sql/outbox.sql outbox_event_publish_admitted), so the refill
-- arithmetic is written once.  Takes one token from bucket p_name (capacity,
-- refill rate in tokens per second), creating it full on first use.  The row
-- lock of the UPSERT serialises concurrent takers: the bucket never grants
-- more than capacity + rate x elapsed.
CREATE FUNCTION opsboard_take_token(p_name text, p_capacity float8, p_rate float8, p_now timestamptz,
                                    OUT granted boolean, OUT tokens float8, OUT wait_seconds float8)
LANGUAGE sql VOLATILE AS $$
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
    RETURNING last_granted, tokens, CASE WHEN last_granted THEN 0 ELSE (1 - tokens) / refill_rate END
$$;
