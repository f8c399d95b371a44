-- A cancel asked for while a live process executes the run: that process sees it and stops.
ALTER TABLE runs ADD COLUMN cancel_request TEXT;
CREATE INDEX runs_cancel_requested ON runs (id) WHERE cancel_request IS NOT NULL;
