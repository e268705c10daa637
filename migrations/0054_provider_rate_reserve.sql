-- A token-bucket take that keeps a reserve: grants only while the bucket holds
-- at least 1 + p_floor tokens (after refill), so takers with a floor leave
-- p_floor tokens for takers without one.  A provider with a critical share
-- (jobtypes.define_provider(critical_concurrency=...)) gives its other queues'
-- jobs a floor, so a bulk send (an SMS broadcast) can drain its bucket only
-- down to the reserve, and a critical job (an OTP) still finds a token at once.
-- Same refill arithmetic as the four-argument opsboard_take_token (0016), which
-- is this with p_floor = 0; wait_seconds is the time until 1 + p_floor tokens.
CREATE FUNCTION opsboard_take_token(p_name text, p_capacity float8, p_rate float8, p_now timestamptz,
                                    p_floor float8,
                                    OUT granted boolean, OUT tokens float8, OUT wait_seconds float8)
LANGUAGE sql VOLATILE AS $$
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
    RETURNING last_granted, tokens, CASE WHEN last_granted THEN 0 ELSE (1 + p_floor - tokens) / refill_rate END
$$;
