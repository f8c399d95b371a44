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

-- Appending an event in one round trip: the tenant's lock (held to the commit, so a
-- tenant's events commit in sequence order), the idempotency check, the row, the tenant's
-- triggers made due, the watching runs woken.
CREATE FUNCTION stepwright_append_event(p_tenant TEXT, p_name TEXT, p_payload JSONB, p_key TEXT, p_at BIGINT)
RETURNS TABLE (out_seq BIGINT, out_tenant TEXT, out_name TEXT, out_payload JSONB, out_key TEXT,
               out_received_at BIGINT, out_created BOOLEAN, out_woken BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_seq BIGINT;
    v_woken BIGINT;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('stepwright.event_log:' || p_tenant, 7));
    IF p_key IS NOT NULL THEN
        RETURN QUERY SELECT e.seq, e.tenant, e.name, e.payload, e.idempotency_key, e.received_at, FALSE, 0::BIGINT
            FROM stepwright_event_log e WHERE e.tenant = p_tenant AND e.idempotency_key = p_key;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    INSERT INTO stepwright_event_log (tenant, name, payload, idempotency_key, received_at)
        VALUES (p_tenant, p_name, p_payload, p_key, p_at) RETURNING seq INTO v_seq;
    UPDATE stepwright_schedules s SET due_at = p_at
        WHERE s.tenant = p_tenant AND s.on_event IS NOT NULL AND (s.due_at IS NULL OR s.due_at > p_at);
    WITH watching AS (
        DELETE FROM stepwright_event_watches w WHERE w.tenant = p_tenant AND w.name = p_name RETURNING w.run_id
    )
    UPDATE stepwright_runs r SET wake_at = stepwright_now_us()
        WHERE r.status = 'suspended' AND r.wake_at > stepwright_now_us() AND r.id IN (SELECT run_id FROM watching);
    GET DIAGNOSTICS v_woken = ROW_COUNT;
    RETURN QUERY SELECT v_seq, p_tenant, p_name, p_payload, p_key, p_at, TRUE, v_woken;
END
$$;
