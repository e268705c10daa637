-- Persian-first dashboard: each user's language, calendar and time zone, and a
-- normalised search column for job attempt details.

-- The dashboard's language ('en' or 'fa'; NULL = from the browser's
-- Accept-Language), calendar and time zone (NULL = the language's default:
-- Asia/Tehran for fa, UTC for en).
ALTER TABLE users
    ADD COLUMN locale    text CHECK (locale IN ('en', 'fa')),
    ADD COLUMN calendar  text CHECK (calendar IN ('gregorian', 'jalali')),
    ADD COLUMN time_zone text CHECK (time_zone ~ '^[A-Za-z0-9_+/-]{1,64}$');

-- The search form of a text: the same mapping as opsboard.persian.normalize_search
-- (Arabic yeh/kaf -> Persian, heh with yeh and teh marbuta -> heh, Persian and
-- Arabic-Indic digits -> Latin; ZWNJ, ZWJ, zero-width space, soft hyphen, tatweel
-- and diacritics removed).  tests/unit/test_persian.py and
-- tests/integration/test_persian_web.py check both over one table.
CREATE FUNCTION opsboard_search_normalize(t text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT regexp_replace(
        translate(t, 'يىكۀة۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩', 'ییکهه01234567890123456789'),
        '[' || chr(8204) || chr(8205) || chr(8203) || chr(173) || chr(1600)
            || chr(1611) || '-' || chr(1631) || chr(1648) || ']', '', 'g')
$$;

-- Job search matches attempt details through this column (the query is
-- normalised the same way in opsboard.dashboard.list_jobs).
ALTER TABLE job_attempts
    ADD COLUMN detail_search text GENERATED ALWAYS AS (opsboard_search_normalize(detail)) STORED;

-- The old index on the raw detail is no longer used by the search.
DROP INDEX IF EXISTS job_attempts_detail_trgm;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX job_attempts_detail_search_trgm ON job_attempts USING gin (detail_search gin_trgm_ops)
            WHERE detail_search IS NOT NULL;
    END IF;
END
$$;
