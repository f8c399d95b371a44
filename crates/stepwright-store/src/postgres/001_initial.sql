CREATE OR REPLACE FUNCTION stepwright_now_us() RETURNS BIGINT
    LANGUAGE sql VOLATILE AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::BIGINT $$;

CREATE TABLE stepwright_runs (
    id              UUID PRIMARY KEY,
    workflow        TEXT NOT NULL,
    version         TEXT NOT NULL,
    definition_hash BYTEA NOT NULL,
    input           JSONB NOT NULL,
    caller          JSONB NOT NULL,
    status          TEXT NOT NULL,
    output          JSONB,
    error           JSONB,
    parent_run      UUID,
    parent_path     TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    wake_at         BIGINT,
    lease_owner     TEXT,
    lease_token     BIGINT NOT NULL DEFAULT 0,
    lease_expires   BIGINT
);
CREATE INDEX stepwright_runs_ready ON stepwright_runs (created_at)
    WHERE status IN ('pending', 'running', 'suspended');
CREATE INDEX stepwright_runs_by_workflow ON stepwright_runs (workflow, created_at);

CREATE TABLE stepwright_journal (
    run_id UUID NOT NULL,
    seq    BIGINT NOT NULL,
    path   TEXT NOT NULL,
    at     BIGINT NOT NULL,
    record JSONB NOT NULL,
    blob   BYTEA,
    value  BYTEA,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX stepwright_journal_by_blob ON stepwright_journal (blob) WHERE blob IS NOT NULL;

CREATE TABLE stepwright_blobs (
    hash  BYTEA PRIMARY KEY,
    codec SMALLINT NOT NULL,
    data  BYTEA NOT NULL
);

CREATE TABLE stepwright_events (
    run_id  UUID NOT NULL,
    seq     BIGINT NOT NULL,
    path    TEXT NOT NULL,
    at      BIGINT NOT NULL,
    tenant  TEXT,
    user_id TEXT,
    kind    TEXT NOT NULL,
    data    JSONB NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE stepwright_interrupts (
    run_id   UUID NOT NULL,
    id       TEXT NOT NULL,
    path     TEXT NOT NULL,
    resolved BOOLEAN NOT NULL,
    PRIMARY KEY (run_id, id)
);
