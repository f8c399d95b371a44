-- The files a definition calls, when they came with it (a workflow registered over HTTP).
ALTER TABLE definitions ADD COLUMN files TEXT;

-- Workflows registered by name: each new source of a name is its next version.
CREATE TABLE registered_workflows (
    namespace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    hash          BLOB NOT NULL,
    source        TEXT NOT NULL,
    files         TEXT,
    registered_at INTEGER NOT NULL,
    registered_by TEXT,
    PRIMARY KEY (namespace, name, version)
) WITHOUT ROWID;

-- API keys: only a hash of the secret is kept.
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    secret_hash  BLOB NOT NULL UNIQUE,
    namespace    TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    roles        TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    revoked_at   INTEGER,
    last_used_at INTEGER
) WITHOUT ROWID;

-- The first run an idempotency key started, per namespace.
CREATE TABLE idempotency_keys (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    run_id     BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;

-- Who decided, cancelled, or changed a key, and when.
CREATE TABLE audit_log (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    at        INTEGER NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    subject   TEXT NOT NULL,
    detail    TEXT NOT NULL
);
CREATE INDEX audit_log_by_namespace ON audit_log (namespace, seq);

-- Webhooks and their durable outbox: a delivery is a row before it is sent, so a crash
-- loses none; its attempts are kept with it (the redelivery log).
CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY,
    namespace  TEXT NOT NULL,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    secret     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    deleted_at INTEGER
) WITHOUT ROWID;
CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id      TEXT NOT NULL,
    namespace       TEXT NOT NULL,
    event_key       TEXT NOT NULL,
    event           TEXT NOT NULL,
    body            TEXT NOT NULL,
    state           TEXT NOT NULL,
    attempts        TEXT NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    lease_until     INTEGER,
    created_at      INTEGER NOT NULL,
    UNIQUE (webhook_id, event_key)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
-- How far each namespace's changes have been turned into deliveries.
CREATE TABLE webhook_watermarks (
    namespace     TEXT PRIMARY KEY,
    updated_since INTEGER NOT NULL
) WITHOUT ROWID;
