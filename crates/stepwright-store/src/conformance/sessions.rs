//! Agent sessions: history kept for its owner.

use super::*;

pub(super) fn owner(tenant: Option<&str>, user: Option<&str>) -> SessionOwner {
    SessionOwner { tenant: tenant.map(str::to_owned), user: user.map(str::to_owned) }
}

pub(super) fn append(
    session: &str,
    owner: &SessionOwner,
    key: &str,
    messages: &[serde_json::Value],
    max: usize,
) -> SessionAppend {
    SessionAppend {
        session: session.into(),
        owner: owner.clone(),
        key: key.into(),
        messages: messages.to_vec(),
        max_stored: max,
        at: Timestamp::from_micros(1_000),
    }
}

/// Sessions: history in order, newest `limit`, idempotent appends, trimming to the cap,
/// and every operation refused to anyone but the owner (tenant and user).
pub async fn sessions_keep_history_for_their_owner<S: SessionStore + ?Sized>(store: &S) {
    let alice = owner(Some("acme"), Some("alice"));
    assert!(store.session_history("s-1", &alice, 10).await.expect("read").is_empty(), "no session, no history");
    let first =
        [json!({ "role": "user", "content": "héllo ✓" }), json!({ "role": "assistant", "content": "hi" }), json!(3)];
    let done = store.append_to_session(append("s-1", &alice, "run-a/step", &first, 100)).await.expect("append");
    assert!(done.applied);
    assert_eq!(done.stored, 3);
    let history = store.session_history("s-1", &alice, 10).await.expect("read");
    assert_eq!(history.iter().map(|m| m.message.clone()).collect::<Vec<_>>(), first.to_vec());
    assert_eq!(history.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
    let newest = store.session_history("s-1", &alice, 2).await.expect("read");
    assert_eq!(newest.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2], "the newest two, oldest first");

    let again = store.append_to_session(append("s-1", &alice, "run-a/step", &first, 100)).await.expect("append");
    assert_eq!((again.applied, again.stored), (false, 3), "a repeated append key changes nothing");

    let more = [json!("four"), json!("five")];
    let trimmed = store.append_to_session(append("s-1", &alice, "run-b/step", &more, 4)).await.expect("append");
    assert_eq!((trimmed.applied, trimmed.stored), (true, 4));
    let history = store.session_history("s-1", &alice, 100).await.expect("read");
    assert_eq!(history.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4], "the oldest beyond the cap go");
    assert_eq!(history[3].message, json!("five"));

    for stranger in [owner(Some("acme"), Some("bob")), owner(Some("other"), Some("alice")), owner(None, None)] {
        let denied = store.session_history("s-1", &stranger, 10).await.expect_err("another owner may not read");
        assert!(matches!(&denied, StoreError::AccessDenied(m) if !m.contains("alice")), "{denied}");
        let denied = store.append_to_session(append("s-1", &stranger, "x", &more, 10)).await.expect_err("nor write");
        assert!(matches!(denied, StoreError::AccessDenied(_)), "{denied}");
        let denied = store.delete_session("s-1", &stranger).await.expect_err("nor delete");
        assert!(matches!(denied, StoreError::AccessDenied(_)), "{denied}");
    }
    assert_eq!(store.session_history("s-1", &alice, 100).await.expect("read").len(), 4, "nothing changed");

    // A session's owner is whoever wrote first, anonymous included.
    let nobody = owner(None, None);
    store.append_to_session(append("s-2", &nobody, "k", &more, 10)).await.expect("anonymous session");
    assert_eq!(store.session_history("s-2", &nobody, 10).await.expect("read").len(), 2);
    assert!(matches!(store.session_history("s-2", &alice, 10).await, Err(StoreError::AccessDenied(_))));

    let invalid = store.session_history("", &alice, 10).await.expect_err("an empty id");
    assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid}");
    let invalid =
        store.append_to_session(append(&"x".repeat(201), &alice, "k", &more, 10)).await.expect_err("too long");
    assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid}");

    assert!(store.delete_session("s-1", &alice).await.expect("delete"));
    assert!(!store.delete_session("s-1", &alice).await.expect("delete again"));
    assert!(store.session_history("s-1", &alice, 10).await.expect("read").is_empty());
    let bob = owner(Some("acme"), Some("bob"));
    let reborn = store.append_to_session(append("s-1", &bob, "run-a/step", &more, 10)).await.expect("a new session");
    assert_eq!((reborn.applied, reborn.stored), (true, 2), "a deleted session's append keys go with it");
}
