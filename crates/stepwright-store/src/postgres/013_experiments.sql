-- Experiments (DESIGN §18): one row per experiment (its spec, how it stands, its report once
-- it ended) and one per run it recomputed (the result), so that one a crash stopped goes on
-- without recomputing what it finished. JSON as text (not jsonb), kept exactly as given.
CREATE TABLE stepwright_experiments (
    id         UUID PRIMARY KEY,
    tenant     TEXT,
    name       TEXT NOT NULL,
    workflow   TEXT NOT NULL,
    spec       TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    report     TEXT
);
CREATE INDEX stepwright_experiments_by_tenant ON stepwright_experiments (tenant, created_at);
CREATE TABLE stepwright_experiment_runs (
    experiment UUID NOT NULL REFERENCES stepwright_experiments (id) ON DELETE CASCADE,
    run        UUID NOT NULL,
    result     TEXT NOT NULL,
    PRIMARY KEY (experiment, run)
);
