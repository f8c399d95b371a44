-- Step tasks: what a `worker:` tool hands to a step worker. A row is written with the
-- `dispatched` journal entry that carries it (same statement); workers claim it with
-- `FOR UPDATE SKIP LOCKED` under a lease whose token grows on every claim, on the
-- database's clock. `tenant` is '' without tenants.
CREATE TABLE stepwright_tasks (
    id            TEXT PRIMARY KEY,
    run_id        UUID NOT NULL,
    path          TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    tenant        TEXT NOT NULL,
    workflow      TEXT NOT NULL,
    queue         TEXT NOT NULL,
    handler       TEXT NOT NULL,
    spec          JSONB NOT NULL,
    state         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    worker        TEXT,
    lease_token   BIGINT NOT NULL DEFAULT 0,
    lease_expires BIGINT,
    claimed_at    BIGINT,
    details       JSONB,
    output        JSONB,
    error         JSONB,
    finished_at   BIGINT
);
CREATE INDEX stepwright_tasks_claimable ON stepwright_tasks (tenant, queue, created_at) WHERE state = 'pending';
CREATE INDEX stepwright_tasks_by_run ON stepwright_tasks (run_id);
