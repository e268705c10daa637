-- 0055: fewer index entries and no row-level key check per broadcast recipient (issue 27).
--
-- A 5,000-member page of an inbox + email broadcast spent 13 % of its backend's CPU firing the
-- deferred foreign key deliveries.notification_id -> notifications at commit (one RI query per
-- delivery, 10,000 a page, and one Heap/LOCK WAL record per inbox row for its FOR KEY SHARE), and
-- 31 % inserting its 20 index entries per recipient (perf of the page's backend, docs/performance.md,
-- "Broadcast, part 4").  What each change below keeps:
--
-- * deliveries_notification_id_fkey goes.  Only the fan-out writes deliveries and inbox rows, in one
--   transaction, and nothing deletes an inbox row: a delivery names the inbox row its own transaction
--   writes (a pre-made id) or none.  That row can only be missing when another fan-out wrote the
--   recipient's inbox row between the page's two statements, and that fan-out wrote the recipient's
--   deliveries first: the deliveries' unique key makes one of the two wait for the other and fail
--   (notification_fanout_chunk no longer skips conflicts); the fan-out also refuses to commit a page
--   whose inbox insert skipped a row its deliveries name (opsboard.notifications.fanout).  Readers
--   that need the row join it by id, as before.
-- * deliveries' unique key becomes (event_id, recipient_id, channel), replacing
--   (recipient_id, event_id, channel) and deliveries_event_idx (event_id): the one index answers
--   "the deliveries of an event" (its prefix), the fan-out's probe of a recipient's deliveries of
--   an event and the arbiter of the previous release's ON CONFLICT (recipient_id, event_id, channel)
--   (an arbiter is inferred from the set of columns, in any order).  A broadcast's entries go to
--   the right end of its event's range (user ids ascending, the event id new) instead of next to
--   each recipient's older deliveries all over the index.  Nothing reads deliveries by recipient
--   alone except the guard on deleting a user (users_keep_inbox_delete), which now scans
--   (opsboard deletes no user).
-- * notifications' unique key becomes (event_id, recipient_id) for the same reasons (the fan-out's
--   probes give both columns; no query reads inbox rows by recipient through it: the inbox reads
--   use notifications_recipient_seq_idx and notifications_unread_idx).
-- * notifications_seq_key goes: seq is GENERATED ALWAYS AS IDENTITY (one sequence, no caller can
--   set it), and every read of seq is per recipient (notifications_recipient_seq_idx).  Its entries
--   were all appended at one right-most leaf, by every fan-out.
--
-- Per recipient of an inbox + email broadcast: 4 index entries less here (a fifth, the deliver job's
-- idempotency key, goes with notification_fanout_chunk), two RI checks and a Heap/LOCK record less.

ALTER TABLE deliveries DROP CONSTRAINT deliveries_notification_id_fkey;

ALTER TABLE deliveries ADD CONSTRAINT deliveries_event_recipient_channel_key
    UNIQUE (event_id, recipient_id, channel);
ALTER TABLE deliveries DROP CONSTRAINT deliveries_recipient_id_event_id_channel_key;
DROP INDEX deliveries_event_idx;

ALTER TABLE notifications ADD CONSTRAINT notifications_event_recipient_key UNIQUE (event_id, recipient_id);
ALTER TABLE notifications DROP CONSTRAINT notifications_recipient_id_event_id_key;
ALTER TABLE notifications DROP CONSTRAINT notifications_seq_key;
