//! A command tool's process group: the command starts as the leader of a group of its own,
//! and the whole group — the children and grandchildren it forked — stops with its step.
//! When the step stops early (cancelled, timed out, its lease lost, the process shutting
//! down) the group is sent `SIGTERM` and, after a grace period, `SIGKILL`; when the command
//! exits, whatever it left behind in its group gets the same. A script's background job
//! therefore cannot go on doing its effect after the run says `cancelled` (what systemd
//! does to a unit's cgroup, with a process group: it needs no privileges or cgroup v2).

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How long a group has between `SIGTERM` and `SIGKILL` unless a tool says otherwise.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// Groups sent `SIGTERM` whose `SIGKILL` has not come yet (see [`process_groups_stopped`]).
static STOPPING: AtomicUsize = AtomicUsize::new(0);

/// A started command's process group. Dropping it stops the group (a no-op for a group
/// that is already empty).
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    /// The group's id: the leader's pid. `None` when the leader's pid was not known.
    id: Option<Pid>,
    grace: Duration,
}

impl ProcessGroup {
    /// The group led by `leader` (a child spawned with `process_group(0)`).
    pub(crate) fn led_by(leader: Option<u32>, grace: Duration) -> Self {
        let id = leader.and_then(|pid| i32::try_from(pid).ok()).map(Pid::from_raw);
        Self { id, grace }
    }

    /// Stops every process left in the group: `SIGTERM` now, `SIGKILL` after the grace
    /// period to whatever is still there. Only once; a group that is already empty costs
    /// one `kill(2)`.
    pub(crate) fn stop(&mut self) {
        let Some(group) = self.id.take() else { return };
        if killpg(group, Signal::SIGTERM).is_err() {
            // ESRCH: nobody is left in the group.
            return;
        }
        if self.grace.is_zero() {
            let _ = killpg(group, Signal::SIGKILL);
            return;
        }
        STOPPING.fetch_add(1, SeqCst);
        let grace = self.grace;
        // A thread, not a task: a drop may come while the runtime shuts down, and the
        // `SIGKILL` must still follow.
        let spawned = std::thread::Builder::new().name("stepwright-kill".into()).spawn(move || {
            let step = Duration::from_millis(50);
            let mut waited = Duration::ZERO;
            // Done early when the group empties (signal 0 only asks whether it exists).
            while waited < grace && killpg(group, None).is_ok() {
                std::thread::sleep(step);
                waited += step;
            }
            if waited >= grace {
                let _ = killpg(group, Signal::SIGKILL);
            }
            STOPPING.fetch_sub(1, SeqCst);
        });
        if spawned.is_err() {
            let _ = killpg(group, Signal::SIGKILL);
            STOPPING.fetch_sub(1, SeqCst);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until every command group this process was stopping is gone (each got its
/// `SIGKILL` or emptied on its own), or `within` passes: for a process about to exit, so
/// that a group sent `SIGTERM` at shutdown is not left without its `SIGKILL`. Says whether
/// all are gone.
pub async fn process_groups_stopped(within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while STOPPING.load(SeqCst) > 0 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}
