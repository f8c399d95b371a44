//! Runs and their journals: rows to records, and the `Store` implementation over the
//! writer (for changes) and the read pool (for reads).

use super::*;

/// A run's input or output as the runs table keeps it: its JSON as text, or, from
/// `COMPRESS_AT` bytes on when that is smaller, lz4-compressed JSON as a BLOB (as blobs are).
pub(super) fn stored_json(value: &Value) -> rusqlite::types::Value {
    match crate::encoding::encode_json(serde_json::to_vec(value).unwrap_or_default()) {
        (crate::encoding::CODEC_LZ4_JSON, bytes) => rusqlite::types::Value::Blob(bytes),
        (_, json) => rusqlite::types::Value::Text(String::from_utf8(json).unwrap_or_default()),
    }
}

/// Reads what [`stored_json`] wrote (and the plain JSON text of older rows).
pub(super) fn read_json(stored: rusqlite::types::ValueRef<'_>) -> rusqlite::Result<Option<Value>> {
    use rusqlite::types::ValueRef;
    match stored {
        ValueRef::Null => Ok(None),
        ValueRef::Text(text) => serde_json::from_slice(text).map(Some).map_err(conversion),
        ValueRef::Blob(bytes) => {
            let json = lz4_flex::decompress_size_prepended(bytes).map_err(conversion)?;
            serde_json::from_slice(&json).map(Some).map_err(conversion)
        }
        ValueRef::Integer(_) | ValueRef::Real(_) => {
            Err(conversion(std::io::Error::other("a run's input or output is neither JSON text nor compressed JSON")))
        }
    }
}

pub(super) fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

pub(super) fn parse_status(name: &str) -> rusqlite::Result<RunStatus> {
    RunStatus::parse(name).ok_or_else(|| conversion(std::io::Error::other(format!("unknown run status {name:?}"))))
}

pub(super) fn conversion(e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
}

pub(super) fn bytes_to_id(bytes: &[u8]) -> rusqlite::Result<RunId> {
    let bytes: [u8; 16] =
        bytes.try_into().map_err(|_| conversion(std::io::Error::other("a run id is not 16 bytes")))?;
    Ok(RunId::from_bytes(bytes))
}

pub(super) fn hash_from(bytes: &[u8]) -> rusqlite::Result<ContentHash> {
    ContentHash::from_slice(bytes).ok_or_else(|| conversion(std::io::Error::other("a content hash is not 32 bytes")))
}

pub(super) const RUN_COLUMNS: &str = "id, workflow, version, definition_hash, input, caller, status, output, error, \
                           parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, lease_token, lease_expires, \
                           cancel_request, priority, concurrency_key, concurrency_limit, tags";

/// The creation-time, input-text, parent, concurrency-group, starter and tag filters of a
/// listing (parameters 6 to 12).
pub(super) const NARROWED: &str = "(?6 IS NULL OR created_at >= ?6) AND (?7 IS NULL OR created_at < ?7) \
                        AND (?8 IS NULL OR input_contains(input, ?8)) AND (?9 IS NULL OR parent_run = ?9) \
                        AND (?10 IS NULL OR concurrency_key = ?10) \
                        AND (?11 IS NULL OR json_extract(caller, '$.user') = ?11) \
                        AND (?12 IS NULL OR (tags IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?12)))";

/// [`RUN_COLUMNS`] with the input, output and error left out (read as JSON `null`).
pub(super) const RUN_HEADER_COLUMNS: &str = "id, workflow, version, definition_hash, 'null', caller, status, NULL, NULL, \
                                  parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, lease_token, \
                                  lease_expires, cancel_request, priority, concurrency_key, concurrency_limit, tags";

/// A header with only an id, for fence checks.
pub(super) fn placeholder(run: RunId) -> RunRecord {
    RunRecord {
        id: run,
        workflow: String::new(),
        version: String::new(),
        definition_hash: ContentHash::of_bytes(b""),
        input: Arc::new(Value::Null),
        caller: Default::default(),
        status: RunStatus::Running,
        output: None,
        error: None,
        parent: None,
        created_at: Timestamp::EPOCH,
        updated_at: Timestamp::EPOCH,
        wake_at: None,
        lease: None,
        cancel: None,
        flow: Default::default(),
        tags: Vec::new(),
    }
}

pub(super) fn files_column(files: &std::collections::BTreeMap<String, String>) -> Option<String> {
    (!files.is_empty()).then(|| json(&serde_json::to_value(files).unwrap_or_default()))
}

pub(super) fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let parent_run: Option<Vec<u8>> = row.get(9)?;
    let parent_path: Option<String> = row.get(10)?;
    Ok(RunRecord {
        id: bytes_to_id(&row.get::<_, Vec<u8>>(0)?)?,
        workflow: row.get(1)?,
        version: row.get(2)?,
        definition_hash: hash_from(&row.get::<_, Vec<u8>>(3)?)?,
        input: Arc::new(read_json(row.get_ref(4)?)?.unwrap_or(Value::Null)),
        caller: serde_json::from_str(&row.get::<_, String>(5)?).map_err(conversion)?,
        status: parse_status(&row.get::<_, String>(6)?)?,
        output: read_json(row.get_ref(7)?)?,
        error: row.get::<_, Option<String>>(8)?.map(|t| serde_json::from_str(&t).map_err(conversion)).transpose()?,
        parent: match (parent_run, parent_path) {
            (Some(run), Some(path)) => {
                Some(stepwright_core::journal::Lineage { run: bytes_to_id(&run)?, at: StepPath::new(&path) })
            }
            _ => None,
        },
        created_at: Timestamp::from_micros(row.get(11)?),
        updated_at: Timestamp::from_micros(row.get(12)?),
        wake_at: row.get::<_, Option<i64>>(13)?.map(Timestamp::from_micros),
        lease: match (row.get::<_, Option<String>>(14)?, row.get::<_, Option<i64>>(16)?) {
            (Some(owner), Some(expires)) => Some(Lease::new(
                bytes_to_id(&row.get::<_, Vec<u8>>(0)?)?,
                owner,
                row.get::<_, i64>(15)? as u64,
                Timestamp::from_micros(expires),
            )),
            _ => None,
        },
        cancel: row.get::<_, Option<String>>(17)?.map(|t| serde_json::from_str(&t).map_err(conversion)).transpose()?,
        flow: FlowControl {
            priority: row.get(18)?,
            concurrency: match (row.get::<_, Option<String>>(19)?, row.get::<_, Option<u32>>(20)?) {
                (Some(key), Some(limit)) => Some(Concurrency { key, limit }),
                _ => None,
            },
        },
        tags: match row.get::<_, Option<String>>(21)? {
            Some(text) => serde_json::from_str(&text).map_err(conversion)?,
            None => Vec::new(),
        },
    })
}

pub(super) fn all_runs(conn: &Connection) -> rusqlite::Result<Vec<RunRecord>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs"))?;
    let rows = stmt.query_map([], run_from_row)?;
    rows.collect()
}

/// A position in a run's journal or events as SQLite stores it.
pub(super) fn position(from: u64) -> i64 {
    i64::try_from(from).unwrap_or(i64::MAX)
}

pub(super) fn load_from(conn: &Connection, run: RunId, from: u64) -> Result<LoadedRun, StoreError> {
    let doing = "loading a run";
    let id = run.as_uuid().into_bytes();
    let record = conn
        .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
        .and_then(|mut s| s.query_row([&id[..]], run_from_row).optional())
        .map_err(|e| backend(doing, e))?
        .ok_or(StoreError::RunNotFound(run))?;
    let mut entries = Vec::new();
    let mut wanted = Vec::new();
    let mut inline = HashMap::new();
    {
        let mut stmt = conn
            .prepare_cached("SELECT path, at, record, value FROM journal WHERE run_id = ?1 AND seq >= ?2 ORDER BY seq")
            .map_err(|e| backend(doing, e))?;
        let mut rows = stmt.query(params![&id[..], position(from)]).map_err(|e| backend(doing, e))?;
        while let Some(row) = rows.next().map_err(|e| backend(doing, e))? {
            let path: String = row.get(0).map_err(|e| backend(doing, e))?;
            let at: i64 = row.get(1).map_err(|e| backend(doing, e))?;
            let text: String = row.get(2).map_err(|e| backend(doing, e))?;
            let record: Record = serde_json::from_str(&text).map_err(|e| backend(doing, e))?;
            let value: Option<Vec<u8>> = row.get(3).map_err(|e| backend(doing, e))?;
            if let Record::Completed { output, .. } = &record {
                match value {
                    // An inline output is checked against its hash like any blob.
                    Some(json) => {
                        inline.insert(*output, decode_blob(*output, crate::encoding::CODEC_JSON, &json)?);
                    }
                    None => wanted.push(*output),
                }
            }
            entries.push(JournalEntry { path: StepPath::new(&path), at: Timestamp::from_micros(at), record });
        }
    }
    let mut blobs = inline;
    let mut stmt =
        conn.prepare_cached("SELECT codec, data FROM blobs WHERE hash = ?1").map_err(|e| backend(doing, e))?;
    for hash in wanted {
        if blobs.contains_key(&hash) {
            continue;
        }
        let row: Option<(i64, Vec<u8>)> = stmt
            .query_row([&hash.as_bytes()[..]], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(|e| backend(doing, e))?;
        let (codec, data) = row.ok_or(StoreError::Corrupt(hash))?;
        blobs.insert(hash, decode_blob(hash, codec, &data)?);
    }
    Ok(LoadedRun { record, entries, blobs })
}

impl SqliteStore {
    /// A run's events from `from` on, of one kind when `kind` is given.
    async fn read_events(&self, run: RunId, from: u64, kind: Option<String>) -> Result<Vec<EventRecord>, StoreError> {
        self.read("reading events", move |conn| {
            let doing = "reading events";
            let id = run.as_uuid().into_bytes();
            let exists: bool = conn
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)")
                .and_then(|mut s| s.query_row([&id[..]], |r| r.get(0)))
                .map_err(|e| backend(doing, e))?;
            if !exists {
                return Err(StoreError::RunNotFound(run));
            }
            let mut stmt = conn
                .prepare_cached(
                    "SELECT path, at, tenant, user_id, kind, data FROM events \
                     WHERE run_id = ?1 AND seq >= ?2 AND (?3 IS NULL OR kind = ?3) ORDER BY seq",
                )
                .map_err(|e| backend(doing, e))?;
            let rows = stmt
                .query_map(params![&id[..], position(from), kind], |r| {
                    Ok(EventRecord {
                        run,
                        path: StepPath::new(&r.get::<_, String>(0)?),
                        at: Timestamp::from_micros(r.get(1)?),
                        tenant: r.get(2)?,
                        user: r.get(3)?,
                        kind: r.get(4)?,
                        data: serde_json::from_str(&r.get::<_, String>(5)?).map_err(conversion)?,
                    })
                })
                .map_err(|e| backend(doing, e))?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| backend(doing, e))
        })
        .await
    }
}

impl Store for SqliteStore {
    fn create_run(&self, record: RunRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        let pending = record.status == RunStatus::Pending;
        Box::pin(async move {
            self.send(|ack| Op::Create(Box::new(record), ack)).await?;
            if pending {
                self.announce_work();
            }
            Ok(())
        })
    }

    fn append<'a>(
        &'a self,
        run: RunId,
        fence: Option<u64>,
        batch: &'a mut JournalBatch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let owned = std::mem::take(batch);
            let dispatched = owned.entries.iter().any(|e| matches!(e.record, Record::Dispatched { .. }));
            // The writer hands the drained buffers back, so the caller keeps their capacity.
            *batch = self.send(|ack| Op::Append(run, fence, owned, ack)).await?;
            if dispatched {
                self.announce_tasks();
            }
            Ok(())
        })
    }

    fn set_status(&self, run: RunId, update: StatusUpdate) -> BoxFuture<'_, Result<(), StoreError>> {
        let waits = matches!(update.status, RunStatus::Pending | RunStatus::Suspended);
        Box::pin(async move {
            self.send(move |ack| Op::SetStatus(run, update, ack)).await?;
            if waits {
                self.announce_work();
            }
            Ok(())
        })
    }

    fn wait_for_work(&self, timeout: std::time::Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = tokio::time::timeout(timeout, self.work.notified()).await;
        })
    }

    fn load_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<LoadedRun, StoreError>> {
        Box::pin(self.read("loading a run", move |conn| load_from(conn, run, from)))
    }

    fn resolve_interrupt(&self, run: RunId, entry: JournalEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.send(move |ack| Op::Resolve(run, entry, ack)))
    }

    fn blob(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<Arc<Value>>, StoreError>> {
        Box::pin(self.read("reading a blob", move |conn| {
            let row: Option<(i64, Vec<u8>)> = conn
                .prepare_cached("SELECT codec, data FROM blobs WHERE hash = ?1")
                .and_then(|mut s| s.query_row([&hash.as_bytes()[..]], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .map_err(|e| backend("reading a blob", e))?;
            row.map(|(codec, data)| decode_blob(hash, codec, &data)).transpose()
        }))
    }

    fn events_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(self.read_events(run, from, None))
    }

    fn events_of_kind<'a>(&'a self, run: RunId, kind: &'a str) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(self.read_events(run, 0, Some(kind.to_owned())))
    }

    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.read("listing runs", move |conn| {
            let columns = if filter.headers_only { RUN_HEADER_COLUMNS } else { RUN_COLUMNS };
            let limit = i64::try_from(filter.limit.unwrap_or(100)).unwrap_or(i64::MAX);
            let status = filter.status.map(RunStatus::as_str);
            let from = filter.created_from.map(Timestamp::as_micros);
            let until = filter.created_until.map(Timestamp::as_micros);
            let text = filter.input_contains.as_deref().map(str::to_ascii_lowercase);
            let parent = filter.parent.map(|run| run.as_uuid().as_bytes().to_vec());
            let rows = if let Some(since) = filter.updated_since {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {columns} FROM runs WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR workflow = ?2) \
                         AND (?4 IS NULL OR json_extract(caller, '$.tenant') = ?4) AND updated_at >= ?5 \
                         AND {NARROWED} ORDER BY updated_at, id LIMIT ?3"
                    ))
                    .map_err(|e| backend("listing runs", e))?;
                let rows = stmt
                    .query_map(
                        params![
                            status,
                            filter.workflow,
                            limit,
                            filter.tenant,
                            since.as_micros(),
                            from,
                            until,
                            text,
                            parent,
                            filter.concurrency_key,
                            filter.started_by,
                            filter.tag
                        ],
                        run_from_row,
                    )
                    .map_err(|e| backend("listing runs", e))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            } else {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {columns} FROM runs WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR workflow = ?2) \
                         AND (?5 IS NULL OR json_extract(caller, '$.tenant') = ?5) \
                         AND (?4 IS NULL OR (created_at, id) < (SELECT created_at, id FROM runs WHERE id = ?4)) \
                         AND {NARROWED} ORDER BY created_at DESC, id DESC LIMIT ?3"
                    ))
                    .map_err(|e| backend("listing runs", e))?;
                let before = filter.before.map(|run| run.as_uuid().as_bytes().to_vec());
                let rows = stmt
                    .query_map(
                        params![
                            status,
                            filter.workflow,
                            limit,
                            before,
                            filter.tenant,
                            from,
                            until,
                            text,
                            parent,
                            filter.concurrency_key,
                            filter.started_by,
                            filter.tag
                        ],
                        run_from_row,
                    )
                    .map_err(|e| backend("listing runs", e))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            };
            rows.map_err(|e| backend("listing runs", e))
        }))
    }

    fn run_headers(&self, runs: Vec<RunId>) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.read("reading run headers", move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!("SELECT {RUN_HEADER_COLUMNS} FROM runs WHERE id = ?1"))
                .map_err(|e| backend("reading run headers", e))?;
            let mut headers = Vec::with_capacity(runs.len());
            for run in runs {
                let id = run.as_uuid().into_bytes();
                if let Some(header) =
                    stmt.query_row([&id[..]], run_from_row).optional().map_err(|e| backend("reading run headers", e))?
                {
                    headers.push(header);
                }
            }
            Ok(headers)
        }))
    }

    fn erase_run(&self, run: RunId) -> BoxFuture<'_, Result<Removed, StoreError>> {
        Box::pin(self.send(move |ack| Op::Remove(Removal::Runs(vec![run]), ack)))
    }

    fn apply_retention(&self, policy: Retention) -> BoxFuture<'_, Result<Removed, StoreError>> {
        Box::pin(self.send(move |ack| Op::Remove(Removal::Retention(policy), ack)))
    }

    fn claim(
        &self,
        run: RunId,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(self.claim_one(run, None, owner.to_owned(), now, lease_for))
    }

    fn take_over(
        &self,
        run: RunId,
        from: &str,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(self.claim_one(run, Some(from.to_owned()), owner.to_owned(), now, lease_for))
    }

    fn request_cancel(
        &self,
        run: RunId,
        request: CancelRequest,
        now: Timestamp,
    ) -> BoxFuture<'_, Result<CancelOutcome, StoreError>> {
        Box::pin(self.send(move |ack| Op::Cancel(run, request, now, ack)))
    }

    fn cancel_requests(&self, runs: &[RunId]) -> BoxFuture<'_, Result<Vec<(RunId, CancelRequest)>, StoreError>> {
        let runs = runs.to_vec();
        Box::pin(self.read("reading cancel requests", move |conn| {
            let doing = "reading cancel requests";
            let mut found = Vec::new();
            let mut stmt = conn
                .prepare_cached("SELECT cancel_request FROM runs WHERE id = ?1 AND cancel_request IS NOT NULL")
                .map_err(|e| backend(doing, e))?;
            for run in runs {
                let text: Option<String> = stmt
                    .query_row([run.as_uuid().as_bytes()], |r| r.get(0))
                    .optional()
                    .map_err(|e| backend(doing, e))?;
                if let Some(text) = text {
                    found.push((run, serde_json::from_str(&text).map_err(|e| backend(doing, e))?));
                }
            }
            Ok(found)
        }))
    }

    fn claim_due(
        &self,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
        limit: usize,
        tenant: Option<&str>,
    ) -> BoxFuture<'_, Result<Vec<Lease>, StoreError>> {
        let tenant = tenant.map(str::to_owned);
        let claim = Claim { run: None, take_from: None, owner: owner.to_owned(), now, lease_for, limit, tenant };
        Box::pin(self.send(|ack| Op::Claim(claim, ack)))
    }

    fn put_definition(&self, hash: ContentHash, source: DefinitionSource) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.send(move |ack| Op::Define(hash, Box::new(source), ack)))
    }

    fn get_definition(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<DefinitionSource>, StoreError>> {
        Box::pin(self.read("reading a definition", move |conn| {
            let row = conn
                .prepare_cached("SELECT format, name, source, files FROM definitions WHERE hash = ?1")
                .and_then(|mut s| {
                    s.query_row([&hash.as_bytes()[..]], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, Option<String>>(3)?))
                    })
                    .optional()
                })
                .map_err(|e| backend("reading a definition", e))?;
            row.map(|(format, name, source, files)| {
                let files = crate::encoding::files_from_column(files.as_deref())
                    .map_err(|e| backend("reading a definition", e))?;
                Ok(DefinitionSource { format, name, source, files })
            })
            .transpose()
        }))
    }

    fn post_message(&self, run: RunId, inbox: &str, message: Value) -> BoxFuture<'_, Result<u64, StoreError>> {
        let inbox = inbox.to_owned();
        Box::pin(self.send(move |ack| Op::Post(run, inbox, message, ack)))
    }

    fn wake_run(&self, run: RunId, now: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.write(move |conn| {
            let doing = "bringing a run's timer forward";
            let id = run.as_uuid().into_bytes();
            let changed = conn
                .prepare_cached("UPDATE runs SET wake_at = ?2 WHERE id = ?1 AND status = 'suspended' AND wake_at > ?2")
                .and_then(|mut s| s.execute(params![&id[..], now.as_micros()]))
                .map_err(|e| backend(doing, e))?;
            if changed == 0 {
                let exists: bool = conn
                    .query_row("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)", [&id[..]], |r| r.get(0))
                    .map_err(|e| backend(doing, e))?;
                if !exists {
                    return Err(StoreError::RunNotFound(run));
                }
            }
            Ok(changed > 0)
        }))
    }

    fn next_message(
        &self,
        run: RunId,
        inbox: &str,
        after: Option<u64>,
    ) -> BoxFuture<'_, Result<Option<(u64, Value)>, StoreError>> {
        let inbox = inbox.to_owned();
        Box::pin(self.read("reading a message", move |conn| {
            let doing = "reading a message";
            let after = after.map_or(-1, |a| a as i64);
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT seq, message FROM messages WHERE run_id = ?1 AND inbox = ?2 AND seq > ?3 ORDER BY seq LIMIT 1",
                )
                .and_then(|mut s| s.query_row(params![run.as_uuid().as_bytes(), inbox, after], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .map_err(|e| backend(doing, e))?;
            row.map(|(seq, text)| Ok((seq as u64, serde_json::from_str(&text).map_err(|e| backend(doing, e))?))).transpose()
        }))
    }

    fn logged_events<'a>(
        &'a self,
        tenant: Option<&'a str>,
        name: &'a str,
        after: Option<u64>,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<stepwright_core::store::event::StoredEvent>, StoreError>> {
        let (tenant, name) = (tenant.map(str::to_owned), name.to_owned());
        Box::pin(self.read("reading events", move |conn| {
            let query = stepwright_core::store::event::EventQuery::for_wait(&name, after, since, limit);
            events::query(conn, tenant.as_deref(), &query)
        }))
    }

    fn watch_events<'a>(
        &'a self,
        run: RunId,
        tenant: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.watch_events_in(run, tenant, name)
    }

    fn heartbeat(
        &self,
        lease: &Lease,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let lease = lease.clone();
        Box::pin(self.send(move |ack| Op::Heartbeat(lease, now, lease_for, ack)))
    }

    fn tasks(&self) -> Option<&dyn stepwright_core::store::task::TaskStore> {
        Some(self)
    }

    fn task_signals(&self) -> Option<&stepwright_core::store::task::TaskSignals> {
        Some(self.signals())
    }
}
