-- The step cache: outputs of pure steps marked `cache`, by cache key (a hash of the
-- tenant, workflow, step, step identity and input), so that a later run on any worker is
-- served them. `output` is the JSON text as the step produced it (text, not jsonb, so
-- that it comes back exactly).
CREATE TABLE stepwright_step_cache (
    key        BYTEA PRIMARY KEY,
    output     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
