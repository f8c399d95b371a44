CREATE TABLE stepwright_definitions (
    hash   BYTEA PRIMARY KEY,
    format TEXT NOT NULL,
    name   TEXT NOT NULL,
    source TEXT NOT NULL
);
