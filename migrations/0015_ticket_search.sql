-- Ticket search matches a normalised subject (issue 14 follow-up): Arabic
-- yeh/kaf, Persian/Arabic-Indic digits, ZWNJ and diacritics typed in any form
-- find the same ticket.  opsboard_search_normalize comes from 0014; the query
-- term is normalised the same way in opsboard.tickets.service.list_queue.
ALTER TABLE tickets
    ADD COLUMN subject_search text GENERATED ALWAYS AS (opsboard_search_normalize(subject)) STORED;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX tickets_subject_search_trgm ON tickets USING gin (subject_search gin_trgm_ops);
    END IF;
END
$$;
