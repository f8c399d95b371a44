//! The `Store` implementation: runs, journals, leases and claims over the rows.

use super::*;

pub(super) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl PostgresStore {
    /// Claims one run for `owner`: free, under a lapsed lease, or (taking over) held by
    /// `from`, who is known to be gone.
    pub(super) async fn claim_one(
        &self,
        run: RunId,
        from: Option<String>,
        owner: String,
        lease_for: Duration,
    ) -> Result<Lease, StoreError> {
        // `before` is the row as the claim found it (locked), to say whom it took the run from.
        let row = sqlx::query(
            "WITH before AS (SELECT id, status, lease_owner FROM stepwright_runs WHERE id = $1 FOR UPDATE) \
             UPDATE stepwright_runs r SET lease_owner = $3, lease_token = r.lease_token + 1, \
             lease_expires = stepwright_now_us() + $4 FROM before \
             WHERE r.id = before.id AND r.status NOT IN ('completed', 'failed', 'cancelled') \
             AND NOT (r.status = 'pending' AND r.concurrency_key IS NOT NULL) \
             AND (r.lease_owner IS NULL OR r.lease_owner = $2 OR r.lease_expires <= stepwright_now_us()) \
             RETURNING r.lease_token, r.lease_expires, \
             CASE WHEN before.status = 'running' AND before.lease_owner <> '' AND before.lease_owner <> $3 \
             THEN before.lease_owner END",
        )
        .bind(uuid(run))
        .bind(&from)
        .bind(&owner)
        .bind(micros(lease_for))
        .fetch_optional(&self.pool)
        .await
        .map_err(pg("claiming a run"))?;
        match row {
            Some(row) => Ok(Lease {
                took_over_from: row.get(2),
                ..Lease::new(run, owner, row.get::<i64, _>(0) as u64, Timestamp::from_micros(row.get(1)))
            }),
            None => match claim_refusal(&self.pool, run).await {
                // A pending run of a concurrency group: admitted if its group has room.
                StoreError::Queued { key, limit, .. } => {
                    self.claim_in_group(run, &from, owner, lease_for, &key, limit).await
                }
                refusal => Err(refusal),
            },
        }
    }

    /// Claims a pending run of a concurrency group and starts it, if the group has room:
    /// under the group's advisory lock (see `stepwright_claim_due`), so that no other claim
    /// counts its slots meanwhile.
    pub(super) async fn claim_in_group(
        &self,
        run: RunId,
        from: &Option<String>,
        owner: String,
        lease_for: Duration,
        key: &str,
        limit: u32,
    ) -> Result<Lease, StoreError> {
        let doing = "claiming a run of a concurrency group";
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('stepwright.concurrency:' || $1, 0))")
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?;
        let held: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM stepwright_runs WHERE concurrency_key = $1 AND status IN ('running', 'suspended')",
        )
        .bind(key)
        .fetch_one(&mut *tx)
        .await
        .map_err(pg(doing))?;
        if held >= i64::from(limit) {
            return Err(StoreError::Queued { run, key: key.to_owned(), limit });
        }
        let row = sqlx::query(
            "UPDATE stepwright_runs SET lease_owner = $3, lease_token = lease_token + 1, \
             lease_expires = stepwright_now_us() + $4, status = 'running', wake_at = NULL, \
             updated_at = stepwright_now_us() \
             WHERE id = $1 AND status = 'pending' \
             AND (lease_owner IS NULL OR lease_owner = $2 OR lease_expires <= stepwright_now_us()) \
             RETURNING lease_token, lease_expires",
        )
        .bind(uuid(run))
        .bind(from)
        .bind(&owner)
        .bind(micros(lease_for))
        .fetch_optional(&mut *tx)
        .await
        .map_err(pg(doing))?;
        let Some(row) = row else {
            drop(tx);
            return Err(claim_refusal(&self.pool, run).await);
        };
        tx.commit().await.map_err(pg(doing))?;
        Ok(Lease::new(run, owner, row.get::<i64, _>(0) as u64, Timestamp::from_micros(row.get(1))))
    }

    /// `RunNotFound` unless the run exists.
    pub(super) async fn check_exists(&self, run: RunId, doing: &str) -> Result<(), StoreError> {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM stepwright_runs WHERE id = $1)")
            .bind(uuid(run))
            .fetch_one(&self.pool)
            .await
            .map_err(pg(doing))?;
        if exists { Ok(()) } else { Err(StoreError::RunNotFound(run)) }
    }
}

/// A position in a run's journal or events as Postgres stores it.
pub(super) fn position(from: u64) -> i64 {
    i64::try_from(from).unwrap_or(i64::MAX)
}

impl PostgresStore {
    /// A run's events from `from` on, of one kind when `kind` is given.
    async fn read_events(&self, run: RunId, from: u64, kind: Option<&str>) -> Result<Vec<EventRecord>, StoreError> {
        let doing = "reading events";
        self.check_exists(run, doing).await?;
        let rows = sqlx::query(
            "SELECT path, at, tenant, user_id, kind, data FROM stepwright_events WHERE run_id = $1 AND seq >= $2 \
             AND ($3::text IS NULL OR kind = $3) ORDER BY seq",
        )
        .bind(uuid(run))
        .bind(position(from))
        .bind(kind)
        .fetch_all(&self.pool)
        .await
        .map_err(pg(doing))?;
        Ok(rows
            .into_iter()
            .map(|r| EventRecord {
                run,
                path: StepPath::new(&r.get::<String, _>(0)),
                at: Timestamp::from_micros(r.get(1)),
                tenant: r.get(2),
                user: r.get(3),
                kind: r.get(4),
                data: r.get(5),
            })
            .collect())
    }
}

impl Store for PostgresStore {
    fn blob(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<Arc<Value>>, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT codec, data FROM stepwright_blobs WHERE hash = $1")
                .bind(hash.as_bytes().to_vec())
                .fetch_optional(&self.pool)
                .await
                .map_err(pg("reading a blob"))?;
            row.map(|row| decode_blob(hash, i64::from(row.get::<i16, _>(0)), &row.get::<Vec<u8>, _>(1))).transpose()
        })
    }

    fn create_run(&self, r: RunRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        // Group-committed with this process's other new runs (see `group_commit`).
        let (run, pending) = (r.id, r.status == RunStatus::Pending);
        let created = self.writer.create(r);
        Box::pin(async move {
            created.await?;
            if pending {
                self.notify(run).await;
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
        // Group-committed with the appends of this process's other runs (see `group_commit`).
        let owned = std::mem::take(batch);
        let dispatched = owned.entries.iter().any(|e| matches!(e.record, Record::Dispatched { .. }));
        let committed = self.writer.append(run, fence, owned);
        Box::pin(async move {
            *batch = committed.await?;
            if dispatched {
                self.tasks_changed.dispatched();
                self.announce_task(None).await;
            }
            Ok(())
        })
    }

    fn set_status(&self, run: RunId, u: StatusUpdate) -> BoxFuture<'_, Result<(), StoreError>> {
        // Group-committed with this process's other status changes (see `group_commit`).
        let written = self.writer.set_status(run, u);
        Box::pin(async move {
            let status = written.await?;
            if matches!(status, RunStatus::Pending | RunStatus::Suspended) {
                self.notify(run).await;
            }
            Ok(())
        })
    }

    fn load_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<LoadedRun, StoreError>> {
        Box::pin(async move {
            let doing = "loading a run";
            let row =
                sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {RUN_COLUMNS} FROM stepwright_runs WHERE id = $1")))
                    .bind(uuid(run))
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(pg(doing))?
                    .ok_or(StoreError::RunNotFound(run))?;
            let record = run_from_row(&row)?;
            let rows = sqlx::query(
                "SELECT path, at, record, value FROM stepwright_journal WHERE run_id = $1 AND seq >= $2 ORDER BY seq",
            )
            .bind(uuid(run))
            .bind(position(from))
            .fetch_all(&self.pool)
            .await
            .map_err(pg(doing))?;
            let mut entries = Vec::with_capacity(rows.len());
            let mut blobs = HashMap::new();
            let mut wanted: Vec<Vec<u8>> = Vec::new();
            for row in rows {
                let record: Record = from_value(doing, row.get::<Value, _>(2))?;
                if let Record::Completed { output, .. } = &record {
                    match row.get::<Option<Vec<u8>>, _>(3) {
                        Some(json) => {
                            blobs.insert(*output, decode_blob(*output, CODEC_JSON, &json)?);
                        }
                        None => wanted.push(output.as_bytes().to_vec()),
                    }
                }
                let path: String = row.get(0);
                entries.push(JournalEntry {
                    path: StepPath::new(&path),
                    at: Timestamp::from_micros(row.get(1)),
                    record,
                });
            }
            if !wanted.is_empty() {
                let rows = sqlx::query("SELECT hash, codec, data FROM stepwright_blobs WHERE hash = ANY($1)")
                    .bind(&wanted)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(pg(doing))?;
                for row in rows {
                    let hash: Vec<u8> = row.get(0);
                    let hash = hash_from(&hash)?;
                    blobs.insert(hash, decode_blob(hash, i64::from(row.get::<i16, _>(1)), &row.get::<Vec<u8>, _>(2))?);
                }
                for hash in &wanted {
                    let hash = hash_from(hash)?;
                    if !blobs.contains_key(&hash) {
                        return Err(StoreError::Corrupt(hash));
                    }
                }
            }
            Ok(LoadedRun { record, entries, blobs })
        })
    }

    fn resolve_interrupt(&self, run: RunId, entry: JournalEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let doing = "resolving an interrupt";
            let Record::InterruptResolved { id, .. } = &entry.record else {
                return Err(backend(doing, std::io::Error::other("the entry is not an interrupt resolution")));
            };
            let mut tx = self.pool.begin().await.map_err(pg(doing))?;
            let (_, seq, event_seq) = lock_run(&mut tx, run, 1, 0).await?;
            let changed = sqlx::query(
                "UPDATE stepwright_interrupts SET resolved = true WHERE run_id = $1 AND id = $2 AND NOT resolved",
            )
            .bind(uuid(run))
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?;
            if changed.rows_affected() == 0 {
                let exists: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM stepwright_interrupts WHERE run_id = $1 AND id = $2)",
                )
                .bind(uuid(run))
                .bind(id.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(pg(doing))?;
                let interrupt = InterruptId::new(id.as_str());
                return Err(if exists {
                    StoreError::AlreadyResolved { run, interrupt }
                } else {
                    StoreError::InterruptNotFound { run, interrupt }
                });
            }
            let batch = JournalBatch { entries: vec![entry.clone()], ..JournalBatch::default() };
            append_locked(&mut tx, run, seq, event_seq, &batch).await?;
            tx.commit().await.map_err(pg(doing))?;
            self.notify(run).await;
            Ok(())
        })
    }

    fn events_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(self.read_events(run, from, None))
    }

    fn events_of_kind<'a>(&'a self, run: RunId, kind: &'a str) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(self.read_events(run, 0, Some(kind)))
    }

    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(async move {
            let doing = "listing runs";
            let columns = if filter.headers_only { RUN_HEADER_COLUMNS } else { RUN_COLUMNS };
            let (since, order) = match filter.updated_since {
                Some(since) => (Some(since.as_micros()), "updated_at, id"),
                None => (None, "created_at DESC, id DESC"),
            };
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {columns} FROM stepwright_runs WHERE ($1::text IS NULL OR status = $1) \
                 AND ($2::text IS NULL OR workflow = $2) \
                 AND ($5::text IS NULL OR caller->>'tenant' = $5) \
                 AND ($6::bigint IS NULL OR updated_at >= $6) \
                 AND ($6::bigint IS NOT NULL OR $4::uuid IS NULL \
                      OR (created_at, id) < (SELECT created_at, id FROM stepwright_runs WHERE id = $4)) \
                 AND ($7::bigint IS NULL OR created_at >= $7) AND ($8::bigint IS NULL OR created_at < $8) \
                 AND ($9::text IS NULL OR strpos(lower(input::text), lower($9)) > 0) \
                 AND ($10::uuid IS NULL OR parent_run = $10) \
                 AND ($11::text IS NULL OR concurrency_key = $11) \
                 AND ($12::text IS NULL OR caller->>'user' = $12) \
                 AND ($13::text IS NULL OR tags @> jsonb_build_array($13::text)) \
                 ORDER BY {order} LIMIT $3"
            )))
            .bind(filter.status.map(RunStatus::as_str))
            .bind(filter.workflow)
            .bind(i64::try_from(filter.limit.unwrap_or(100)).unwrap_or(i64::MAX))
            .bind(filter.before.map(uuid))
            .bind(filter.tenant)
            .bind(since)
            .bind(filter.created_from.map(Timestamp::as_micros))
            .bind(filter.created_until.map(Timestamp::as_micros))
            .bind(filter.input_contains)
            .bind(filter.parent.map(uuid))
            .bind(filter.concurrency_key)
            .bind(filter.started_by)
            .bind(filter.tag)
            .fetch_all(&self.pool)
            .await
            .map_err(pg(doing))?;
            rows.iter().map(run_from_row).collect()
        })
    }

    fn run_headers(&self, runs: Vec<RunId>) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {RUN_HEADER_COLUMNS} FROM stepwright_runs WHERE id = ANY($1)"
            )))
            .bind(runs.iter().copied().map(uuid).collect::<Vec<_>>())
            .fetch_all(&self.pool)
            .await
            .map_err(pg("reading run headers"))?;
            let mut found: HashMap<RunId, RunRecord> =
                rows.iter().map(run_from_row).map(|r| r.map(|r| (r.id, r))).collect::<Result<_, _>>()?;
            Ok(runs.iter().filter_map(|run| found.remove(run)).collect())
        })
    }

    fn erase_run(&self, run: RunId) -> BoxFuture<'_, Result<Removed, StoreError>> {
        Box::pin(self.remove(vec![run]))
    }

    fn apply_retention(&self, policy: Retention) -> BoxFuture<'_, Result<Removed, StoreError>> {
        Box::pin(async move {
            let all = self.list_runs(RunFilter { limit: Some(usize::MAX >> 1), ..RunFilter::default() }).await?;
            self.remove(retention_victims(&all, &policy)).await
        })
    }

    fn claim(
        &self,
        run: RunId,
        owner: &str,
        _now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(self.claim_one(run, None, owner.to_owned(), lease_for))
    }

    fn take_over(
        &self,
        run: RunId,
        from: &str,
        owner: &str,
        _now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(self.claim_one(run, Some(from.to_owned()), owner.to_owned(), lease_for))
    }

    fn request_cancel(
        &self,
        run: RunId,
        request: CancelRequest,
        _now: Timestamp,
    ) -> BoxFuture<'_, Result<CancelOutcome, StoreError>> {
        Box::pin(async move {
            let doing = "cancelling a run";
            let mut tx = self.pool.begin().await.map_err(pg(doing))?;
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {RUN_COLUMNS}, stepwright_now_us() FROM stepwright_runs WHERE id = $1 FOR UPDATE"
            )))
            .bind(uuid(run))
            .fetch_optional(&mut *tx)
            .await
            .map_err(pg(doing))?
            .ok_or(StoreError::RunNotFound(run))?;
            let record = run_from_row(&row)?;
            let now = Timestamp::from_micros(row.get(RUN_COLUMN_COUNT));
            let outcome = decide_cancel(&record, now);
            match &outcome {
                CancelOutcome::Finished(_) => return Ok(outcome),
                CancelOutcome::Requested { .. } => {
                    sqlx::query("UPDATE stepwright_runs SET cancel_request = $2 WHERE id = $1")
                        .bind(uuid(run))
                        .bind(to_value(&request))
                        .execute(&mut *tx)
                        .await
                        .map_err(pg(doing))?;
                }
                CancelOutcome::Cancelled => {
                    // The token grows, so a holder that stalled past its lease cannot write.
                    sqlx::query(
                        "UPDATE stepwright_runs SET status = 'cancelled', output = NULL, error = $2, updated_at = $3, \
                         wake_at = NULL, lease_owner = NULL, lease_expires = NULL, lease_token = lease_token + 1, \
                         cancel_request = $4 WHERE id = $1",
                    )
                    .bind(uuid(run))
                    .bind(to_value(&request.error()))
                    .bind(now.as_micros())
                    .bind(to_value(&request))
                    .execute(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
                }
            }
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CANCEL_CHANNEL)
                .bind(run.to_string())
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
            tx.commit().await.map_err(pg(doing))?;
            Ok(outcome)
        })
    }

    fn cancel_requests(&self, runs: &[RunId]) -> BoxFuture<'_, Result<Vec<(RunId, CancelRequest)>, StoreError>> {
        let ids: Vec<uuid::Uuid> = runs.iter().map(|r| uuid(*r)).collect();
        Box::pin(async move {
            let doing = "reading cancel requests";
            let rows = sqlx::query(
                "SELECT id, cancel_request FROM stepwright_runs WHERE id = ANY($1) AND cancel_request IS NOT NULL",
            )
            .bind(&ids)
            .fetch_all(&self.pool)
            .await
            .map_err(pg(doing))?;
            rows.into_iter()
                .map(|row| {
                    let run = RunId::from_bytes(row.get::<uuid::Uuid, _>(0).into_bytes());
                    Ok((run, from_value(doing, row.get::<Value, _>(1))?))
                })
                .collect()
        })
    }

    fn wait_for_cancel(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let mut guard = self.cancel_listener.lock().await;
            if guard.is_none()
                && let Ok(mut listener) = PgListener::connect_with(&self.pool).await
                && listener.listen(CANCEL_CHANNEL).await.is_ok()
            {
                *guard = Some(listener);
            }
            match guard.as_mut() {
                // A notification, or the poll interval: whichever comes first. A listener
                // that failed may have missed one: say so, and connect again next time.
                Some(listener) => match tokio::time::timeout(timeout, listener.recv()).await {
                    Ok(Ok(_)) => true,
                    Ok(Err(_)) => {
                        *guard = None;
                        true
                    }
                    Err(_) => false,
                },
                None => {
                    tokio::time::sleep(timeout).await;
                    true
                }
            }
        })
    }

    fn announces_cancels(&self) -> bool {
        true
    }

    fn claim_due(
        &self,
        owner: &str,
        _now: Timestamp,
        lease_for: Duration,
        limit: usize,
        tenant: Option<&str>,
    ) -> BoxFuture<'_, Result<Vec<Lease>, StoreError>> {
        let tenant = tenant.map(str::to_owned);
        let owner = owner.to_owned();
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT run_id, run_token, run_expires, run_taken_from FROM stepwright_claim_due($1, $2, $3, $4)",
            )
            .bind(&owner)
            .bind(micros(lease_for))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(tenant)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("claiming due runs"))?;
            Ok(rows
                .into_iter()
                .map(|row| Lease {
                    took_over_from: row.get(3),
                    ..Lease::new(
                        RunId::from_bytes(row.get::<uuid::Uuid, _>(0).into_bytes()),
                        owner.clone(),
                        row.get::<i64, _>(1) as u64,
                        Timestamp::from_micros(row.get(2)),
                    )
                })
                .collect())
        })
    }

    fn renew_leases<'a>(
        &'a self,
        leases: &'a [Lease],
        _now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Vec<Result<Lease, StoreError>>, StoreError>> {
        Box::pin(async move {
            let ids: Vec<uuid::Uuid> = leases.iter().map(|l| uuid(l.run)).collect();
            let tokens: Vec<i64> = leases.iter().map(|l| l.token as i64).collect();
            // One statement for every run the worker executes; the database's clock.
            let rows = sqlx::query(
                "UPDATE stepwright_runs r SET lease_expires = stepwright_now_us() + $3 \
                 FROM UNNEST($1::uuid[], $2::bigint[]) AS l(id, token) \
                 WHERE r.id = l.id AND r.lease_token = l.token RETURNING r.id, r.lease_expires",
            )
            .bind(&ids)
            .bind(&tokens)
            .bind(micros(lease_for))
            .fetch_all(&self.pool)
            .await
            .map_err(pg("renewing leases"))?;
            let renewed: HashMap<uuid::Uuid, i64> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
            Ok(leases
                .iter()
                .map(|lease| match renewed.get(&uuid(lease.run)) {
                    Some(expires) => Ok(Lease { expires_at: Timestamp::from_micros(*expires), ..lease.clone() }),
                    None => Err(StoreError::LeaseLost { run: lease.run, token: lease.token }),
                })
                .collect())
        })
    }

    fn heartbeat(
        &self,
        lease: &Lease,
        _now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let lease = lease.clone();
        Box::pin(async move {
            let row = sqlx::query(
                "UPDATE stepwright_runs SET lease_expires = stepwright_now_us() + $3 \
                 WHERE id = $1 AND lease_token = $2 RETURNING lease_expires",
            )
            .bind(uuid(lease.run))
            .bind(lease.token as i64)
            .bind(micros(lease_for))
            .fetch_optional(&self.pool)
            .await
            .map_err(pg("renewing a lease"))?;
            match row {
                Some(row) => Ok(Lease { expires_at: Timestamp::from_micros(row.get(0)), ..lease }),
                None => Err(StoreError::LeaseLost { run: lease.run, token: lease.token }),
            }
        })
    }

    fn tasks(&self) -> Option<&dyn stepwright_core::store::task::TaskStore> {
        Some(self)
    }

    fn task_signals(&self) -> Option<&stepwright_core::store::task::TaskSignals> {
        Some(PostgresStore::task_signals(self))
    }

    fn put_definition(&self, hash: ContentHash, source: DefinitionSource) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO stepwright_definitions (hash, format, name, source, files) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (hash) DO NOTHING",
            )
            .bind(&hash.as_bytes()[..])
            .bind(&source.format)
            .bind(&source.name)
            .bind(&source.source)
            .bind((!source.files.is_empty()).then(|| serde_json::to_string(&source.files).unwrap_or_default()))
            .execute(&self.pool)
            .await
            .map_err(pg("storing a definition"))?;
            Ok(())
        })
    }

    fn get_definition(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<DefinitionSource>, StoreError>> {
        Box::pin(async move {
            let doing = "reading a definition";
            let row = sqlx::query("SELECT format, name, source, files FROM stepwright_definitions WHERE hash = $1")
                .bind(&hash.as_bytes()[..])
                .fetch_optional(&self.pool)
                .await
                .map_err(pg(doing))?;
            row.map(|r| {
                let files = crate::encoding::files_from_column(r.get::<Option<String>, _>(3).as_deref())
                    .map_err(|e| backend(doing, e))?;
                Ok(DefinitionSource { format: r.get(0), name: r.get(1), source: r.get(2), files })
            })
            .transpose()
        })
    }

    fn logged_events<'a>(
        &'a self,
        tenant: Option<&'a str>,
        name: &'a str,
        after: Option<u64>,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<stepwright_core::store::event::StoredEvent>, StoreError>> {
        Box::pin(async move {
            let query = stepwright_core::store::event::EventQuery::for_wait(name, after, since, limit);
            self.query_events(tenant, &query).await
        })
    }

    fn watch_events<'a>(
        &'a self,
        run: RunId,
        tenant: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.watch(run, tenant, name))
    }

    fn wake_run(&self, run: RunId, _now: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let doing = "bringing a run's timer forward";
            // The database's clock, as `claim_due` uses: a worker's clock may be off.
            let changed = sqlx::query(
                "UPDATE stepwright_runs SET wake_at = stepwright_now_us() \
                 WHERE id = $1 AND status = 'suspended' AND wake_at > stepwright_now_us()",
            )
            .bind(uuid(run))
            .execute(&self.pool)
            .await
            .map_err(pg(doing))?
            .rows_affected();
            if changed == 0 {
                self.check_exists(run, doing).await?;
                return Ok(false);
            }
            self.notify(run).await;
            Ok(true)
        })
    }

    fn post_message(&self, run: RunId, inbox: &str, message: Value) -> BoxFuture<'_, Result<u64, StoreError>> {
        let inbox = inbox.to_owned();
        Box::pin(async move {
            let seq: i64 = sqlx::query_scalar(
                "INSERT INTO stepwright_messages (run_id, inbox, message) VALUES ($1, $2, $3) RETURNING seq",
            )
            .bind(uuid(run))
            .bind(&inbox)
            .bind(&message)
            .fetch_one(&self.pool)
            .await
            .map_err(pg("storing a message"))?;
            self.notify(run).await;
            Ok(seq as u64)
        })
    }

    fn next_message(
        &self,
        run: RunId,
        inbox: &str,
        after: Option<u64>,
    ) -> BoxFuture<'_, Result<Option<(u64, Value)>, StoreError>> {
        let inbox = inbox.to_owned();
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT seq, message FROM stepwright_messages WHERE run_id = $1 AND inbox = $2 AND seq > $3 ORDER BY seq LIMIT 1",
            )
            .bind(uuid(run))
            .bind(&inbox)
            .bind(after.map_or(-1, |a| a as i64))
            .fetch_optional(&self.pool)
            .await
            .map_err(pg("reading a message"))?;
            Ok(row.map(|r| (r.get::<i64, _>(0) as u64, r.get::<Value, _>(1))))
        })
    }

    fn wait_for_work(&self, timeout: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let mut guard = self.listener.lock().await;
            if guard.is_none()
                && let Ok(mut listener) = PgListener::connect_with(&self.pool).await
                && listener.listen(WORK_CHANNEL).await.is_ok()
            {
                *guard = Some(listener);
            }
            match guard.as_mut() {
                Some(listener) => {
                    // A notification, or the poll interval: whichever comes first.
                    let _ = tokio::time::timeout(timeout, listener.recv()).await;
                }
                None => tokio::time::sleep(timeout).await,
            }
        })
    }
}

impl PostgresStore {
    pub(super) async fn remove(&self, victims: Vec<RunId>) -> Result<Removed, StoreError> {
        let doing = "removing runs";
        let ids: Vec<uuid::Uuid> = victims.iter().map(|r| uuid(*r)).collect();
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        for table in [
            "stepwright_journal",
            "stepwright_events",
            "stepwright_interrupts",
            "stepwright_messages",
            "stepwright_tasks",
        ] {
            sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE run_id = ANY($1)")))
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
        }
        // A run's own memory goes with it.
        {
            let owners: Vec<String> = victims.iter().map(ToString::to_string).collect();
            sqlx::query("DELETE FROM stepwright_memory_items WHERE scope = 'run' AND owner = ANY($1)")
                .bind(&owners)
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
        }
        let runs = sqlx::query("DELETE FROM stepwright_runs WHERE id = ANY($1)")
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?
            .rows_affected();
        let blobs = sqlx::query(
            "DELETE FROM stepwright_blobs b WHERE NOT EXISTS (SELECT 1 FROM stepwright_journal j WHERE j.blob = b.hash)",
        )
        .execute(&mut *tx)
        .await
        .map_err(pg(doing))?
        .rows_affected();
        tx.commit().await.map_err(pg(doing))?;
        Ok(Removed { runs: runs as usize, blobs: blobs as usize })
    }
}
