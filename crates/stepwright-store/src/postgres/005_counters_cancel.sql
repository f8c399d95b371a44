-- Per-run counters for the journal and events, taken and bumped by the one UPDATE that
-- locks the run's row on every write: a writer that waited for the lock reads the counter
-- as the previous writer left it (READ COMMITTED re-reads an updated row), where a
-- `MAX(seq) + 1` in the locking statement would read its own, older snapshot and collide.
ALTER TABLE stepwright_runs ADD COLUMN journal_next BIGINT NOT NULL DEFAULT 0;
ALTER TABLE stepwright_runs ADD COLUMN event_next BIGINT NOT NULL DEFAULT 0;
UPDATE stepwright_runs r SET
    journal_next = (SELECT COALESCE(MAX(seq) + 1, 0) FROM stepwright_journal j WHERE j.run_id = r.id),
    event_next = (SELECT COALESCE(MAX(seq) + 1, 0) FROM stepwright_events e WHERE e.run_id = r.id);

-- A cancel asked for while a live process executes the run: that process sees it and stops.
ALTER TABLE stepwright_runs ADD COLUMN cancel_request JSONB;
CREATE INDEX stepwright_runs_cancel_requested ON stepwright_runs (id) WHERE cancel_request IS NOT NULL;
