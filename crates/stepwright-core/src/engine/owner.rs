//! Worker names that say where they live, so that a lease held by a process that died on
//! this host can be taken over at once instead of after the lease lapses.
//!
//! A name is `{role}@{host}:{pid}:{nonce}`: the role says what kind of process holds runs
//! (`run`, `worker`, `serve`…), the host and process id where it runs, and the nonce keeps
//! two engines in one process (or a reused pid) apart.

use crate::runtime::Entropy;

/// This machine's name: the kernel's, else `$HOSTNAME`, else `localhost`.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|name| !name.is_empty()))
        .unwrap_or_else(|| "localhost".into())
}

/// A worker name for this process: `{role}@{host}:{pid}:{nonce}`.
pub fn local_worker_id(role: &str, entropy: &dyn Entropy) -> String {
    format!("{role}@{}:{}:{:08x}", host_name(), std::process::id(), entropy.next_u64() as u32)
}

/// The host and process id a worker name made by [`local_worker_id`] carries.
pub(crate) fn parse_local(owner: &str) -> Option<(&str, u32)> {
    let (_, place) = owner.split_once('@')?;
    let mut parts = place.rsplitn(3, ':');
    let _nonce = parts.next()?;
    let pid = parts.next()?.parse().ok()?;
    let host = parts.next()?;
    Some((host, pid))
}

/// Whether `owner` names a process on this host that no longer exists. Only answers yes
/// when it can tell (Linux's `/proc`); anything else — another host, a name of another
/// shape, a system without `/proc` — is presumed alive, and its lease must lapse first.
/// Hosts are told apart by name: containers that share a store and a host name but not a
/// process namespace must be given distinct host names.
pub fn is_dead_local_process(owner: &str) -> bool {
    let Some((host, pid)) = parse_local(owner) else { return false };
    if host != host_name() || pid == std::process::id() {
        return false;
    }
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return false;
    }
    // Gone, or a zombie its parent has not reaped yet (it runs nothing; its pid is not reused
    // until it is reaped, so the zombie at that pid is the worker that died).
    match std::fs::read_to_string(proc.join(pid.to_string()).join("stat")) {
        Err(_) => true,
        Ok(stat) => {
            stat.rsplit(')').next().is_some_and(|rest| matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SeededEntropy;

    #[test]
    fn a_zombie_is_dead() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        // Exited and not reaped: a zombie until `wait`.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let name = format!("worker@{}:{}:00000000", host_name(), child.id());
        assert!(is_dead_local_process(&name), "an unreaped exited process holds no run");
        child.wait().expect("wait");
        assert!(is_dead_local_process(&name));
    }

    #[test]
    fn names_carry_host_and_process() {
        let name = local_worker_id("run", &SeededEntropy::new(1));
        let (host, pid) = parse_local(&name).expect("parses");
        assert_eq!(host, host_name());
        assert_eq!(pid, std::process::id());
        assert!(name.starts_with("run@"));
        assert_eq!(parse_local("cli@host"), None, "old names are not local process names");
        assert_eq!(parse_local("worker@a:b:c:42:beef"), Some(("a:b:c", 42)), "a host may hold colons");
    }

    #[test]
    fn only_a_gone_process_on_this_host_is_dead() {
        assert!(!is_dead_local_process(&local_worker_id("run", &SeededEntropy::new(1))), "this process lives");
        let child = std::process::Command::new("true").spawn().expect("spawn").wait().expect("wait");
        assert!(child.success());
        // A pid far above any the kernel hands out here is free.
        let gone = format!("run@{}:{}:00000000", host_name(), 4_000_000_000u32);
        if std::path::Path::new("/proc/self").exists() {
            assert!(is_dead_local_process(&gone));
        }
        assert!(!is_dead_local_process(&format!("run@elsewhere:{}:00000000", 4_000_000_000u32)));
        assert!(!is_dead_local_process("worker-17"), "names of another shape are presumed alive");
    }
}
