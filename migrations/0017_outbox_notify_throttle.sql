-- Wake the outbox relays without serialising every producer's commit.
--
-- 0006 notified `opsboard_outbox` from every transaction that inserted an
-- event.  A transaction that has queued a NOTIFY takes PostgreSQL's global
-- notify lock at commit and holds it through its WAL flush, so concurrent
-- publishers committed one at a time (8 writers: 410-1,030 commits/s with the
-- trigger, 1,860-3,170 without, measured on the 2-core VM).
--
-- Now a session notifies at most once per `opsboard.outbox_notify_interval_ms`
-- (default 100 ms; a custom setting, so SET/ALTER ROLE/ALTER DATABASE can
-- change it): its other transactions commit without touching the notify
-- queue.  The check runs at commit (a deferred constraint trigger, once per
-- transaction), so "notified less than the interval ago" is measured between
-- commits, whatever a transaction did in between.  The session's last notify
-- time is a session setting: a transaction that rolls back reverts it too.
--
-- What makes a suppressed notification safe: a relay that was woken (or found
-- events) keeps polling at a short interval for a window much longer than the
-- notify interval (worker/services/relay.py, RelayConfig.active_window), so an
-- event committed without a notification, less than the interval after its
-- session's notified commit, is found by that short polling; the relay's slow
-- fallback poll remains for everything else (a lost notification, a relay
-- that was down).
DROP TRIGGER outbox_events_notify ON outbox_events;
DROP FUNCTION outbox_events_notify();

CREATE FUNCTION outbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at   float8;
    last float8;
BEGIN
    -- Once per transaction: the other rows' triggers return here.
    IF current_setting('opsboard.outbox_notify_checked', true) = '1' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('opsboard.outbox_notify_checked', '1', true);
    at := extract(epoch FROM clock_timestamp()) * 1000;
    last := nullif(current_setting('opsboard.outbox_notified_at', true), '')::float8;
    IF last IS NULL OR at - last >= coalesce(nullif(current_setting('opsboard.outbox_notify_interval_ms', true), '')
                                              ::float8, 100) OR at < last THEN
        PERFORM set_config('opsboard.outbox_notified_at', at::text, false);
        PERFORM pg_notify('opsboard_outbox', '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION outbox_events_notify();
