-- The end of the quiet window containing p_now, or NULL: the one definition the
-- fan-out's set-based policy check (opsboard/sql/notifications.sql
-- notification_fanout_chunk) applies to every recipient of a chunk at once.
-- Same rule as opsboard.notifications.preferences.quiet_until (the pure
-- reference a test holds it to): [start, end) in the user's time zone on the
-- listed ISO days (empty or NULL: every day); a window whose end is not after its
-- start runs over midnight and belongs to the day it starts on, so yesterday's
-- window is tried first.  Comparisons in local wall-clock time; an unknown
-- zone counts as UTC (caught here: pg_timezone_names takes 200 ms to scan).
CREATE FUNCTION opsboard_quiet_until(p_now timestamptz, p_time_zone text, p_start time, p_end time,
                                     p_days smallint[])
RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
DECLARE
    tz text := p_time_zone;
    at_local timestamp;
    d date;
    span interval := CASE WHEN p_end <= p_start THEN interval '1 day' ELSE interval '0' END;
BEGIN
    BEGIN
        at_local := p_now AT TIME ZONE tz;
    EXCEPTION WHEN invalid_parameter_value THEN
        tz := 'UTC';
        at_local := p_now AT TIME ZONE tz;
    END;
    FOREACH d IN ARRAY ARRAY[at_local::date - 1, at_local::date] LOOP
        IF (coalesce(cardinality(p_days), 0) = 0 OR extract(isodow FROM d)::smallint = ANY(p_days))
           AND d + p_start <= at_local AND at_local < d + p_end + span THEN
            RETURN (d + p_end + span) AT TIME ZONE tz;
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;
