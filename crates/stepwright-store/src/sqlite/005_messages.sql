-- Loop inbox messages, kept until their run is erased. `seq` orders messages of an inbox.
CREATE TABLE messages (
    seq     INTEGER PRIMARY KEY,
    run_id  BLOB NOT NULL,
    inbox   TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX messages_by_inbox ON messages (run_id, inbox, seq);
