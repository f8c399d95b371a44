-- Flow control: a run's priority among runs waiting to be claimed, and its concurrency
-- group (at most `concurrency_limit` runs with one key running or suspended at a time).
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN concurrency_key TEXT;
ALTER TABLE runs ADD COLUMN concurrency_limit INTEGER;
CREATE INDEX runs_by_concurrency_key ON runs (concurrency_key, status) WHERE concurrency_key IS NOT NULL;

-- Quotas shared by every process on the file (a model provider's requests or tokens per
-- minute): the current window of each and what it used.
CREATE TABLE quotas (
    name         TEXT PRIMARY KEY,
    window_start INTEGER NOT NULL,
    used         INTEGER NOT NULL
);
