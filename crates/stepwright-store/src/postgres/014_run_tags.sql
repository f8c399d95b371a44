-- A run's tags (`env:prod`, `customer-42`): a JSON array of strings, NULL when it has none. The
-- index holds only tagged runs, so creating an untagged run (the engine's hot path) does not
-- touch it; a listing's `tag` filter (`tags @> '["x"]'`) implies `tags IS NOT NULL` and uses it.
ALTER TABLE stepwright_runs ADD COLUMN tags JSONB;
CREATE INDEX stepwright_runs_by_tag ON stepwright_runs USING GIN (tags jsonb_path_ops) WHERE tags IS NOT NULL;
