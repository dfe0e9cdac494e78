-- Idempotency-Keys of the task API (IETF Idempotency-Key semantics), scoped
-- per API token. A key is 'processing' while its first request runs, then
-- 'complete' with the answer that is replayed for a retry of the request.
CREATE TABLE idempotency_keys (
    scope       TEXT    NOT NULL,   -- hash of the bearer token
    key         TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,   -- hash of the canonical request
    state       TEXT    NOT NULL,   -- processing, complete
    status      INTEGER NOT NULL DEFAULT 0,
    response    BLOB,
    task_id     TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,   -- unix ms
    expires_at  INTEGER NOT NULL,   -- unix ms
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- Tasks: the request itself travels as an event of the reserved source
-- "_task" (the outbox, the stream, retries and records are the same as for
-- webhooks); this table says who may read it.
CREATE TABLE tasks (
    id         TEXT    PRIMARY KEY,
    scope      TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
