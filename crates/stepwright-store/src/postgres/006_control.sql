-- The files a definition calls, when they came with it (a workflow registered over HTTP).
ALTER TABLE stepwright_definitions ADD COLUMN files TEXT;

-- Workflows registered by name: each new source of a name is its next version.
CREATE TABLE stepwright_registered_workflows (
    namespace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    hash          BYTEA NOT NULL,
    source        TEXT NOT NULL,
    files         TEXT,
    registered_at BIGINT NOT NULL,
    registered_by TEXT,
    PRIMARY KEY (namespace, name, version)
);

-- API keys: only a hash of the secret is kept.
CREATE TABLE stepwright_api_keys (
    id           TEXT PRIMARY KEY,
    secret_hash  BYTEA NOT NULL UNIQUE,
    namespace    TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    roles        TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT,
    last_used_at BIGINT
);

-- The first run an idempotency key started, per namespace.
CREATE TABLE stepwright_idempotency_keys (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    run_id     UUID NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, key)
);

-- Who decided, cancelled, or changed a key, and when.
CREATE TABLE stepwright_audit_log (
    seq       BIGSERIAL PRIMARY KEY,
    namespace TEXT NOT NULL,
    at        BIGINT NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    subject   TEXT NOT NULL,
    detail    TEXT NOT NULL
);
CREATE INDEX stepwright_audit_log_by_namespace ON stepwright_audit_log (namespace, seq);

-- Webhooks and their durable outbox: a delivery is a row before it is sent, so a crash
-- loses none; its attempts are kept with it (the redelivery log).
CREATE TABLE stepwright_webhooks (
    id         TEXT PRIMARY KEY,
    namespace  TEXT NOT NULL,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    secret     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE TABLE stepwright_webhook_deliveries (
    id              BIGSERIAL PRIMARY KEY,
    webhook_id      TEXT NOT NULL,
    namespace       TEXT NOT NULL,
    event_key       TEXT NOT NULL,
    event           TEXT NOT NULL,
    body            TEXT NOT NULL,
    state           TEXT NOT NULL,
    attempts        TEXT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    lease_until     BIGINT,
    created_at      BIGINT NOT NULL,
    UNIQUE (webhook_id, event_key)
);
CREATE INDEX stepwright_webhook_deliveries_due ON stepwright_webhook_deliveries (state, next_attempt_at);
-- How far each namespace's changes have been turned into deliveries.
CREATE TABLE stepwright_webhook_watermarks (
    namespace     TEXT PRIMARY KEY,
    updated_since BIGINT NOT NULL
);
