-- Flow control: a run's priority among runs waiting to be claimed, and its concurrency
-- group (at most `concurrency_limit` runs with one key running or suspended at a time).
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN concurrency_key TEXT;
ALTER TABLE runs ADD COLUMN concurrency_limit INTEGER;
CREATE INDEX runs_by_concurrency_key ON runs (concurrency_key, status) WHERE concurrency_key IS NOT NULL;
