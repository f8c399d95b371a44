-- Who works on an experiment and until when (decision 90): a server holds the experiments it
-- works on and renews the hold; another takes up one whose hold lapsed or whose process died.
ALTER TABLE experiments ADD COLUMN holder TEXT;
ALTER TABLE experiments ADD COLUMN held_until INTEGER;
