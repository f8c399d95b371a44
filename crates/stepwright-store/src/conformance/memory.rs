//! The memory bank.

use super::*;

pub(super) fn address(tenant: &str, scope: MemoryScope, namespace: &str, key: &str) -> MemoryAddress {
    MemoryAddress { tenant: tenant.into(), scope, namespace: namespace.into(), key: key.into() }
}

pub(super) fn item(address: MemoryAddress, value: serde_json::Value, at: i64) -> MemoryItem {
    MemoryItem::new(address, value, Timestamp::from_micros(at))
}

pub(super) fn keys(hits: &[stepwright_core::MemoryHit]) -> Vec<&str> {
    hits.iter().map(|h| h.item.address.key.as_str()).collect()
}

/// The memory bank: put, get, replace, delete, full-text search (any word, ranked, whole
/// words, case-insensitive), listing without a query, limits, and isolation between
/// tenants, scopes and namespaces.
pub async fn memory_bank_stores_and_recalls<S: MemoryBank + ?Sized>(store: &S) {
    let alice = MemoryScope::User("alice".into());
    let at = |key: &str| address("acme", alice.clone(), "facts", key);
    let search = |query: Option<&str>, limit: usize| MemorySearch {
        tenant: "acme".into(),
        scope: alice.clone(),
        namespace: "facts".into(),
        query: query.map(str::to_owned),
        limit,
    };
    let tea = item(at("tea"), json!("Alice likes green tea and hiking"), 1);
    store.memory_put(tea.clone()).await.expect("put");
    store.memory_put(item(at("coffee"), json!("Bob prefers coffee"), 2)).await.expect("put");
    let mail = item(at("mail"), json!({ "note": "her address is alice@example.com", "floor": 42, "ok": true }), 3);
    assert_eq!(mail.text, "42 her address is alice@example.com", "strings and numbers, members in key order");
    store.memory_put(mail.clone()).await.expect("put");
    // The same key elsewhere: another tenant, another user, another namespace, a session.
    store.memory_put(item(address("other", alice.clone(), "facts", "tea"), json!("green tea"), 4)).await.expect("put");
    store
        .memory_put(item(address("acme", MemoryScope::User("bob".into()), "facts", "tea"), json!("green"), 4))
        .await
        .expect("put");
    store.memory_put(item(address("acme", alice.clone(), "prefs", "tea"), json!("green"), 4)).await.expect("put");
    store
        .memory_put(item(address("acme", MemoryScope::Session("s".into()), "facts", "tea"), json!("green"), 4))
        .await
        .expect("put");
    store.memory_put(item(address("acme", MemoryScope::Global, "facts", "tea"), json!("green"), 4)).await.expect("put");

    assert_eq!(store.memory_get(at("tea")).await.expect("get"), Some(tea.clone()));
    assert_eq!(store.memory_get(at("nothing")).await.expect("get"), None);

    let hits = store.memory_search(search(Some("GREEN tea?"), 10)).await.expect("search");
    assert_eq!(keys(&hits), vec!["tea"], "one tenant, scope and namespace; case-insensitive");
    assert_eq!(hits[0].item, tea);
    assert!(hits[0].score > 0.0);
    let hits = store.memory_search(search(Some("alice hiking"), 10)).await.expect("search");
    assert_eq!(keys(&hits), vec!["tea", "mail"], "any word matches; more words rank higher");
    let hits = store.memory_search(search(Some("mail to alice@example.com"), 10)).await.expect("search");
    assert_eq!(keys(&hits), vec!["mail", "tea"], "an address is searched by its words");
    assert!(store.memory_search(search(Some("hik"), 10)).await.expect("search").is_empty(), "whole words only");
    assert!(store.memory_search(search(Some("?! -"), 10)).await.expect("search").is_empty(), "no words, no hits");
    assert_eq!(keys(&store.memory_search(search(Some("42"), 10)).await.expect("search")), vec!["mail"]);
    assert_eq!(keys(&store.memory_search(search(Some("alice hiking"), 1)).await.expect("search")), vec!["tea"]);

    let newest = store.memory_search(search(None, 2)).await.expect("list");
    assert_eq!(keys(&newest), vec!["mail", "coffee"], "without a query: the newest first");
    assert!(newest.iter().all(|h| h.score == 0.0));

    // Writing an address again replaces the item and its text in the index.
    let replaced = item(at("tea"), json!({ "drink": "black coffee" }), 5);
    store.memory_put(replaced.clone()).await.expect("replace");
    assert_eq!(store.memory_get(at("tea")).await.expect("get"), Some(replaced));
    assert!(store.memory_search(search(Some("green hiking"), 10)).await.expect("search").is_empty());
    assert_eq!(keys(&store.memory_search(search(Some("coffee"), 10)).await.expect("search")).len(), 2);

    assert!(store.memory_delete(at("coffee")).await.expect("delete"));
    assert!(!store.memory_delete(at("coffee")).await.expect("delete again"));
    assert_eq!(keys(&store.memory_search(search(Some("coffee"), 10)).await.expect("search")), vec!["tea"]);
    let elsewhere = store.memory_get(address("other", alice.clone(), "facts", "tea")).await.expect("get");
    assert_eq!(elsewhere.map(|i| i.value), Some(json!("green tea")), "other tenants are untouched");

    let invalid = store.memory_put(item(at(""), json!(1), 6)).await.expect_err("an empty key");
    assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid}");
    let invalid = store
        .memory_put(item(address("acme", alice.clone(), &"n".repeat(201), "k"), json!(1), 6))
        .await
        .expect_err("a long namespace");
    assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid}");
}

/// Items scoped to a run are erased with it; other scopes stay.
pub async fn run_memory_goes_with_its_run<S: Store + MemoryBank + ?Sized>(store: &S) {
    let run = record(70, "flow", RunStatus::Completed, 1);
    store.create_run(run.clone()).await.expect("create");
    let own = address("", MemoryScope::Run(run.id), "scratch", "k");
    let kept = address("", MemoryScope::Global, "scratch", "k");
    store.memory_put(item(own.clone(), json!("draft one"), 1)).await.expect("put");
    store.memory_put(item(kept.clone(), json!("draft two"), 1)).await.expect("put");
    let found = store.memory_get(own.clone()).await.expect("get").expect("stored");
    assert_eq!(found.address.scope, MemoryScope::Run(run.id), "the scope reads back");
    store.erase_run(run.id).await.expect("erase");
    assert_eq!(store.memory_get(own).await.expect("get"), None);
    assert!(store.memory_get(kept).await.expect("get").is_some());
}
