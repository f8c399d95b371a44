-- Runs: one row per run. Ids and hashes are stored as bytes (16 and 32).
CREATE TABLE runs (
    id              BLOB PRIMARY KEY,
    workflow        TEXT NOT NULL,
    version         TEXT NOT NULL,
    definition_hash BLOB NOT NULL,
    input           TEXT NOT NULL,
    caller          TEXT NOT NULL,
    status          TEXT NOT NULL,
    output          TEXT,
    error           TEXT,
    parent_run      BLOB,
    parent_path     TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    wake_at         INTEGER,
    next_seq        INTEGER NOT NULL,
    next_event      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX runs_by_status ON runs (status, wake_at);
CREATE INDEX runs_by_workflow ON runs (workflow, created_at);

-- The journal: append-only, ordered per run. `blob` names the blob an entry references
-- (a completed output, a stored artifact), so unreferenced blobs can be found.
CREATE TABLE journal (
    run_id BLOB NOT NULL,
    seq    INTEGER NOT NULL,
    path   TEXT NOT NULL,
    at     INTEGER NOT NULL,
    record TEXT NOT NULL,
    blob   BLOB,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE INDEX journal_by_blob ON journal (blob) WHERE blob IS NOT NULL;

-- Content-addressed values, stored once. codec 0 = JSON, 1 = lz4-compressed JSON.
CREATE TABLE blobs (
    hash  BLOB PRIMARY KEY,
    codec INTEGER NOT NULL,
    data  BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE events (
    run_id  BLOB NOT NULL,
    seq     INTEGER NOT NULL,
    path    TEXT NOT NULL,
    at      INTEGER NOT NULL,
    tenant  TEXT,
    user_id TEXT,
    kind    TEXT NOT NULL,
    data    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- Open interrupts, for compare-and-set resolution.
CREATE TABLE interrupts (
    run_id   BLOB NOT NULL,
    id       TEXT NOT NULL,
    path     TEXT NOT NULL,
    resolved INTEGER NOT NULL,
    PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
