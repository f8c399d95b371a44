//! SQLite-specific behaviour: faults, corruption, persistence across processes, pragmas.

use std::sync::Arc;

use serde_json::json;
use stepwright_core::journal::Choice;
use stepwright_core::journal::{JournalBatch, JournalEntry};
use stepwright_core::{
    Caller, ContentHash, Decision, Engine, InterruptRequest, Node, Outcome, Record, RunStatus, StepPath, Store,
    StoreError, Timestamp, Workflow, dyn_fn_step, fn_step,
};
use stepwright_store::{SqliteOptions, SqliteStore, Synchronous};

fn engine(store: Arc<SqliteStore>) -> Engine {
    Engine::builder().store(store as Arc<dyn Store>).build()
}

fn two_steps() -> Workflow {
    Workflow::builder("two")
        .step(Node::step("double", fn_step(|_c, x: i64| async move { Ok(x * 2) })))
        .step(Node::dyn_step(
            "approve",
            dyn_fn_step("approve", |_c, input| async move {
                Ok(Outcome::suspended(InterruptRequest::approval("ok?").payload((*input).clone())))
            }),
        ))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_failed_commit_leaves_no_partial_entry_and_surfaces_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("fault.db")).unwrap());
    let workflow = two_steps();
    let engine = engine(store.clone());
    let record = engine.create(&workflow, json!(1), Default::default()).await.unwrap();
    let value = json!("partial?");
    let hash = ContentHash::of_value(&value);
    let mut batch = JournalBatch {
        entries: vec![
            JournalEntry { path: StepPath::new("a"), at: Timestamp::EPOCH, record: Record::Started { attempt: 1 } },
            JournalEntry {
                path: StepPath::new("a"),
                at: Timestamp::EPOCH,
                record: Record::Completed { attempt: 1, output: hash, cached: false, started_at: None },
            },
        ],
        blobs: vec![(hash, Arc::new(value))],
        events: vec![],
    };
    store.fail_next_commit();
    let error = store.append(record.id, None, &mut batch).await.unwrap_err();
    assert!(error.to_string().contains("committing to the sqlite journal"), "{error}");
    let loaded = store.load(record.id).await.unwrap();
    assert!(loaded.entries.is_empty(), "nothing of the failed transaction is visible");
    // The next append starts again at sequence 0: the failed one left no gap or clash.
    let mut again = JournalBatch {
        entries: vec![JournalEntry {
            path: StepPath::new("a"),
            at: Timestamp::EPOCH,
            record: Record::Started { attempt: 1 },
        }],
        ..JournalBatch::default()
    };
    store.append(record.id, None, &mut again).await.unwrap();
    assert_eq!(store.load(record.id).await.unwrap().entries.len(), 1);
}

#[tokio::test]
async fn stored_content_that_no_longer_matches_its_hash_is_detected_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let big = "b".repeat(2_000);
    let workflow = Workflow::builder("outputs")
        .step(Node::step("small", fn_step(|_c, x: i64| async move { Ok(x * 2) })))
        .step(Node::step(
            "large",
            fn_step(move |_c, _x: i64| {
                let big = big.clone();
                async move { Ok(big) }
            }),
        ))
        .step(Node::dyn_step(
            "wait",
            dyn_fn_step("wait", |_c, _i| async move { Ok(Outcome::suspended(InterruptRequest::approval("ok?"))) }),
        ))
        .build()
        .unwrap();
    let report = engine(store.clone()).start(&workflow, json!(21)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    assert!(store.load(report.run_id).await.is_ok());
    let raw = rusqlite::Connection::open(&path).unwrap();

    // A large output lives in `blobs` (lz4-compressed): tamper with it.
    let large_hash = ContentHash::of_value(&json!("b".repeat(2_000)));
    let original: Vec<u8> =
        raw.query_row("SELECT data FROM blobs WHERE hash = ?1", [&large_hash.as_bytes()[..]], |r| r.get(0)).unwrap();
    raw.execute(
        "UPDATE blobs SET codec = 0, data = CAST('\"c\"' AS BLOB) WHERE hash = ?1",
        [&large_hash.as_bytes()[..]],
    )
    .unwrap();
    let error = store.load(report.run_id).await.unwrap_err();
    assert!(matches!(error, StoreError::Corrupt(hash) if hash == large_hash), "{error}");
    raw.execute(
        "UPDATE blobs SET codec = 1, data = ?2 WHERE hash = ?1",
        rusqlite::params![&large_hash.as_bytes()[..], original],
    )
    .unwrap();
    assert!(store.load(report.run_id).await.is_ok(), "restored");

    // A small output (42) lives inline in its journal row: tamper with that.
    let changed = raw.execute("UPDATE journal SET value = CAST('43' AS BLOB) WHERE path = 'small'", []).unwrap();
    assert_eq!(changed, 1);
    let error = store.load(report.run_id).await.unwrap_err();
    assert!(matches!(error, StoreError::Corrupt(hash) if hash == ContentHash::of_value(&json!(42))), "{error}");
}

#[tokio::test]
async fn a_run_suspended_in_one_process_is_approved_and_finished_from_another() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handover.db");
    let workflow = two_steps();
    let run = {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let report = engine(store).start(&workflow, json!(5)).await.unwrap();
        assert_eq!(report.status, RunStatus::Suspended);
        report
    };
    // A fresh store over the same file stands for another process.
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let other = engine(store.clone());
    let pending = other.report(run.run_id).await.unwrap();
    assert_eq!(pending.pending.len(), 1);
    other.resolve(run.run_id, &pending.pending[0].id, Decision::Approve, &Caller::default()).await.unwrap();
    let done = other.resume(&workflow, run.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!(10)));
    let loaded = store.load(run.run_id).await.unwrap();
    assert_eq!(loaded.record.status, RunStatus::Completed);
    assert_eq!(loaded.record.output, Some(json!(10)));
}

#[tokio::test]
async fn reopening_applies_migrations_once_and_sets_the_pragmas() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pragmas.db");
    for synchronous in [Synchronous::Full, Synchronous::Normal] {
        let store = SqliteStore::open_with(&path, SqliteOptions { synchronous, ..SqliteOptions::default() }).unwrap();
        drop(store);
    }
    let raw = rusqlite::Connection::open(&path).unwrap();
    let mode: String = raw.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let migrations: i64 = raw.query_row("SELECT COUNT(*) FROM stepwright_migrations", [], |r| r.get(0)).unwrap();
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/sqlite"))
        .unwrap()
        .filter(|f| f.as_ref().unwrap().path().extension().is_some_and(|e| e == "sql"))
        .count();
    assert_eq!(migrations as usize, files, "each migration is recorded once, however often the store opens");
}

#[tokio::test]
async fn a_message_sent_from_another_process_reaches_a_parked_loop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let workflow = Workflow::builder("chat")
        .step(
            stepwright_core::Loop::new(
                "chat",
                10,
                [Node::step(
                    "reply",
                    fn_step(|ctx: stepwright_core::StepContext, _x: serde_json::Value| async move {
                        Ok(format!("got {}", ctx.scope().var("loop").unwrap()["message"]))
                    }),
                )],
            )
            .inbox("in", std::time::Duration::from_millis(800)),
        )
        .build()
        .unwrap();
    let run: stepwright_core::RunId = "01890000-0000-7000-8000-00000000a11b".parse().unwrap();
    let here = engine(Arc::new(SqliteStore::open(&path).unwrap()));
    let parked = {
        let workflow = workflow.clone();
        tokio::spawn(async move {
            here.start_with(
                &workflow,
                json!(null),
                stepwright_core::StartOptions { run_id: Some(run), ..Default::default() },
            )
            .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // Another process: its own store over the same file.
    let there = engine(Arc::new(SqliteStore::open(&path).unwrap()));
    there.send(run, "in", json!("hello")).await.unwrap();
    let report = parked.await.unwrap().unwrap();
    assert_eq!(report.output, Some(json!("got \"hello\"")));
    // The consumed message is journaled with its sequence number: a later resume of a
    // new loop iteration would continue after it.
    let loaded = there.store().load(run).await.unwrap();
    let taken = loaded.entries.iter().find(|e| e.path.as_str() == "chat#1/@inbox").unwrap();
    assert!(
        matches!(&taken.record, Record::Decided { choice: Choice::Message { message: Some(message), seq: Some(_) } } if message == "hello")
    );
}

/// A large input and output are stored compressed, as blobs are, and read back whole; small
/// ones stay readable JSON text.
#[tokio::test]
async fn large_run_inputs_and_outputs_are_stored_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("compressed.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let workflow = Workflow::builder("echo")
        .step(Node::step("same", fn_step(|_c, x: serde_json::Value| async move { Ok(x) })))
        .build()
        .unwrap();
    let big = json!({ "text": "all work and no play ".repeat(10_000) });
    let report = engine(store.clone()).start(&workflow, big.clone()).await.unwrap();
    assert_eq!(report.output.as_ref(), Some(&big));
    let small = engine(store.clone()).start(&workflow, json!("hi")).await.unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    let stored = |run: stepwright_core::RunId| -> (String, i64, String, i64) {
        raw.query_row(
            "SELECT typeof(input), length(input), typeof(output), length(output) FROM runs WHERE id = ?1",
            [run.as_uuid().as_bytes()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap()
    };
    let json_len = i64::try_from(serde_json::to_vec(&big).unwrap().len()).unwrap();
    let (input_type, input_len, output_type, output_len) = stored(report.run_id);
    assert_eq!((input_type.as_str(), output_type.as_str()), ("blob", "blob"));
    assert!(input_len * 20 < json_len && output_len * 20 < json_len, "{input_len} and {output_len} of {json_len}");
    assert_eq!(stored(small.run_id).0, "text", "small values stay JSON text");
    // Read back whole, by this process and by a fresh one.
    let reopened = SqliteStore::open(&path).unwrap();
    let loaded = reopened.load(report.run_id).await.unwrap().record;
    assert_eq!((*loaded.input).clone(), big);
    assert_eq!(loaded.output, Some(big));
}

/// `used_bytes` counts the pages a store's runs occupy once its log is folded in: it grows
/// with what is stored, and a file that is not there is an error, not zero.
#[tokio::test]
async fn used_bytes_grows_with_what_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("size.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let empty = stepwright_store::used_bytes(&path).unwrap();
    assert!(empty > 0, "the schema takes pages");
    let engine = engine(store.clone());
    for n in 0..50 {
        // Hashes do not compress, so the input takes its size on disk.
        let padding: String = (0..30).map(|i| ContentHash::of_value(&json!([n, i])).to_hex()).collect();
        engine.start(&two_steps(), json!({ "n": n, "padding": padding })).await.unwrap();
    }
    let full = stepwright_store::used_bytes(&path).unwrap();
    assert!(full > empty + 50 * 1_000, "{empty} → {full}");
    assert!(stepwright_store::used_bytes(&dir.path().join("missing/none.db")).is_err());
}

/// `open` reads a store URL the same way for every host: SQLite by path, an unknown scheme
/// as the caller's mistake, a file that cannot be created as the backend's error.
#[tokio::test]
async fn open_takes_a_store_url() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("opened.db").display());
    let store = stepwright_store::open(&url).await.unwrap();
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).build();
    let report = engine.start(&two_steps(), json!(2)).await.unwrap();
    assert_eq!(store.load(report.run_id).await.unwrap().record.id, report.run_id);

    let unknown = stepwright_store::open("mysql://db/runs").await.err().expect("not a store URL");
    assert!(matches!(unknown, stepwright_store::OpenError::UnknownScheme { .. }), "{unknown}");
    let missing = format!("sqlite://{}", dir.path().join("no/such/dir/x.db").display());
    let failed = stepwright_store::open(&missing).await.err().expect("no such directory");
    assert!(matches!(failed, stepwright_store::OpenError::Backend { .. }), "{failed}");
}
