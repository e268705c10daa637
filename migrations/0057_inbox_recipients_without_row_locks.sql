-- 0057: an inbox row's or a delivery's recipient is checked without locking the
-- user's row (issue 27: the broadcast; docs/performance.md, "Broadcast, part 5").
--
-- 0047's statement-level check took FOR KEY SHARE on every distinct recipient of
-- an inserting statement, so that a concurrent DELETE of the user (or a change
-- of its id) waited for the inserting transaction and then found its rows.  For
-- a broadcast that is one lock per recipient: a Heap/LOCK WAL record and a
-- dirtied users page each, and the page's full image in the WAL at its first
-- lock after every checkpoint -- 138 B and one of the 18.2 WAL records a
-- recipient costs (pg_waldump --stats=record over pages 5-12 of a 60,000-member
-- broadcast), and a users page written back to disk later.
--
-- The same guarantee, without touching the rows: one transaction-level
-- advisory lock (key 7957911069121085796, "inbox recipients"), taken SHARED by
-- every inserting statement's check and EXCLUSIVE by the guard that runs after
-- a user is deleted or re-keyed (inbox_keep_referenced), before it looks for
-- the user's rows.  Both orders are refused:
--   * a delete after an insert waits, in its guard, for the inserting
--     transaction to end; the guard's next query (a new snapshot: READ
--     COMMITTED, which the guard already requires) then sees the committed rows
--     and fails the delete, as before;
--   * an insert after a delete waits, in its check, for the deleting
--     transaction to end; the check's next query (a new snapshot) then misses
--     the user and fails the insert with users' foreign-key error, as before.
-- A new snapshot after the lock is what makes this work, so the lock-free check
-- runs only under READ COMMITTED (the fan-out's, and the default); under
-- REPEATABLE READ or SERIALIZABLE the check keeps 0047's FOR KEY SHARE.
-- Price: deleting or re-keying a user waits for every inbox-inserting
-- transaction in progress (a page of a broadcast: well under a second), and
-- inserts wait for it; opsboard deletes no user.
-- Tenants keep their FOR KEY SHARE: one row per statement, not per recipient.

CREATE OR REPLACE FUNCTION inbox_rows_check_references() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing uuid;
BEGIN
    SELECT n.tenant_id INTO missing
    FROM (SELECT DISTINCT tenant_id FROM new_rows) n
         LEFT JOIN LATERAL (SELECT true AS found FROM tenants t WHERE t.id = n.tenant_id FOR KEY SHARE) t ON true
    WHERE t.found IS NULL
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
                        TG_TABLE_NAME, TG_TABLE_NAME || '_tenant_id_fkey'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_TABLE_NAME || '_tenant_id_fkey',
                  TABLE = TG_TABLE_NAME, SCHEMA = 'public',
                  DETAIL = format('Key (tenant_id)=(%s) is not present in table "tenants".', missing);
    END IF;
    IF current_setting('transaction_isolation') = 'read committed' THEN
        -- Waits for a user delete in progress; the probe below takes its snapshot after it.
        PERFORM pg_advisory_xact_lock_shared(7957911069121085796);
        SELECT n.recipient_id INTO missing
        FROM (SELECT DISTINCT recipient_id FROM new_rows) n
        WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = n.recipient_id)
        LIMIT 1;
    ELSE
        -- The transaction's snapshot would not see a delete committed while this waited: lock the rows.
        SELECT n.recipient_id INTO missing
        FROM (SELECT DISTINCT recipient_id FROM new_rows) n
             LEFT JOIN LATERAL (SELECT true AS found FROM users u WHERE u.id = n.recipient_id FOR KEY SHARE) u
             ON true
        WHERE u.found IS NULL
        LIMIT 1;
    END IF;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
                        TG_TABLE_NAME, TG_TABLE_NAME || '_recipient_id_fkey'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_TABLE_NAME || '_recipient_id_fkey',
                  TABLE = TG_TABLE_NAME, SCHEMA = 'public',
                  DETAIL = format('Key (recipient_id)=(%s) is not present in table "users".', missing);
    END IF;
    RETURN NULL;
END;
$$;

-- 0047's guard, with the exclusive lock taken for a user before its rows are looked for.
CREATE OR REPLACE FUNCTION inbox_keep_referenced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    col text := CASE WHEN TG_TABLE_NAME = 'tenants' THEN 'tenant_id' ELSE 'recipient_id' END;
    tab text;
    found boolean;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'delete or change the id of a row of % in a READ COMMITTED transaction', TG_TABLE_NAME
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF TG_TABLE_NAME = 'users' THEN
        -- Waits for every inbox-inserting transaction in progress (they hold it shared); the queries
        -- below take their snapshots after it and see those transactions' rows.
        PERFORM pg_advisory_xact_lock(7957911069121085796);
    END IF;
    FOREACH tab IN ARRAY ARRAY['notifications', 'deliveries'] LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE %I = $1)', tab, col) INTO found USING OLD.id;
        IF found THEN
            RAISE EXCEPTION 'update or delete on table "%" violates foreign key constraint "%" on table "%"',
                            TG_TABLE_NAME, tab || '_' || col || '_fkey', tab
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = tab || '_' || col || '_fkey', TABLE = tab,
                      SCHEMA = 'public',
                      DETAIL = format('Key (id)=(%s) is still referenced from table "%s".', OLD.id, tab);
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;
