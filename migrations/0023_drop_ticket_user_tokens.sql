-- The customer ticket API takes the one end-user token (obu_, user_tokens) since the
-- tokens were unified; the ticket-only token table that 0012 created is no longer used.
-- (0012 stays as it landed: applied migrations are never edited.)
DROP TABLE IF EXISTS ticket_user_tokens;
