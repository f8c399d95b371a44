//! Definitions kept by hash, the step cache, and run inboxes.

use super::*;

/// The step cache answers what was kept under a key, exactly as kept (key order, large
/// numbers), keeps the first output under a key, and keeps keys apart.
pub async fn the_step_cache_keeps_the_first_output_by_key<S: stepwright_core::StepCache + ?Sized>(store: &S) {
    let (one, two) = (ContentHash::of_bytes(b"key one"), ContentHash::of_bytes(b"key two"));
    assert_eq!(store.cached(&one).await.expect("read"), None, "an empty cache has nothing");
    let output = json!({ "zeta": 1, "alpha": [1.5, "x", null], "big": 9_007_199_254_740_993_u64 });
    store.keep(&one, &output).await.expect("keep");
    assert_eq!(store.cached(&one).await.expect("read"), Some(output.clone()));
    store.keep(&one, &json!("another")).await.expect("keeping a kept key again");
    assert_eq!(store.cached(&one).await.expect("read"), Some(output), "the first output stays");
    assert_eq!(store.cached(&two).await.expect("read"), None, "keys are apart");
    store.keep(&two, &json!(2)).await.expect("keep");
    let long_ago = Timestamp::from_micros(1_000_000);
    assert_eq!(store.forget_before(long_ago).await.expect("forget"), 0, "nothing was kept in 1970");
    let later = stepwright_core::store::quota::wall_now().plus(std::time::Duration::from_secs(3600));
    assert_eq!(store.forget_before(later).await.expect("forget"), 2, "both were kept before an hour from now");
    assert_eq!(store.cached(&one).await.expect("read"), None, "forgotten");
}

/// Workflow sources are kept by hash; the first one stays.
pub async fn definitions_are_kept_by_hash(store: &dyn Store) {
    use stepwright_core::journal::DefinitionSource;
    let hash = ContentHash::of_bytes(b"definition");
    assert_eq!(store.get_definition(hash).await.expect("read"), None);
    let source = DefinitionSource {
        format: "yaml".into(),
        name: "flow.yaml".into(),
        source: "workflow: x\n".into(),
        files: Default::default(),
    };
    store.put_definition(hash, source.clone()).await.expect("put");
    let other = DefinitionSource { source: "workflow: y\n".into(), ..source.clone() };
    store.put_definition(hash, other).await.expect("put again");
    assert_eq!(store.get_definition(hash).await.expect("read"), Some(source));
    // A source with the files it calls keeps them.
    let called = ContentHash::of_bytes(b"calls");
    let with_files = DefinitionSource {
        name: "main.yaml".into(),
        files: [("parts/x.yaml".to_owned(), "workflow: part\n".to_owned())].into(),
        ..DefinitionSource::default_yaml("workflow: main\n")
    };
    store.put_definition(called, with_files.clone()).await.expect("put");
    assert_eq!(store.get_definition(called).await.expect("read"), Some(with_files));
}

/// Inbox messages come back in posting order, per inbox, and go with an erased run.
pub async fn messages_keep_their_order(store: &dyn Store) {
    let run = record(50, "flow", RunStatus::Running, 1);
    store.create_run(run.clone()).await.expect("create");
    let first = store.post_message(run.id, "in", json!("one")).await.expect("post");
    store.post_message(run.id, "other", json!("elsewhere")).await.expect("post");
    let second = store.post_message(run.id, "in", json!({ "two": 2 })).await.expect("post");
    assert!(second > first);
    assert_eq!(store.next_message(run.id, "in", None).await.expect("read"), Some((first, json!("one"))));
    assert_eq!(store.next_message(run.id, "in", Some(first)).await.expect("read"), Some((second, json!({ "two": 2 }))));
    assert_eq!(store.next_message(run.id, "in", Some(second)).await.expect("read"), None);
    assert_eq!(store.next_message(id(51), "in", None).await.expect("read"), None, "inboxes are per run");
    store.erase_run(run.id).await.expect("erase");
    assert_eq!(store.next_message(run.id, "in", None).await.expect("read"), None, "erased with the run");
}
