-- Schedules: what starts a workflow when (`spec`, JSON the scheduler reads) and the
-- scheduler's state for it (`state`), with `due_at` (when it next has work) indexed for the
-- scheduler's poll and `version` for its compare-and-set. `tenant` is '' without tenants.
CREATE TABLE schedules (
    tenant          TEXT NOT NULL,
    name            TEXT NOT NULL,
    workflow        TEXT NOT NULL,
    definition_hash BLOB NOT NULL,
    spec            TEXT NOT NULL,
    state           TEXT NOT NULL,
    paused          INTEGER NOT NULL,
    due_at          INTEGER,
    version         INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE INDEX schedules_due ON schedules (due_at) WHERE due_at IS NOT NULL;

-- Every tick of a schedule, once: the run it started, or why it started none.
CREATE TABLE schedule_ticks (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    at          INTEGER NOT NULL,
    local       TEXT NOT NULL,
    run_id      BLOB,
    reason      TEXT,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name, at)
);
