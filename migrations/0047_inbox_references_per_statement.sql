-- 0047: the tenant and recipient of inbox rows and deliveries checked once per
-- inserting statement instead of once per row (issue 27: the broadcast).
--
-- notifications.tenant_id -> tenants, notifications.recipient_id -> users,
-- deliveries.tenant_id -> tenants and deliveries.recipient_id -> users each ran
-- one RI trigger per inserted row: 30,000 of a 5,000-member page's 40,000 key
-- checks (inbox + email: one inbox row and two deliveries per recipient), 104 ms
-- of its 452 ms (EXPLAIN (ANALYZE, BUFFERS, WAL) of notification_fanout_chunk
-- and notification_inbox_insert, docs/performance.md).  What they guaranteed is
-- kept, with the same SQLSTATE (23503, foreign_key_violation), constraint names
-- and message shapes as PostgreSQL's, as 0024 did for jobs.tenant_id:
--   * a row's tenant and recipient exist when it is inserted: checked by a
--     statement-level AFTER INSERT trigger over its transition table, taking
--     FOR KEY SHARE on the distinct tenants and users (as the RI check did), so
--     that a concurrent delete of one of them waits for the inserting
--     transaction, then finds its rows;
--   * a tenant or user that has inbox rows or deliveries cannot be deleted,
--     truncated or given another id;
--   * a row's tenant and recipient never change (stricter than the keys, which
--     allowed a move; nothing moves them).
--
-- And notifications_event_idx goes: no query of the product reads inbox rows by
-- event alone (deliveries_event_idx answers "what did event X produce"), and it
-- made the broadcast quadratic: notification_fanout_chunk's `existing` (the
-- page's recipients that already have a row of the event) read it, i.e. every
-- row of the event written by the pages before (5,000 x (k - 1) rows on page k);
-- without it, one probe per recipient of notifications_recipient_id_event_id_key.
-- One index entry less per inbox row.
--
-- deliveries.notification_id -> notifications stays a key (deferred: its inbox
-- row is written later in the same transaction; 0039).
-- The delete guards read with their statement's snapshot, which sees every
-- committed row only under READ COMMITTED; tenants and users are therefore
-- deleted only in a READ COMMITTED transaction (the default; opsboard deletes
-- neither).

ALTER TABLE notifications DROP CONSTRAINT notifications_tenant_id_fkey;
ALTER TABLE notifications DROP CONSTRAINT notifications_recipient_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_tenant_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_recipient_id_fkey;
DROP INDEX notifications_event_idx;

-- One index probe and lock per distinct tenant and per distinct recipient of
-- the statement.  TG_TABLE_NAME names the constraint the error reports.
CREATE FUNCTION inbox_rows_check_references() RETURNS trigger LANGUAGE plpgsql AS $$
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
    SELECT n.recipient_id INTO missing
    FROM (SELECT DISTINCT recipient_id FROM new_rows) n
         LEFT JOIN LATERAL (SELECT true AS found FROM users u WHERE u.id = n.recipient_id FOR KEY SHARE) u ON true
    WHERE u.found IS NULL
    LIMIT 1;
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
CREATE TRIGGER notifications_check_references
    AFTER INSERT ON notifications REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_rows_check_references();
CREATE TRIGGER deliveries_check_references
    AFTER INSERT ON deliveries REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_rows_check_references();

-- Only fired by an UPDATE that sets tenant_id or recipient_id (marking read,
-- archiving, a delivery's status set neither): no cost to them.
CREATE FUNCTION inbox_rows_references_are_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    col text := CASE WHEN OLD.tenant_id IS DISTINCT FROM NEW.tenant_id THEN 'tenant_id' ELSE 'recipient_id' END;
BEGIN
    RAISE EXCEPTION 'the % of a row of % cannot be changed (%)', col, TG_TABLE_NAME, OLD.id
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_TABLE_NAME || '_' || col || '_fkey',
              TABLE = TG_TABLE_NAME, SCHEMA = 'public';
END;
$$;
CREATE TRIGGER notifications_references_are_fixed
    BEFORE UPDATE OF tenant_id, recipient_id ON notifications FOR EACH ROW
    WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id OR OLD.recipient_id IS DISTINCT FROM NEW.recipient_id)
    EXECUTE FUNCTION inbox_rows_references_are_fixed();
CREATE TRIGGER deliveries_references_are_fixed
    BEFORE UPDATE OF tenant_id, recipient_id ON deliveries FOR EACH ROW
    WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id OR OLD.recipient_id IS DISTINCT FROM NEW.recipient_id)
    EXECUTE FUNCTION inbox_rows_references_are_fixed();

-- Row-level, fired after the referenced row is locked: an insert that holds its
-- FOR KEY SHARE lock has committed by then, and its rows are seen.  A user's
-- rows are found by the (recipient_id, ...) indexes; a tenant's by a scan, as
-- the RI check on the keys did (no index on tenant_id; tenants are not deleted).
CREATE FUNCTION inbox_keep_referenced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    col text := CASE WHEN TG_TABLE_NAME = 'tenants' THEN 'tenant_id' ELSE 'recipient_id' END;
    tab text;
    found boolean;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'delete or change the id of a row of % in a READ COMMITTED transaction', TG_TABLE_NAME
            USING ERRCODE = 'object_not_in_prerequisite_state';
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
CREATE TRIGGER tenants_keep_inbox_delete
    AFTER DELETE ON tenants FOR EACH ROW EXECUTE FUNCTION inbox_keep_referenced();
CREATE TRIGGER tenants_keep_inbox_update
    AFTER UPDATE OF id ON tenants FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION inbox_keep_referenced();
CREATE TRIGGER users_keep_inbox_delete
    AFTER DELETE ON users FOR EACH ROW EXECUTE FUNCTION inbox_keep_referenced();
CREATE TRIGGER users_keep_inbox_update
    AFTER UPDATE OF id ON users FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION inbox_keep_referenced();

-- AFTER: rows truncated by the same statement (TRUNCATE notifications, deliveries, users ...) are gone by then.
CREATE FUNCTION inbox_keep_referenced_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    col text := CASE WHEN TG_TABLE_NAME = 'tenants' THEN 'tenant_id' ELSE 'recipient_id' END;
BEGIN
    IF EXISTS (SELECT 1 FROM deliveries) OR EXISTS (SELECT 1 FROM notifications) THEN
        RAISE EXCEPTION 'cannot truncate table "%": tables "notifications" and "deliveries" reference it (truncate them too)',
                        TG_TABLE_NAME
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'notifications_' || col || '_fkey',
                  TABLE = 'notifications', SCHEMA = 'public';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER tenants_keep_inbox_truncate
    AFTER TRUNCATE ON tenants FOR EACH STATEMENT EXECUTE FUNCTION inbox_keep_referenced_truncate();
CREATE TRIGGER users_keep_inbox_truncate
    AFTER TRUNCATE ON users FOR EACH STATEMENT EXECUTE FUNCTION inbox_keep_referenced_truncate();
