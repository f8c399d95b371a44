//! Step tasks: born with their journal entry, claimed once, fenced by their lease.

use std::time::Duration;

use serde_json::json;
use stepwright_core::journal::JournalBatch;
use stepwright_core::store::task::{Beat, Claim, TaskAnswer, TaskFilter, TaskId, TaskLease, TaskSpec, TaskState};
use stepwright_core::{Record, RunStatus, StepPath, Store, StoreError};

use super::{entry, record, wall};

fn spec(id: &TaskId, handler: &str, lease_ms: u64, concurrency: Option<u32>) -> TaskSpec {
    TaskSpec {
        id: id.clone(),
        queue: "py".into(),
        handler: handler.into(),
        input: json!({ "doc": "d" }),
        idempotency_key: Some("key".into()),
        lease_ms,
        schedule_to_start_ms: None,
        concurrency,
        details: None,
        recompute: false,
        leased_to: None,
    }
}

fn claim(worker: &str, handlers: &[&str], max: usize) -> Claim {
    Claim {
        worker: worker.into(),
        tenant: "acme".into(),
        queue: "py".into(),
        handlers: handlers.iter().map(|h| (*h).to_owned()).collect(),
        max,
    }
}

/// A `dispatched` entry makes its task's row in the same append; concurrent claims take it
/// once; only the current lease answers it (a repeat is answered the same, a stale lease
/// never); a lease that runs out lapses the task; versions reach only workers offering
/// them; a tool's concurrency holds across claims; tasks are listed by the run's tenant.
pub async fn tasks_are_claimed_once_and_fenced_by_their_lease<S: Store + ?Sized>(store: &S) {
    let Some(tasks) = store.tasks() else { return };
    let run = record(1, "summarise", RunStatus::Running, wall().as_micros());
    let run_id = run.id;
    store.create_run(run).await.expect("created");
    let path = StepPath::new("summary");
    let (quick, slow, pinned, limited) = (
        TaskId::derive(run_id, &path, 1),
        TaskId::derive(run_id, &path, 2),
        TaskId::derive(run_id, &StepPath::new("pinned"), 1),
        TaskId::derive(run_id, &StepPath::new("limited"), 1),
    );
    let mut batch = JournalBatch::default();
    for (id, handler, lease_ms, limit) in [
        (&quick, "summarise", 60_000, None),
        (&slow, "summarise", 200, None),
        (&pinned, "summarise@2", 60_000, None),
        (&limited, "ocr", 60_000, Some(1)),
    ] {
        let record = Record::Dispatched { attempt: 1, task: spec(id, handler, lease_ms, limit) };
        batch.entries.push(entry("summary", wall().as_micros(), record));
    }
    store.append(run_id, None, &mut batch).await.expect("appended");
    let listed = tasks
        .list_tasks(&TaskFilter { tenant: Some("acme".into()), limit: 10, ..TaskFilter::default() })
        .await
        .expect("listed");
    assert_eq!(listed.len(), 4, "each dispatched entry made its task: {listed:?}");
    assert!(listed.iter().all(|t| t.state == TaskState::Pending && t.workflow == "summarise"));
    let other = TaskFilter { tenant: Some("globex".into()), limit: 10, ..TaskFilter::default() };
    assert!(tasks.list_tasks(&other).await.expect("listed").is_empty(), "another tenant sees none");
    // Each filter alone and together, and the limit.
    let count = |filter: TaskFilter| async move { tasks.list_tasks(&filter).await.expect("listed").len() };
    let all = || TaskFilter { limit: 10, ..TaskFilter::default() };
    assert_eq!(count(all()).await, 4);
    assert_eq!(count(TaskFilter { run: Some(run_id), ..all() }).await, 4);
    assert_eq!(
        count(TaskFilter { run: Some(stepwright_core::RunId::from_bytes([9; 16])), ..all() }).await,
        0,
        "another run's"
    );
    assert_eq!(count(TaskFilter { queue: Some("py".into()), ..all() }).await, 4);
    assert_eq!(count(TaskFilter { queue: Some("ts".into()), ..all() }).await, 0);
    assert_eq!(count(TaskFilter { state: Some(TaskState::Pending), ..all() }).await, 4);
    assert_eq!(count(TaskFilter { state: Some(TaskState::Claimed), ..all() }).await, 0);
    let together = TaskFilter {
        tenant: Some("acme".into()),
        queue: Some("py".into()),
        state: Some(TaskState::Pending),
        run: Some(run_id),
        limit: 3,
    };
    assert_eq!(count(together).await, 3, "the limit");

    // Ten workers claim at once: each task goes to one of them.
    let claims: Vec<Claim> = (0..10).map(|n| claim(&format!("w{n}"), &["summarise"], 5)).collect();
    let got = futures_util::future::join_all(claims.iter().map(|c| tasks.claim_tasks(c, wall()))).await;
    let mut ids: Vec<TaskId> = got.into_iter().flat_map(|r| r.expect("claimed")).map(|t| t.spec.id).collect();
    ids.sort();
    let mut expected = vec![quick.clone(), slow.clone()];
    expected.sort();
    assert_eq!(ids, expected, "the unversioned tasks, each once; the pinned one waits for version 2");
    let v2 = tasks.claim_tasks(&claim("v2", &["summarise@2"], 5), wall()).await.expect("claimed");
    assert_eq!(v2.iter().map(|t| &t.spec.id).collect::<Vec<_>>(), vec![&pinned]);

    // The current lease answers; a repeat is the same answer; another token is refused.
    let quick_row = tasks.settle_task(&quick, wall()).await.expect("read").expect("there");
    assert_eq!(quick_row.state, TaskState::Claimed);
    let lease = TaskLease { task: quick.clone(), token: quick_row.lease_token };
    let stale = TaskLease { task: quick.clone(), token: quick_row.lease_token + 1 };
    assert!(matches!(
        tasks.answer_task(&stale, TaskAnswer::Complete(json!(1)), wall()).await,
        Err(StoreError::TaskLeaseLost { .. })
    ));
    let done = tasks.answer_task(&lease, TaskAnswer::Complete(json!({ "summary": "s" })), wall()).await;
    assert_eq!(done.expect("answered"), TaskState::Completed);
    let again = tasks.answer_task(&lease, TaskAnswer::Complete(json!({ "summary": "s" })), wall()).await;
    assert_eq!(again.expect("a repeat"), TaskState::Completed);
    assert!(
        tasks
            .answer_task(&lease, TaskAnswer::Fail(stepwright_core::StepError::execution_failed("x")), wall())
            .await
            .is_err()
    );
    let row = tasks.settle_task(&quick, wall()).await.expect("read").expect("there");
    assert_eq!(row.output, Some(json!({ "summary": "s" })));

    // A lease renewed keeps; one left to run out lapses, and its late answer is refused.
    let slow_row = tasks.settle_task(&slow, wall()).await.expect("read").expect("there");
    let slow_lease = TaskLease { task: slow.clone(), token: slow_row.lease_token };
    let beats = tasks.heartbeat_tasks(&[(slow_lease.clone(), Some(json!({ "page": 3 })))], wall()).await.expect("beat");
    assert!(matches!(beats.as_slice(), [Beat::Renewed(_)]), "{beats:?}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let lapsed = tasks.settle_task(&slow, wall()).await.expect("read").expect("there");
    assert_eq!(lapsed.state, TaskState::Lapsed);
    assert_eq!(lapsed.details, Some(json!({ "page": 3 })), "the heartbeat's details are kept");
    assert!(matches!(
        tasks.answer_task(&slow_lease, TaskAnswer::Complete(json!(1)), wall()).await,
        Err(StoreError::TaskLeaseLost { .. })
    ));
    let beats = tasks.heartbeat_tasks(&[(slow_lease, None)], wall()).await.expect("beat");
    assert_eq!(beats, vec![Beat::Lost]);

    // Concurrency 1: a second claimer gets nothing while the first holds it; a release
    // puts it back for anyone.
    let first = tasks.claim_tasks(&claim("a", &["ocr"], 5), wall()).await.expect("claimed");
    assert_eq!(first.len(), 1);
    assert!(tasks.claim_tasks(&claim("b", &["ocr"], 5), wall()).await.expect("claimed").is_empty());
    let held = TaskLease { task: limited.clone(), token: first[0].lease_token };
    assert_eq!(tasks.answer_task(&held, TaskAnswer::Release, wall()).await.expect("released"), TaskState::Pending);
    let second = tasks.claim_tasks(&claim("b", &["ocr"], 5), wall()).await.expect("claimed");
    assert_eq!(second.len(), 1);
    assert!(second[0].lease_token > first[0].lease_token, "a new claim is a new token");

    // A run that is cancelled asks its workers to stop at their next heartbeat, and tells a
    // worker's claim which of the tasks it holds to stop: those claimed, of its tenant.
    let unknown = TaskId::new("tsk_unknown");
    let asked = [limited.clone(), pinned.clone(), quick.clone(), unknown];
    let among = |tenant: &'static str| {
        let asked = asked.clone();
        async move {
            let mut found = tasks.cancelling_among(tenant, &asked).await.expect("read");
            found.sort();
            found
        }
    };
    assert!(among("acme").await.is_empty(), "nothing to stop while the run goes on");
    let held = TaskLease { task: limited.clone(), token: second[0].lease_token };
    let update = stepwright_core::store::StatusUpdate {
        status: RunStatus::Cancelled,
        output: None,
        error: None,
        at: wall(),
        wake_at: None,
        fence: None,
    };
    store.set_status(run_id, update).await.expect("cancelled");
    let mut claimed = vec![limited, pinned];
    claimed.sort();
    assert_eq!(among("acme").await, claimed, "the claimed ones (not the answered one, nor an unknown id)");
    assert!(among("globex").await.is_empty(), "another tenant's worker is told nothing");
    let beats = tasks.heartbeat_tasks(&[(held, None)], wall()).await.expect("beat");
    assert!(matches!(beats.as_slice(), [Beat::Cancel(_)]), "{beats:?}");
}

/// A recompute's task has no journal entry behind it: the store writes its row on its own,
/// under the run's tenant and workflow, and workers claim and answer it like any other; the
/// run's journal does not change. A task for a run the store does not have is refused.
pub async fn a_recompute_dispatches_tasks_outside_the_journal<S: Store + ?Sized>(store: &S) {
    let Some(tasks) = store.tasks() else { return };
    let run = record(2, "summarise", RunStatus::Completed, wall().as_micros());
    let run_id = run.id;
    store.create_run(run).await.expect("created");
    let path = StepPath::new("summary");
    let id = TaskId::for_recompute(run_id, &path, 1, 7);
    assert_ne!(id, TaskId::derive(run_id, &path, 1), "never the run's own task");
    assert_ne!(id, TaskId::for_recompute(run_id, &path, 1, 8), "each recompute's own");
    let task = TaskSpec { recompute: true, ..spec(&id, "summarise", 60_000, None) };
    tasks.dispatch_for_recompute(run_id, &path, 1, &task, wall()).await.expect("dispatched");
    let claimed = tasks.claim_tasks(&claim("w", &["summarise"], 5), wall()).await.expect("claimed");
    assert_eq!(claimed.len(), 1);
    assert_eq!((&claimed[0].spec.id, claimed[0].spec.recompute, claimed[0].run), (&id, true, run_id));
    assert_eq!(claimed[0].workflow, "summarise");
    let lease = TaskLease { task: id.clone(), token: claimed[0].lease_token };
    let state = tasks.answer_task(&lease, TaskAnswer::Complete(json!("again")), wall()).await.expect("answered");
    assert_eq!(state, TaskState::Completed);
    assert_eq!(tasks.settle_task(&id, wall()).await.expect("read").expect("there").output, Some(json!("again")));
    assert!(store.load(run_id).await.expect("loaded").entries.is_empty(), "the run's journal is untouched");

    let unknown = stepwright_core::RunId::from_bytes([9; 16]);
    let stray =
        TaskSpec { recompute: true, ..spec(&TaskId::for_recompute(unknown, &path, 1, 7), "summarise", 1, None) };
    assert!(matches!(
        tasks.dispatch_for_recompute(unknown, &path, 1, &stray, wall()).await,
        Err(StoreError::RunNotFound(_))
    ));
}

/// A pushed task (an `http` tool in push mode) is born leased to its endpoint under token 1,
/// in the commit of its journal entry: no worker can claim it, and the endpoint answers it.
pub async fn a_pushed_task_is_born_leased_to_its_endpoint<S: Store + ?Sized>(store: &S) {
    let Some(tasks) = store.tasks() else { return };
    let run = record(3, "summarise", RunStatus::Running, wall().as_micros());
    let run_id = run.id;
    store.create_run(run).await.expect("created");
    let id = TaskId::derive(run_id, &StepPath::new("call"), 1);
    let endpoint = "https://fn.example.com/summarise";
    let task =
        TaskSpec { queue: "push".into(), leased_to: Some(endpoint.into()), ..spec(&id, "summarise", 60_000, None) };
    let at = wall();
    let mut batch = JournalBatch::default();
    batch.entries.push(entry("call", at.as_micros(), Record::Dispatched { attempt: 1, task }));
    store.append(run_id, None, &mut batch).await.expect("appended");
    let row = tasks.settle_task(&id, wall()).await.expect("read").expect("there");
    assert_eq!((row.state, row.worker.as_deref(), row.lease_token), (TaskState::Claimed, Some(endpoint), 1));
    assert_eq!(row.lease_expires, Some(at.plus(Duration::from_secs(60))));
    assert_eq!(row.claimed_at, Some(at));
    let push_claim = Claim { queue: "push".into(), ..claim("w", &["summarise"], 5) };
    assert!(tasks.claim_tasks(&push_claim, wall()).await.expect("claimed").is_empty(), "held by its endpoint");
    let lease = TaskLease { task: id.clone(), token: 1 };
    let state = tasks.answer_task(&lease, TaskAnswer::Complete(json!({ "summary": "s" })), wall()).await;
    assert_eq!(state.expect("answered"), TaskState::Completed);
}

/// A claim takes the oldest tasks it can and looks past older ones its worker cannot take (a
/// handler version it does not offer), however they fall among what it reads.
pub async fn a_claim_looks_past_tasks_its_worker_cannot_take<S: Store + ?Sized>(store: &S) {
    let Some(tasks) = store.tasks() else { return };
    let run = record(4, "summarise", RunStatus::Running, wall().as_micros());
    let run_id = run.id;
    store.create_run(run).await.expect("created");
    let base = wall().as_micros();
    let mut batch = JournalBatch::default();
    let mut takeable = Vec::new();
    // Oldest first: three for version 2, then four anyone takes.
    for n in 0..7 {
        let path = StepPath::new(&format!("s{n}"));
        let id = TaskId::derive(run_id, &path, 1);
        let handler = if n < 3 { "summarise@2" } else { "summarise" };
        if n >= 3 {
            takeable.push(id.clone());
        }
        let record = Record::Dispatched { attempt: 1, task: spec(&id, handler, 60_000, None) };
        batch.entries.push(entry(path.as_str(), base + n, record));
    }
    store.append(run_id, None, &mut batch).await.expect("appended");
    let first = tasks.claim_tasks(&claim("w1", &["summarise"], 2), wall()).await.expect("claimed");
    assert_eq!(first.iter().map(|t| &t.spec.id).collect::<Vec<_>>(), takeable.iter().take(2).collect::<Vec<_>>());
    let rest = tasks.claim_tasks(&claim("w2", &["summarise"], 5), wall()).await.expect("claimed");
    assert_eq!(rest.iter().map(|t| &t.spec.id).collect::<Vec<_>>(), takeable.iter().skip(2).collect::<Vec<_>>());
    let v2 = tasks.claim_tasks(&claim("w3", &["summarise@2"], 5), wall()).await.expect("claimed");
    assert_eq!(v2.len(), 3, "the version-2 tasks waited for a worker offering it");
}

/// An answer given with who may answer: a task that is missing or refused is left as it was;
/// one allowed is answered as `answer_task` answers it, under its lease only.
pub async fn an_answer_is_taken_only_from_who_may_answer<S: Store + ?Sized>(store: &S) {
    use stepwright_core::store::task::{Answered, MayAnswer};
    let Some(tasks) = store.tasks() else { return };
    let run = record(5, "summarise", RunStatus::Running, wall().as_micros());
    let run_id = run.id;
    store.create_run(run).await.expect("created");
    let path = StepPath::new("call");
    let id = TaskId::derive(run_id, &path, 1);
    let mut batch = JournalBatch::default();
    let dispatched = Record::Dispatched { attempt: 1, task: spec(&id, "summarise", 60_000, None) };
    batch.entries.push(entry("call", wall().as_micros(), dispatched));
    store.append(run_id, None, &mut batch).await.expect("appended");
    let token = tasks.claim_tasks(&claim("w", &["summarise"], 1), wall()).await.expect("claimed")[0].lease_token;
    let lease = TaskLease { task: id.clone(), token };
    let acme: MayAnswer = std::sync::Arc::new(|task| task.tenant.as_deref() == Some("acme"));
    let globex: MayAnswer = std::sync::Arc::new(|task| task.tenant.as_deref() == Some("globex"));
    let answer = || TaskAnswer::Complete(json!({ "summary": "s" }));

    let missing = TaskLease { task: TaskId::derive(run_id, &StepPath::new("nowhere"), 1), token };
    let none = tasks.answer_task_if(&missing, answer(), wall(), acme.clone()).await.expect("looked");
    assert_eq!(none, Answered::Missing);
    let refused = tasks.answer_task_if(&lease, answer(), wall(), globex).await.expect("looked");
    assert!(matches!(&refused, Answered::Refused(task) if task.spec.id == id), "{refused:?}");
    let row = tasks.settle_task(&id, wall()).await.expect("read").expect("there");
    assert_eq!((row.state, row.output), (TaskState::Claimed, None), "a refused answer wrote nothing");
    let stale = TaskLease { task: id.clone(), token: token + 1 };
    assert!(matches!(
        tasks.answer_task_if(&stale, answer(), wall(), acme.clone()).await,
        Err(StoreError::TaskLeaseLost { .. })
    ));
    let taken = tasks.answer_task_if(&lease, answer(), wall(), acme).await.expect("answered");
    let Answered::Taken { state, task } = taken else { panic!("taken: {taken:?}") };
    assert_eq!((state, task.run, &task.spec.id), (TaskState::Completed, run_id, &id));
    let row = tasks.settle_task(&id, wall()).await.expect("read").expect("there");
    assert_eq!((row.state, row.output), (TaskState::Completed, Some(json!({ "summary": "s" }))));
}
