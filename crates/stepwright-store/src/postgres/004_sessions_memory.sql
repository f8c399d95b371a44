-- Sessions: a conversation's history across runs, owned by the tenant and user that first
-- wrote to it ('' stands for none, so the owner compares with `=`).
CREATE TABLE stepwright_sessions (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    next_seq   BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- One row per message; appends trim the oldest beyond the session's cap.
CREATE TABLE stepwright_session_messages (
    session_id TEXT NOT NULL REFERENCES stepwright_sessions (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    message    TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- The keys of applied appends (never trimmed), so a repeated append is a no-op.
CREATE TABLE stepwright_session_appends (
    session_id TEXT NOT NULL REFERENCES stepwright_sessions (id) ON DELETE CASCADE,
    append_key TEXT NOT NULL,
    PRIMARY KEY (session_id, append_key)
);

-- The memory bank: namespaced key/value items per tenant and scope. `words` is the text's
-- words as `bank::query_terms` splits them (lowercased, space-separated), indexed in the
-- `simple` configuration (no stemming, no stop words), so both backends index the same words
-- whatever their own parsers would make of e-mail addresses or hyphens.
CREATE TABLE stepwright_memory_items (
    tenant     TEXT NOT NULL,
    scope      TEXT NOT NULL,
    owner      TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    text       TEXT NOT NULL,
    words      TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    search     TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', words)) STORED,
    PRIMARY KEY (tenant, scope, owner, namespace, key)
);
CREATE INDEX stepwright_memory_items_words ON stepwright_memory_items USING GIN (search);
