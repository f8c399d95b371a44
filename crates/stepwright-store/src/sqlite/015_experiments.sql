-- Experiments (DESIGN §18): one row per experiment (its spec, how it stands, its report once
-- it ended) and one per run it recomputed (the result), so that one a crash stopped goes on
-- without recomputing what it finished. JSON as text, kept as given.
CREATE TABLE experiments (
    id         BLOB PRIMARY KEY,
    tenant     TEXT,
    name       TEXT NOT NULL,
    workflow   TEXT NOT NULL,
    spec       TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    report     TEXT
);
CREATE INDEX experiments_by_tenant ON experiments (tenant, created_at);
CREATE TABLE experiment_runs (
    experiment BLOB NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    run        BLOB NOT NULL,
    result     TEXT NOT NULL,
    PRIMARY KEY (experiment, run)
);
