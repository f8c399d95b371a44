-- A run's tags (`env:prod`, `customer-42`): a JSON array of strings, NULL when it has none, so
-- runs without tags cost nothing. A listing's `tag` filter reads them with json_each.
ALTER TABLE runs ADD COLUMN tags TEXT;
