-- Several tokens of a bucket in one take, and the unspent ones of an earlier take given back in the
-- same call: a web process's lease of a tenant's enqueue tokens (backpressure.TokenLeases, POST
-- /api/v1/events).  Same refill arithmetic as opsboard_take_token (0016, 0060): the bucket gets
-- p_back tokens back and refills for the time elapsed (never above its capacity), then grants up to
-- p_want of the whole tokens it holds; granted 0 is a refusal, with wait_seconds until the next one.
-- The row lock (FOR UPDATE) serialises concurrent takers: the bucket never grants more than its
-- capacity + rate x elapsed, however the grants are split.
--
-- Why: the bench's one tenant took its token in a statement of its own before each event's insert,
-- and the bucket row's lock made those statements wait on each other (0.17 of their 0.31 ms a call
-- under 8 connections); a process holding a few tokens spends one without a round trip.
CREATE FUNCTION opsboard_take_tokens(p_name text, p_capacity float8, p_rate float8, p_now timestamptz,
                                     p_want int, p_back float8,
                                     OUT granted int, OUT tokens float8, OUT wait_seconds float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    held float8;
    since timestamptz;
BEGIN
    SELECT r.tokens, r.updated_at INTO held, since FROM rate_limits r WHERE r.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        -- First use: the bucket starts full (as opsboard_take_token's insert).
        INSERT INTO rate_limits (name, capacity, refill_rate, tokens, last_granted, updated_at)
        VALUES (p_name, p_capacity, p_rate, p_capacity, true, p_now)
        ON CONFLICT (name) DO NOTHING;
        SELECT r.tokens, r.updated_at INTO STRICT held, since FROM rate_limits r WHERE r.name = p_name FOR UPDATE;
    END IF;
    held := least(p_capacity, held + greatest(0, p_back) + greatest(0, extract(epoch FROM p_now - since)) * p_rate);
    granted := least(greatest(p_want, 1), greatest(0, floor(held)))::int;
    tokens := held - granted;
    wait_seconds := CASE WHEN granted > 0 THEN 0 ELSE (1 - tokens) / p_rate END;
    UPDATE rate_limits r SET capacity = p_capacity, refill_rate = p_rate, tokens = held - granted,
                             last_granted = granted > 0, updated_at = greatest(since, p_now)
    WHERE r.name = p_name;
END
$$;
