//! Runs as rows: the columns, a row to a record, and the locked writes every change to a
//! run goes through (its row locked, its fencing token checked, in one transaction).

use super::*;

pub(super) const RUN_COLUMNS: &str = "id, workflow, version, definition_hash, input, caller, status, output, error, \
                           parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, lease_token, lease_expires, \
                           cancel_request, priority, concurrency_key, concurrency_limit, tags";

/// How many columns [`RUN_COLUMNS`] has: a query's next column is at this index.
pub(super) const RUN_COLUMN_COUNT: usize = 22;

/// [`RUN_COLUMNS`] with the input, output and error left out (read as JSON `null`).
pub(super) const RUN_HEADER_COLUMNS: &str = "id, workflow, version, definition_hash, 'null'::jsonb, caller, status, NULL::jsonb, \
                                  NULL::jsonb, parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, \
                                  lease_token, lease_expires, cancel_request, priority, concurrency_key, concurrency_limit, tags";

pub(super) fn run_from_row(row: &PgRow) -> Result<RunRecord, StoreError> {
    let doing = "reading a run";
    let get = |e: sqlx::Error| backend(doing, e);
    let id = RunId::from_bytes(row.try_get::<uuid::Uuid, _>(0).map_err(get)?.into_bytes());
    let hash: Vec<u8> = row.try_get(3).map_err(get)?;
    let status: String = row.try_get(6).map_err(get)?;
    let parent_run: Option<uuid::Uuid> = row.try_get(9).map_err(get)?;
    let parent_path: Option<String> = row.try_get(10).map_err(get)?;
    let lease_owner: Option<String> = row.try_get(14).map_err(get)?;
    let lease_expires: Option<i64> = row.try_get(16).map_err(get)?;
    Ok(RunRecord {
        id,
        workflow: row.try_get(1).map_err(get)?,
        version: row.try_get(2).map_err(get)?,
        definition_hash: hash_from(&hash)?,
        input: Arc::new(row.try_get(4).map_err(get)?),
        caller: from_value(doing, row.try_get(5).map_err(get)?)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| backend(doing, std::io::Error::other(format!("unknown run status {status:?}"))))?,
        output: row.try_get(7).map_err(get)?,
        error: row.try_get::<Option<Value>, _>(8).map_err(get)?.map(|v| from_value(doing, v)).transpose()?,
        parent: match (parent_run, parent_path) {
            (Some(run), Some(at)) => Some(Lineage { run: RunId::from_bytes(run.into_bytes()), at: StepPath::new(&at) }),
            _ => None,
        },
        created_at: Timestamp::from_micros(row.try_get(11).map_err(get)?),
        updated_at: Timestamp::from_micros(row.try_get(12).map_err(get)?),
        wake_at: row.try_get::<Option<i64>, _>(13).map_err(get)?.map(Timestamp::from_micros),
        lease: match (lease_owner, lease_expires) {
            (Some(owner), Some(expires)) => Some(Lease::new(
                id,
                owner,
                row.try_get::<i64, _>(15).map_err(get)? as u64,
                Timestamp::from_micros(expires),
            )),
            _ => None,
        },
        cancel: row.get::<Option<Value>, _>(17).map(|v| from_value(doing, v)).transpose()?,
        flow: FlowControl {
            priority: row.try_get(18).map_err(get)?,
            concurrency: match (row.try_get::<Option<String>, _>(19).map_err(get)?, row.try_get::<Option<i32>, _>(20)) {
                (Some(key), Ok(Some(limit))) => Some(Concurrency { key, limit: limit.max(1) as u32 }),
                _ => None,
            },
        },
        tags: match row.try_get::<Option<Value>, _>(21).map_err(get)? {
            Some(tags) => from_value(doing, tags)?,
            None => Vec::new(),
        },
    })
}

pub(super) fn uuid(run: RunId) -> uuid::Uuid {
    run.as_uuid()
}

/// Locks the run's row, reserves `entries` journal and `events` event positions, and
/// returns `(lease_token, first reserved journal seq, first reserved event seq)`. The
/// counters live on the row and are bumped by the locking `UPDATE` itself: a writer that
/// waited for the lock sees the row as the previous writer committed it (READ COMMITTED
/// re-reads an updated row), so two concurrent appends to one run never take the same seq.
/// A refused write rolls back, and its reservation with it.
pub(super) async fn lock_run(
    tx: &mut Transaction<'_, sqlx::Postgres>,
    run: RunId,
    entries: usize,
    events: usize,
) -> Result<(u64, i64, i64), StoreError> {
    let locked = lock_run_row(tx, run, entries, events).await?;
    Ok((locked.token, locked.seq, locked.event_seq))
}

/// What [`lock_run_row`] read of a locked run.
pub(super) struct Locked {
    pub(super) token: u64,
    pub(super) seq: i64,
    pub(super) event_seq: i64,
    pub(super) status: RunStatus,
    pub(super) cancel: Option<CancelRequest>,
}

/// [`lock_run`], also returning the run's status and cancel request.
pub(super) async fn lock_run_row(
    tx: &mut Transaction<'_, sqlx::Postgres>,
    run: RunId,
    entries: usize,
    events: usize,
) -> Result<Locked, StoreError> {
    let doing = "locking a run";
    let (entries, events) = (entries as i64, events as i64);
    let row = sqlx::query(
        "UPDATE stepwright_runs SET journal_next = journal_next + $2, event_next = event_next + $3 \
         WHERE id = $1 RETURNING lease_token, journal_next - $2, event_next - $3, status, cancel_request",
    )
    .bind(uuid(run))
    .bind(entries)
    .bind(events)
    .fetch_optional(&mut **tx)
    .await
    .map_err(pg(doing))?
    .ok_or(StoreError::RunNotFound(run))?;
    let status: String = row.get(3);
    Ok(Locked {
        token: row.get::<i64, _>(0) as u64,
        seq: row.get(1),
        event_seq: row.get(2),
        status: RunStatus::parse(&status)
            .ok_or_else(|| backend(doing, std::io::Error::other(format!("unknown run status {status:?}"))))?,
        cancel: row.get::<Option<Value>, _>(4).map(|v| from_value(doing, v)).transpose()?,
    })
}

pub(super) fn check_token(run: RunId, current: u64, fence: Option<u64>) -> Result<(), StoreError> {
    match fence {
        Some(token) if token != current => Err(StoreError::LeaseLost { run, token }),
        _ => Ok(()),
    }
}

/// Appends a batch inside an open transaction whose run row is locked.
pub(super) async fn append_locked(
    tx: &mut Transaction<'_, sqlx::Postgres>,
    run: RunId,
    mut seq: i64,
    mut event_seq: i64,
    batch: &JournalBatch,
) -> Result<(), StoreError> {
    let doing = "appending to the journal";
    let EncodedBlobs { inline, stored } = encode_batch_blobs(batch);
    let (mut hashes, mut codecs, mut datas) = (Vec::new(), Vec::new(), Vec::new());
    for (hash, codec, bytes) in stored {
        hashes.push(hash.as_bytes().to_vec());
        codecs.push(codec as i16);
        datas.push(bytes);
    }
    if !hashes.is_empty() {
        sqlx::query(
            "INSERT INTO stepwright_blobs (hash, codec, data) SELECT * FROM UNNEST($1::bytea[], $2::smallint[], $3::bytea[]) \
             ON CONFLICT (hash) DO NOTHING",
        )
        .bind(&hashes)
        .bind(&codecs)
        .bind(&datas)
        .execute(&mut **tx)
        .await
        .map_err(pg(doing))?;
    }
    if !batch.entries.is_empty() {
        let n = batch.entries.len();
        let (mut seqs, mut paths, mut ats, mut records, mut blobs, mut values) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut opened_ids, mut opened_paths) = (Vec::new(), Vec::new());
        for entry in &batch.entries {
            let referenced = referenced_blob(&entry.record);
            let value = referenced.and_then(|h| inline.get(&h)).cloned();
            let blob = if value.is_some() { None } else { referenced.map(|h| h.as_bytes().to_vec()) };
            if let Record::InterruptOpened { id, .. } = &entry.record {
                opened_ids.push(id.as_str().to_owned());
                opened_paths.push(entry.path.as_str().to_owned());
            }
            seqs.push(seq);
            seq += 1;
            paths.push(entry.path.as_str().to_owned());
            ats.push(entry.at.as_micros());
            records.push(to_value(&entry.record));
            blobs.push(blob);
            values.push(value);
        }
        sqlx::query(
            "INSERT INTO stepwright_journal (run_id, seq, path, at, record, blob, value) \
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::bigint[], $5::jsonb[], $6::bytea[], $7::bytea[])",
        )
        .bind(uuid(run))
        .bind(&seqs)
        .bind(&paths)
        .bind(&ats)
        .bind(&records)
        .bind(&blobs)
        .bind(&values)
        .execute(&mut **tx)
        .await
        .map_err(pg(doing))?;
        if !opened_ids.is_empty() {
            sqlx::query(
                "INSERT INTO stepwright_interrupts (run_id, id, path, resolved) \
                 SELECT $1, i, p, false FROM UNNEST($2::text[], $3::text[]) AS t(i, p) ON CONFLICT DO NOTHING",
            )
            .bind(uuid(run))
            .bind(&opened_ids)
            .bind(&opened_paths)
            .execute(&mut **tx)
            .await
            .map_err(pg(doing))?;
        }
    }
    if !batch.events.is_empty() {
        let n = batch.events.len();
        let (mut seqs, mut paths, mut ats, mut tenants, mut users, mut kinds, mut datas) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for event in &batch.events {
            seqs.push(event_seq);
            event_seq += 1;
            paths.push(event.path.as_str().to_owned());
            ats.push(event.at.as_micros());
            tenants.push(event.tenant.clone());
            users.push(event.user.clone());
            kinds.push(event.kind.clone());
            datas.push(event.data.clone());
        }
        sqlx::query(
            "INSERT INTO stepwright_events (run_id, seq, path, at, tenant, user_id, kind, data) \
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::jsonb[])",
        )
        .bind(uuid(run))
        .bind(&seqs)
        .bind(&paths)
        .bind(&ats)
        .bind(&tenants)
        .bind(&users)
        .bind(&kinds)
        .bind(&datas)
        .execute(&mut **tx)
        .await
        .map_err(pg(doing))?;
    }
    Ok(())
}

/// A status update in a transaction of its own, with the run's row locked: the path for
/// what the batched update did not write (an error to explain, a cancel request to apply).
/// Returns the status written.
pub(super) async fn set_status_locked(pool: &PgPool, run: RunId, u: StatusUpdate) -> Result<RunStatus, StoreError> {
    let doing = "setting a run's status";
    let mut tx = pool.begin().await.map_err(pg(doing))?;
    let locked = lock_run_row(&mut tx, run, 0, 0).await?;
    check_token(run, locked.token, u.fence)?;
    let u = effective_update(run, locked.status, locked.cancel.as_ref(), u)?;
    sqlx::query(
        "UPDATE stepwright_runs SET status = $2, output = $3, error = $4, updated_at = $5, wake_at = $6, \
         lease_owner = CASE WHEN $7 THEN NULL ELSE lease_owner END, \
         lease_expires = CASE WHEN $7 THEN NULL ELSE lease_expires END WHERE id = $1",
    )
    .bind(uuid(run))
    .bind(RunStatus::as_str(u.status))
    .bind(&u.output)
    .bind(u.error.as_ref().map(to_value))
    .bind(u.at.as_micros())
    .bind(u.wake_at.map(Timestamp::as_micros))
    .bind(u.status != RunStatus::Running)
    .execute(&mut *tx)
    .await
    .map_err(pg(doing))?;
    tx.commit().await.map_err(pg(doing))?;
    Ok(u.status)
}

/// Why a claim matched no row.
pub(super) async fn claim_refusal(pool: &PgPool, run: RunId) -> StoreError {
    let row = sqlx::query(
        "SELECT status, lease_owner, lease_expires, concurrency_key, concurrency_limit, stepwright_now_us() \
         FROM stepwright_runs WHERE id = $1",
    )
    .bind(uuid(run))
    .fetch_optional(pool)
    .await;
    match row {
        Ok(Some(row)) => {
            let status: String = row.get(0);
            let owner: Option<String> = row.get(1);
            let until: Option<i64> = row.get(2);
            let group: (Option<String>, Option<i32>) = (row.get(3), row.get(4));
            let now: i64 = row.get(5);
            let lapsed = until.is_none_or(|until| until <= now);
            match (RunStatus::parse(&status), owner) {
                (Some(status), _) if status.is_terminal() => StoreError::Finished { run, status },
                (Some(RunStatus::Pending), _) if lapsed && group.0.is_some() => StoreError::Queued {
                    run,
                    key: group.0.unwrap_or_default(),
                    limit: group.1.unwrap_or(1).max(1) as u32,
                },
                // No owner: the lease was let go between the claim and this look.
                (_, owner) => StoreError::Leased {
                    run,
                    owner: owner.unwrap_or_else(|| "another worker, which has just let it go".to_owned()),
                    until: Timestamp::from_micros(until.unwrap_or_default()),
                },
            }
        }
        Ok(None) => StoreError::RunNotFound(run),
        Err(e) => backend("claiming a run", e),
    }
}
