-- Sessions: a conversation's history across runs, owned by the tenant and user that first
-- wrote to it ('' stands for none, so the owner compares with `=`).
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    next_seq   INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per message; appends trim the oldest beyond the session's cap.
CREATE TABLE session_messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    message    TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- The keys of applied appends (never trimmed), so a repeated append is a no-op.
CREATE TABLE session_appends (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    append_key TEXT NOT NULL,
    PRIMARY KEY (session_id, append_key)
) WITHOUT ROWID;

-- The memory bank: namespaced key/value items per tenant and scope.
CREATE TABLE memory_items (
    tenant     TEXT NOT NULL,
    scope      TEXT NOT NULL,
    owner      TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    text       TEXT NOT NULL,
    words      TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (tenant, scope, owner, namespace, key)
);

-- Full-text index over `memory_items.words`: the text's words as `bank::query_terms` splits
-- them (lowercased, space-separated), so both backends index the same words whatever their
-- own tokenizers would make of e-mail addresses or hyphens. An external-content table: the
-- words are stored once, in memory_items.
CREATE VIRTUAL TABLE memory_fts USING fts5 (
    words,
    content = 'memory_items',
    content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 0'
);
CREATE TRIGGER memory_items_ai AFTER INSERT ON memory_items BEGIN
    INSERT INTO memory_fts (rowid, words) VALUES (new.rowid, new.words);
END;
CREATE TRIGGER memory_items_ad AFTER DELETE ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, words) VALUES ('delete', old.rowid, old.words);
END;
CREATE TRIGGER memory_items_au AFTER UPDATE ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, words) VALUES ('delete', old.rowid, old.words);
    INSERT INTO memory_fts (rowid, words) VALUES (new.rowid, new.words);
END;
