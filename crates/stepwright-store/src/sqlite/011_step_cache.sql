-- The step cache: outputs of pure steps marked `cache`, by cache key (a hash of the
-- tenant, workflow, step, step identity and input), so that a later run in any process is
-- served them. `output` is the JSON text as the step produced it.
CREATE TABLE step_cache (
    key        BLOB PRIMARY KEY,
    output     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
