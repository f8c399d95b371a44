-- A trigger is a schedule driven by events: `on_event` is the name or pattern it reads.
ALTER TABLE schedules ADD COLUMN on_event TEXT;
CREATE INDEX schedules_on_event ON schedules (tenant) WHERE on_event IS NOT NULL;

-- The event log: stored before anything reads it; `seq` orders it. An idempotency key names
-- one event per tenant. `tenant` is '' without tenants.
CREATE TABLE event_log (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT NOT NULL,
    name            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    idempotency_key TEXT,
    received_at     INTEGER NOT NULL
);
CREATE INDEX event_log_by_name ON event_log (tenant, name, seq);
CREATE UNIQUE INDEX event_log_by_key ON event_log (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Runs whose `wait` watches an event name: the next such event stored wakes them (and
-- removes the rows; a run still waiting registers again).
CREATE TABLE event_watches (
    tenant TEXT NOT NULL,
    name   TEXT NOT NULL,
    run_id BLOB NOT NULL,
    PRIMARY KEY (tenant, name, run_id)
) WITHOUT ROWID;

-- What each trigger did with each event it read, once: the run it started, or why none.
CREATE TABLE event_fires (
    tenant      TEXT NOT NULL,
    trigger     TEXT NOT NULL,
    event_seq   INTEGER NOT NULL,
    run_id      BLOB,
    reason      TEXT,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, trigger, event_seq)
) WITHOUT ROWID;
CREATE INDEX event_fires_by_event ON event_fires (tenant, event_seq);
