//! Limits are named: when a link runs out of file descriptors (`EMFILE`, the process's limit;
//! `ENFILE`, the system's) its error says which limit, its soft and hard values, how many
//! descriptors the process holds and how many more it needed, and the fix — instead of a
//! bare "Too many open files" (or worse, a misleading "lost rank") far from the cause. The
//! same for threads ([`thread`]) and memory ([`memory`]: a shared-memory ring that cannot be
//! created or mapped).

use super::TransportError;
use std::io;

/// Whether `e` is the process (`EMFILE`) or the system (`ENFILE`) running out of descriptors.
pub fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The soft and hard `RLIMIT_NOFILE` (`ulimit -n`, `ulimit -Hn`); `None` where unlimited or
/// unreadable.
pub fn descriptor_limit() -> (Option<u64>, Option<u64>) {
    rlimit(libc::RLIMIT_NOFILE).unwrap_or((None, None))
}

/// A resource limit's soft and hard values (`None`: unlimited); `None` when unreadable.
fn rlimit(resource: libc::__rlimit_resource_t) -> Option<(Option<u64>, Option<u64>)> {
    // SAFETY: an all-zero rlimit is valid; getrlimit only writes it.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a live rlimit for the call to fill.
    if unsafe { libc::getrlimit(resource, &mut r) } != 0 {
        return None;
    }
    let value = |v: libc::rlim_t| -> Option<u64> { (v != libc::RLIM_INFINITY).then_some(v) };
    Some((value(r.rlim_cur), value(r.rlim_max)))
}

/// A soft limit for a message: `show(value)`, "unlimited" or "unknown".
fn soft(resource: libc::__rlimit_resource_t, show: impl Fn(u64) -> String) -> String {
    match rlimit(resource) {
        None => "unknown".into(),
        Some((None, _)) => "unlimited".into(),
        Some((Some(v), _)) => show(v),
    }
}

/// Descriptors this process holds now (`/proc/self/fd`); `None` without /proc.
pub fn descriptors_open() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count().saturating_sub(1))
}

/// The error for `e` (see [`out_of_descriptors`]) while doing `what`, where the link needed
/// `more` descriptors beyond those it holds for `connections` connections.
pub fn descriptors(what: String, e: &io::Error, more: usize, connections: usize) -> TransportError {
    let (soft, hard) = descriptor_limit();
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let open = descriptors_open().map_or("all of them".to_string(), |n| n.to_string());
    let system = e.raw_os_error() == Some(libc::ENFILE);
    let limit = if system {
        format!(
            "the system's open file table is full (ENFILE: fs.file-max); this process holds {open}"
        )
    } else {
        format!(
            "this process may hold {} descriptors (ulimit -n: soft {}, hard {}) and holds {open}",
            show(soft),
            show(soft),
            show(hard)
        )
    };
    let suggest = soft.map_or(4096, |s| (s * 2).max(1024));
    let fix = if system {
        "raise fs.file-max (sysctl), or run fewer ranks per host".to_string()
    } else {
        format!(
            "raise the limit before starting the job (`ulimit -n {suggest}`, at most the hard limit; \
             LimitNOFILE= or limits.conf for a service), or lower PIPECAST_MAX_CONNECTIONS"
        )
    };
    TransportError::Setup {
        what,
        error: format!(
            "out of file descriptors ({e}): {limit}; it holds {connections} pipecast connections \
             and needed {more} more for the broadcast in flight: {fix}"
        ),
    }
}

/// Why a thread could not start (`e`, from `std::thread::Builder::spawn`), naming the limits
/// that refuse one: the user's processes and threads (`ulimit -u`, `RLIMIT_NPROC`), the
/// system's (`kernel.threads-max`), or memory for its stack.
pub fn thread(what: &str, e: &io::Error) -> String {
    let nproc = soft(libc::RLIMIT_NPROC, |v| v.to_string());
    let max = std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!(
        "cannot start {what} ({e}): pipecast needs at most two threads per process, whatever \
         the number of communicators; the limits that refuse one are the user's processes and \
         threads (ulimit -u: {nproc}), the system's threads (kernel.threads-max: {max}) and \
         memory for the thread's stack: raise the one that is reached, or run fewer ranks per host"
    )
}

/// Whether `e` is memory refused: `ENOMEM` (the address space, `ulimit -v`, or the host),
/// `ENOSPC` (a full tmpfs), `EFBIG` (a file size limit, `ulimit -f`).
pub fn out_of_memory(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOMEM | libc::ENOSPC | libc::EFBIG)
    )
}

/// A soft resource limit: its value in bytes (or blocks for `RLIMIT_FSIZE`), "unlimited", or
/// "unknown".
fn soft_limit(resource: libc::__rlimit_resource_t) -> String {
    soft(resource, |v| format!("{} KiB", v / 1024))
}

/// The host's available memory (`MemAvailable` of /proc/meminfo), as written there.
fn available_memory() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .map(|l| l["MemAvailable:".len()..].trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Why `what` could not get `bytes` bytes of memory (`e`, from `memfd_create`, `ftruncate`,
/// `mmap`), naming the limits that refuse it with their values, the count, and the fix.
pub fn memory(what: &str, e: &io::Error, bytes: u64) -> String {
    let reason = if out_of_memory(e) {
        "out of memory"
    } else {
        "refused"
    };
    format!(
        "{what}: {reason} ({e}): it needed {bytes} bytes ({} MiB) of shared memory (a memfd, \
         counted as the host's memory and the job's memory cgroup, not /dev/shm); the limits \
         that refuse it are this process's address space (ulimit -v: {}), its file size \
         (ulimit -f: {}), the job's memory cgroup (memory.max) and the host's free memory \
         (MemAvailable: {}): raise the one that is reached (`ulimit -v unlimited` before \
         starting the job), or run without the ring (PIPECAST_SHM=cma, single-copy, or \
         PIPECAST_SHM=off), or fewer ranks per host",
        bytes.div_ceil(1 << 20),
        soft_limit(libc::RLIMIT_AS),
        soft_limit(libc::RLIMIT_FSIZE),
        available_memory()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_error_names_the_limits() {
        let e = io::Error::from_raw_os_error(libc::EAGAIN);
        let m = super::thread("the progress thread", &e);
        for want in [
            "the progress thread",
            "ulimit -u",
            "kernel.threads-max",
            "at most two",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
    }

    use super::*;

    #[test]
    fn a_memory_error_names_the_limits_the_count_and_the_fix() {
        let e = io::Error::from_raw_os_error(libc::ENOMEM);
        assert!(out_of_memory(&e));
        assert!(!out_of_memory(&io::Error::from_raw_os_error(libc::EBADF)));
        let m = memory("shared memory: create the staging ring", &e, 8 << 20);
        for want in [
            "staging ring",
            "out of memory",
            "8388608 bytes (8 MiB)",
            "ulimit -v",
            "memory.max",
            "MemAvailable",
            "PIPECAST_SHM=cma",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
    }

    #[test]
    fn the_error_names_the_limit_and_the_fix() {
        let e = io::Error::from_raw_os_error(libc::EMFILE);
        assert!(out_of_descriptors(&e));
        assert!(!out_of_descriptors(&io::Error::from_raw_os_error(
            libc::ECONNREFUSED
        )));
        let text = descriptors("connect to rank 3".into(), &e, 2, 7).to_string();
        for want in [
            "connect to rank 3",
            "ulimit -n",
            "soft",
            "hard",
            "needed 2 more",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        let (soft, _) = descriptor_limit();
        if let Some(s) = soft {
            assert!(text.contains(&format!("soft {s}")), "{text}");
        }
        let text = descriptors(
            "accept".into(),
            &io::Error::from_raw_os_error(libc::ENFILE),
            1,
            0,
        )
        .to_string();
        assert!(text.contains("fs.file-max"), "{text}");
    }
}
