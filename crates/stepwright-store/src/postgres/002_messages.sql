CREATE TABLE stepwright_messages (
    seq     BIGSERIAL PRIMARY KEY,
    run_id  UUID NOT NULL,
    inbox   TEXT NOT NULL,
    message JSONB NOT NULL
);
CREATE INDEX stepwright_messages_by_inbox ON stepwright_messages (run_id, inbox, seq);
