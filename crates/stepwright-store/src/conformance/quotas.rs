//! Quotas shared by every process of a store.

/// A quota grants up to its limit in a window, to concurrent takers too, and then says how
/// long until the next window; asking (an amount of 0) takes nothing; a charge is added
/// whatever the window holds; quotas are counted apart by name.
pub async fn quotas_grant_up_to_their_limit_per_window<S: stepwright_core::store::quota::QuotaStore + ?Sized>(
    store: &S,
) {
    use std::time::Duration;
    use stepwright_core::store::quota::{Quota, QuotaTaken};
    let hour = Duration::from_secs(3600);
    let quota = Quota { name: "openai:abc".into(), limit: 10, window: hour };
    let takes = futures_util::future::join_all((0..25).map(|_| store.take_quota(&quota, 1))).await;
    let granted = takes.iter().filter(|t| matches!(t, Ok(QuotaTaken::Granted))).count();
    assert_eq!(granted, 10, "exactly the limit is granted to 25 concurrent takers: {takes:?}");
    assert!(
        takes.iter().all(|t| match t {
            Ok(QuotaTaken::Full { retry_in }) => *retry_in <= hour,
            other => matches!(other, Ok(QuotaTaken::Granted)),
        }),
        "the rest are told to wait for the next window: {takes:?}"
    );
    assert!(matches!(store.take_quota(&quota, 0).await, Ok(QuotaTaken::Full { .. })), "asking: full");
    let other = Quota { name: "openai:def".into(), limit: 100, window: hour };
    assert_eq!(store.take_quota(&other, 0).await.expect("ask"), QuotaTaken::Granted, "another quota has room");
    store.charge_quota(&other, 150).await.expect("charge past the limit");
    assert!(matches!(store.take_quota(&other, 0).await, Ok(QuotaTaken::Full { .. })), "charged: now full");
    assert!(matches!(store.take_quota(&other, 1).await, Ok(QuotaTaken::Full { .. })));
    // A short window lets through again once it has passed.
    let brief = Quota { name: "brief".into(), limit: 1, window: Duration::from_millis(200) };
    assert_eq!(store.take_quota(&brief, 1).await.expect("take"), QuotaTaken::Granted);
    // Taken until full: a take that fell at the very end of a window leaves the next one in
    // a new window (a busy machine can be that slow), which then fills.
    let retry_in = loop {
        match store.take_quota(&brief, 1).await.expect("take") {
            QuotaTaken::Full { retry_in } => break retry_in,
            QuotaTaken::Granted => {}
        }
    };
    tokio::time::sleep(retry_in + Duration::from_millis(10)).await;
    assert_eq!(store.take_quota(&brief, 1).await.expect("take"), QuotaTaken::Granted, "the next window");
}
