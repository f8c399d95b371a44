//! Who works on an experiment (decision 90): a server holds the experiments it works on and
//! renews the hold as it goes; another takes up one whose hold lapsed, or whose holder's
//! process on this host is gone, and goes on without recomputing what was kept. Taking is a
//! compare-and-set on the holder seen, so of two servers one does.

use std::time::Duration;

use stepwright_core::store::experiment::{ExperimentHold, ExperimentRecord, ExperimentStore};
use stepwright_core::{Engine, Timestamp};

use crate::AppError;

/// How long a hold lasts unless renewed.
pub const HOLD_FOR: Duration = Duration::from_secs(30);

/// How often a holder renews its hold (and a server looks for experiments to take up).
pub const RENEW_EVERY: Duration = Duration::from_secs(10);

/// A hold for `holder` from `now`.
#[must_use]
pub fn hold_from(holder: &str, now: Timestamp) -> ExperimentHold {
    ExperimentHold { holder: holder.to_owned(), until: now.plus(HOLD_FOR) }
}

/// Whether `record`'s holder stopped: its hold lapsed, or its process on this host is gone.
/// An experiment no one holds (a CLI's) has no holder to stop.
#[must_use]
pub fn holder_stopped(record: &ExperimentRecord, now: Timestamp) -> bool {
    record.hold.as_ref().is_some_and(|hold| hold.until < now || stepwright_core::is_dead_local_process(&hold.holder))
}

/// Takes hold of a running experiment for `holder`: one no one holds, one `holder` holds
/// already, or one whose holder stopped.
///
/// # Errors
/// [`AppError::ExperimentHeld`] when another holds it (or took it first); the store failing.
pub async fn take_hold(
    kept: &dyn ExperimentStore,
    record: &ExperimentRecord,
    holder: &str,
    now: Timestamp,
) -> Result<(), AppError> {
    let seen = record.hold.as_ref().map(|hold| hold.holder.clone());
    let held_by_another = record.hold.as_ref().is_some_and(|hold| hold.holder != holder);
    if held_by_another && !holder_stopped(record, now) {
        return Err(held(record));
    }
    if kept.experiment_hold(record.id, seen, hold_from(holder, now)).await? {
        return Ok(());
    }
    // Taken first by another: say by whom.
    let now_kept = kept.experiment(record.id).await?.unwrap_or_else(|| record.clone());
    Err(held(&now_kept))
}

fn held(record: &ExperimentRecord) -> AppError {
    let hold =
        record.hold.clone().unwrap_or(ExperimentHold { holder: "another process".into(), until: Timestamp::EPOCH });
    AppError::ExperimentHeld { id: record.id, holder: hold.holder, until: hold.until }
}

/// Renews `holder`'s hold every [`RENEW_EVERY`] until it is lost (another took it up: this
/// process was stopped longer than the hold lasts), then returns the error that says so.
pub(super) async fn keep_holding(
    engine: &Engine,
    kept: &dyn ExperimentStore,
    id: stepwright_core::RunId,
    holder: &str,
) -> AppError {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let renewed = kept.experiment_hold(id, Some(holder.to_owned()), hold_from(holder, engine.clock().now())).await;
        match renewed {
            Ok(true) => {}
            // A store that cannot be written now does not stop the work: the next renewal tells.
            Err(error) => tracing::warn!(experiment = %id, error = %error, "an experiment's hold could not be renewed"),
            Ok(false) => {
                // Cancelled elsewhere: not lost — the work sees the cancel and ends it.
                if let Ok(Some(record)) = kept.experiment(id).await
                    && record.state == stepwright_core::store::experiment::ExperimentState::Running
                {
                    return held(&record);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use stepwright_core::store::experiment::{ExperimentHold, ExperimentRecord, ExperimentState};
    use stepwright_core::{RunId, Timestamp};

    use super::holder_stopped;

    #[test]
    fn a_holder_stopped_when_its_hold_lapsed_or_its_process_here_is_gone() {
        let now = Timestamp::from_micros(1_000_000);
        let record = |holder: &str, until: i64| ExperimentRecord {
            id: RunId::from_bytes([1; 16]),
            tenant: Some("acme".into()),
            name: "e".into(),
            workflow: "w".into(),
            spec: serde_json::json!({}),
            state: ExperimentState::Running,
            created_at: now,
            report: None,
            hold: Some(ExperimentHold { holder: holder.into(), until: Timestamp::from_micros(until) }),
        };
        let elsewhere = "serve@another-host:4242:0000abcd";
        assert!(holder_stopped(&record(elsewhere, 999_999), now), "lapsed");
        assert!(!holder_stopped(&record(elsewhere, 1_000_001), now), "held, by a process this host cannot see");
        let me = stepwright_core::local_worker_id("serve", &stepwright_core::SeededEntropy::new(7));
        assert!(!holder_stopped(&record(&me, 1_000_001), now), "this process is alive");
        // A process of this host that is gone: a child that ran and was reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let (role_and_host, _nonce) = me.rsplit_once(':').unwrap();
        let (role_and_host, _pid) = role_and_host.rsplit_once(':').unwrap();
        let gone = format!("{role_and_host}:{pid}:00000000");
        assert!(holder_stopped(&record(&gone, 1_000_001), now), "its process is gone: {gone}");
        assert!(!holder_stopped(&ExperimentRecord { hold: None, ..record(elsewhere, 0) }, now), "no one holds a CLI's");
    }
}
