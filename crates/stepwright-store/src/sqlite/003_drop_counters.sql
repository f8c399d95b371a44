-- Sequence numbers now come from the journal itself (MAX(seq) + 1, read once and cached
-- while no other connection writes), so the per-run counters are gone.
ALTER TABLE runs DROP COLUMN next_seq;
ALTER TABLE runs DROP COLUMN next_event;
