//! Limits are named: when a link runs out of file descriptors (`EMFILE`, the process's limit;
//! `ENFILE`, the system's) its error says which limit, its soft and hard values, how many
//! descriptors the process holds and how many more it needed, and the fix — instead of a
//! bare "Too many open files" (or worse, a misleading "lost rank") far from the cause. The
//! same for threads ([`thread`]) and memory ([`memory`]: a shared-memory ring that cannot be
//! created or mapped; [`heap`]: a link's own buffer, allocated by [`zeroed`] without aborting
//! the process, and sized from a peer's header only within [`memory_ceiling`]).

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

/// Why `what` could not get `bytes` bytes of this process's own memory (an allocation
/// refused: [`zeroed`]), naming the limits that refuse it with their values, the count, and
/// the fix: the [`memory`] error for a link's buffer rather than a shared-memory ring.
pub fn heap(what: &str, bytes: u64) -> TransportError {
    TransportError::Memory {
        what: what.to_string(),
        error: format!(
            "out of memory: it needed {bytes} bytes ({} MiB) of this process's memory; the \
             limits that refuse it are this process's address space (ulimit -v: {}), the \
             job's memory cgroup (memory.max) and the host's free memory (MemAvailable: {}): \
             raise the one that is reached (`ulimit -v unlimited` before starting the job), \
             or use smaller segments (PIPECAST_SEGMENT), or fewer ranks per host",
            bytes.div_ceil(1 << 20),
            soft_limit(libc::RLIMIT_AS),
            available_memory()
        ),
    }
}

/// `len` zeroed bytes, or `None` where the allocator refuses them: `vec![0; len]` without
/// the abort (the same zeroed allocation, so large ones stay untouched pages until written).
pub fn zeroed(len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: `layout` has a non-zero size (len > 0).
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` comes from the global allocator with `layout` (align 1, size `len`, which
    // is the capacity given), and all `len` bytes are initialised (zeroed).
    Some(unsafe { Vec::from_raw_parts(p, len, len) })
}

/// [`zeroed`], or the [`heap`] error naming `what`.
pub fn buffer(what: impl FnOnce() -> String, len: usize) -> Result<Vec<u8>, TransportError> {
    zeroed(len).ok_or_else(|| heap(&what(), len as u64))
}

/// Whether the lengths of segment `h` that rank `from` announced can be held by a process
/// that could ever hold `ceiling` bytes ([`memory_ceiling`]): the segment within its
/// message, the message within the ceiling. Checked before any memory is sized from them;
/// the error says what was announced and the limit. Pure (the fuzz target `tcp_frame` runs
/// it on every header).
pub fn announced(from: usize, h: &crate::engine::DataHeader, ceiling: u64) -> Result<(), String> {
    if h.msize <= ceiling && u64::from(h.len) <= h.msize {
        return Ok(());
    }
    Err(format!(
        "rank {from} announced {} bytes of a {}-byte message, more than this process could \
         ever hold ({ceiling} bytes: the least of its address space, ulimit -v, and the \
         host's memory and swap, MemTotal + SwapTotal) or more than the message itself: not \
         a broadcast this rank can take part in (a rank of another job, or a corrupted stream)",
        h.len, h.msize
    ))
}

/// A `kB` line of /proc/meminfo, in bytes.
fn meminfo(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// The most memory this process could ever hold: its address space limit (`ulimit -v`),
/// the host's memory and swap (`MemTotal` + `SwapTotal`), and what a pointer reaches
/// (`isize::MAX`), whichever is least. A length a peer announces beyond it (a 2^60-byte
/// message) cannot be a broadcast this rank takes part in: an error before any allocation.
pub fn memory_ceiling() -> u64 {
    let mut most = isize::MAX as u64;
    if let Some((Some(v), _)) = rlimit(libc::RLIMIT_AS) {
        most = most.min(v);
    }
    if let Ok(m) = std::fs::read_to_string("/proc/meminfo") {
        if let Some(total) = meminfo(&m, "MemTotal:") {
            most = most.min(total.saturating_add(meminfo(&m, "SwapTotal:").unwrap_or(0)));
        }
    }
    most
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
    fn a_refused_allocation_is_the_named_memory_error() {
        assert_eq!(zeroed(0), Some(Vec::new()));
        let v = zeroed(100_000).expect("100 kB");
        assert_eq!(v.len(), 100_000);
        assert!(v.iter().all(|&b| b == 0));
        // More than any allocator gives (and more than a Layout can say): refused, no abort.
        assert_eq!(zeroed(isize::MAX as usize), None);
        assert_eq!(zeroed(usize::MAX), None);
        let e = buffer(|| "hold segment 3".into(), isize::MAX as usize).unwrap_err();
        let text = e.to_string();
        for want in [
            "hold segment 3",
            "out of memory",
            &format!("{} bytes", isize::MAX),
            "ulimit -v",
            "memory.max",
            "MemAvailable",
            "PIPECAST_SEGMENT",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert!(matches!(e, TransportError::Memory { .. }));
    }

    #[test]
    fn the_memory_ceiling_is_the_host_and_the_address_space() {
        let c = memory_ceiling();
        assert!(c > 1 << 20 && c <= isize::MAX as u64, "{c}");
        // No host of today holds 2^60 bytes.
        assert!(c < 1 << 60, "{c}");
        let m = "MemTotal:       16318412 kB\nSwapTotal:  0 kB\n";
        assert_eq!(meminfo(m, "MemTotal:"), Some(16318412 * 1024));
        assert_eq!(meminfo(m, "SwapTotal:"), Some(0));
        assert_eq!(meminfo(m, "MemFree:"), None);
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
