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
