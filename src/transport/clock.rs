//! The host's monotonic clock as a number (`CLOCK_MONOTONIC`, ns), and what says whether two
//! processes read the same one: [`Instant`](std::time::Instant) reads that clock too but
//! cannot leave its process. Processes of one kernel share it — a lab's network namespaces
//! (`pipecast lab`) do — unless a time namespace offsets it (`/proc/self/timens_offsets`).
//! `pipecast bench` times a broadcast from the root's start to the last rank's completion
//! with it, where every rank reads the same clock.

/// `CLOCK_MONOTONIC` now, ns (0 if the clock cannot be read, which Linux never does for it).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration; CLOCK_MONOTONIC is
    // a clock every Linux kernel has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// What names this process's monotonic clock: the kernel's boot id and the monotonic offset
/// of its time namespace. Two processes whose names are equal read the same clock; `None`
/// where the boot id cannot be read (not Linux, no /proc): then nothing is known.
pub fn monotonic_identity() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    // Absent without time namespaces (the offset is then 0); a line "monotonic SECS NSECS".
    let offset = std::fs::read_to_string("/proc/self/timens_offsets")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.split_whitespace().next() == Some("monotonic"))
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "0 0".to_string());
    Some(format!("{} monotonic+{offset}", boot.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forward_with_instant() {
        let a = monotonic_ns();
        let i = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(a > 0);
        // The same clock as Instant: at least the 2 ms slept passed.
        assert!(b - a >= i.elapsed().as_nanos() as u64 / 2);
        assert!(b - a >= 2_000_000);
    }

    #[test]
    fn one_process_has_one_identity() {
        if let Some(me) = monotonic_identity() {
            assert_eq!(Some(me.clone()), monotonic_identity());
            assert!(me.contains("monotonic+"));
        }
    }
}
