-- Schedules: what starts a workflow when (`spec`, JSON the scheduler reads) and the
-- scheduler's state for it (`state`), with `due_at` (when it next has work) indexed for the
-- scheduler's poll and `version` for its compare-and-set. `tenant` is '' without tenants.
CREATE TABLE stepwright_schedules (
    tenant          TEXT NOT NULL,
    name            TEXT NOT NULL,
    workflow        TEXT NOT NULL,
    definition_hash BYTEA NOT NULL,
    spec            JSONB NOT NULL,
    state           JSONB NOT NULL,
    paused          BOOLEAN NOT NULL,
    due_at          BIGINT,
    version         BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE INDEX stepwright_schedules_due ON stepwright_schedules (due_at) WHERE due_at IS NOT NULL;

-- Every tick of a schedule, once: the run it started, or why it started none.
CREATE TABLE stepwright_schedule_ticks (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    at          BIGINT NOT NULL,
    local       TEXT NOT NULL,
    run_id      UUID,
    reason      TEXT,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, name, at)
);
