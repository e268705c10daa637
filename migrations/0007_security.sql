-- Security: server-side sessions, the outcome of an audited action.

-- A signed-in browser session.  The signed cookie carries a random id whose
-- SHA-256 is stored here; the user loader refuses a cookie whose row is gone,
-- so signing out, changing the password, deactivating the user or "sign out
-- everywhere" end a session at once, even for a copy of the cookie.
CREATE TABLE user_sessions (
    id_hash    bytea PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX user_sessions_user_idx ON user_sessions (user_id);

-- 'done': the action happened; 'denied': a user without the permission tried
-- it (recorded without payload, at most once a minute per user and action).
-- A constant default: no table rewrite, and the append-only trigger (UPDATE)
-- does not fire.
ALTER TABLE audit_log ADD COLUMN outcome text NOT NULL DEFAULT 'done'
    CHECK (outcome IN ('done', 'denied'));
-- The rate limit of denied rows looks up a user's recent denials.
CREATE INDEX audit_log_denied_idx ON audit_log (actor_id, action, at DESC) WHERE outcome = 'denied';
