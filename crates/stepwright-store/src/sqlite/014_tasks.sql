-- Step tasks: what a `worker:` tool hands to a step worker. A row is written with the
-- `dispatched` journal entry that carries it (same transaction); workers claim it under a
-- lease whose token grows on every claim. `tenant` is '' without tenants.
CREATE TABLE tasks (
    id            TEXT PRIMARY KEY,
    run_id        BLOB NOT NULL,
    path          TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    tenant        TEXT NOT NULL,
    workflow      TEXT NOT NULL,
    queue         TEXT NOT NULL,
    handler       TEXT NOT NULL,
    spec          TEXT NOT NULL,
    state         TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    worker        TEXT,
    lease_token   INTEGER NOT NULL DEFAULT 0,
    lease_expires INTEGER,
    claimed_at    INTEGER,
    details       TEXT,
    output        TEXT,
    error         TEXT,
    finished_at   INTEGER
) WITHOUT ROWID;
CREATE INDEX tasks_claimable ON tasks (tenant, queue, state, created_at);
CREATE INDEX tasks_by_run ON tasks (run_id);
