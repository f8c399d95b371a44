-- A trigger is a schedule driven by events: `on_event` is the name or pattern it reads.
ALTER TABLE stepwright_schedules ADD COLUMN on_event TEXT;
CREATE INDEX stepwright_schedules_on_event ON stepwright_schedules (tenant) WHERE on_event IS NOT NULL;

-- The event log: stored before anything reads it; `seq` orders it. An idempotency key names
-- one event per tenant. `tenant` is '' without tenants.
CREATE TABLE stepwright_event_log (
    seq             BIGSERIAL PRIMARY KEY,
    tenant          TEXT NOT NULL,
    name            TEXT NOT NULL,
    payload         JSONB NOT NULL,
    idempotency_key TEXT,
    received_at     BIGINT NOT NULL
);
CREATE INDEX stepwright_event_log_by_name ON stepwright_event_log (tenant, name, seq);
CREATE UNIQUE INDEX stepwright_event_log_by_key ON stepwright_event_log (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Runs whose `wait` watches an event name: the next such event stored wakes them (and
-- removes the rows; a run still waiting registers again).
CREATE TABLE stepwright_event_watches (
    tenant TEXT NOT NULL,
    name   TEXT NOT NULL,
    run_id UUID NOT NULL,
    PRIMARY KEY (tenant, name, run_id)
);

-- What each trigger did with each event it read, once: the run it started, or why none.
CREATE TABLE stepwright_event_fires (
    tenant      TEXT NOT NULL,
    trigger     TEXT NOT NULL,
    event_seq   BIGINT NOT NULL,
    run_id      UUID,
    reason      TEXT,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, trigger, event_seq)
);
CREATE INDEX stepwright_event_fires_by_event ON stepwright_event_fires (tenant, event_seq);
