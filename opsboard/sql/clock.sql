-- name: clock_now
-- The database's clock (or the injected now): every host agrees on it.
SELECT coalesce(%(now)s::timestamptz, now()) AS now;
