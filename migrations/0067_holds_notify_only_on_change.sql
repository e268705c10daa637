-- 0067: a statement that changes no hold and no live limit says nothing (issue 24).
--
-- pauses and limit_overrides notified opsboard_pauses once per statement (0027), rows or not.
-- The leader's pauses service deletes expired holds every second (pause_delete_expired), and so
-- does every read of the dashboard's holds page: a DELETE of no rows, a notification all the
-- same, and on it every worker of the fleet re-read the holds and every fetcher of every queue
-- claimed again (worker.listener), once a second, for nothing.  The same wake-up hid that a
-- worker whose claim other workers' claims had left empty slept until then (worker.fetcher now
-- claims again at once for that).
--
-- Now one trigger per event, each with its changed rows as a transition table: a notification
-- only when there is one.
CREATE FUNCTION holds_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM changed) THEN
        PERFORM pg_notify('opsboard_pauses', '*');
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER pauses_notify ON pauses;
CREATE TRIGGER pauses_notify_insert AFTER INSERT ON pauses REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION holds_notify_changed();
CREATE TRIGGER pauses_notify_update AFTER UPDATE ON pauses REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION holds_notify_changed();
CREATE TRIGGER pauses_notify_delete AFTER DELETE ON pauses REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION holds_notify_changed();

DROP TRIGGER limit_overrides_notify ON limit_overrides;
CREATE TRIGGER limit_overrides_notify_insert AFTER INSERT ON limit_overrides REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION holds_notify_changed();
CREATE TRIGGER limit_overrides_notify_update AFTER UPDATE ON limit_overrides REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION holds_notify_changed();
CREATE TRIGGER limit_overrides_notify_delete AFTER DELETE ON limit_overrides REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION holds_notify_changed();
