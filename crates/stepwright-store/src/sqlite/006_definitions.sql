-- Workflow sources by definition hash: any process can rebuild a run's definition.
CREATE TABLE definitions (
    hash   BLOB PRIMARY KEY,
    format TEXT NOT NULL,
    name   TEXT NOT NULL,
    source TEXT NOT NULL
) WITHOUT ROWID;
