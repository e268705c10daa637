-- 0087: the fold's TRUNCATE of a job_count_deltas partition (0086) as the
-- schema's owner (issue 48).
--
-- The application role has no TRUNCATE anywhere (opsboard migrate
-- --print-roles-sql), and the leader's depth service runs as that role.  This
-- function truncates one of the two partitions and nothing else (the slot is
-- checked, the table names are fixed), with the owner's rights.  The caller
-- already holds the partition's ACCESS EXCLUSIVE lock (LOCK TABLE needs only
-- the UPDATE or DELETE the role has), so this never waits.
CREATE FUNCTION opsboard_count_deltas_truncate(slot int) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS
$$
BEGIN
    IF slot = 0 THEN
        TRUNCATE job_count_deltas_0;
    ELSIF slot = 1 THEN
        TRUNCATE job_count_deltas_1;
    ELSE
        RAISE EXCEPTION 'no job_count_deltas partition for slot %', slot USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- EXECUTE stays granted to PUBLIC, as for every function of the schema: the
-- roles that can connect are opsboard's own, and the application role (which
-- needs it) may not exist when this runs.
