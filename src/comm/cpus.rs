//! How many CPUs the ranks of one host share, so that every rank can tell alike whether the
//! host is oversubscribed (issue 11).
//!
//! Each rank puts the CPUs it may run on in its bootstrap blob as a range
//! ([`CpuRange`]: the lowest CPU of its affinity mask and how many it may use); the ranks of a
//! host then share the union of their ranges ([`shared`]). Every rank computes that from the
//! same blobs, so they all reach the same answer even when a launcher bound them to different
//! cores. pipecast's ranks each run a progress thread and poll before they sleep
//! ([`Config::poll`](super::Config::poll)); once a host's ranks outnumber its CPUs by more than
//! [`OVERSUBSCRIBED`], their threads take turns on the CPUs, and pipecast was measured slower
//! than the MPI's own broadcast at 4 MiB there, faster from 16 MiB
//! ([`OVERSUBSCRIBED_MIN_BYTES`]; docs/results-ompi.md, "Session 8").

use crate::wire::bootstrap::CpuRange;

/// Ranks per CPU beyond which a one-host communicator leaves every broadcast to the MPI
/// (`Comm::defers_below`). Measured with `bench/local_ompi.sh` on a 2-core host against Open
/// MPI 4.1's own broadcast: 2 and 4 ranks (1 and 2 per CPU) won from 4 MiB in every run
/// (1.1–3.2×); 8 ranks (4 per CPU) lost at every size from 4 to 64 MiB (0.60–0.90×).
pub const OVERSUBSCRIBED: usize = 2;

/// On an oversubscribed host ([`oversubscribed`]) the glue leaves broadcasts below this size
/// to the MPI. Measured with `bench/local_ompi.sh` against Open MPI 4.1's own broadcast on a
/// 2-core host, session 8, 10 runs with 8 ranks and 2 with 16: pipecast lost or tied at 4 MiB
/// (0.58–1.54×, median below 1) and won at 16 MiB (1.17–1.75×) and 64 MiB (1.06–1.61×) in
/// every run but one; one run of session 7 lost at 16 and 64 MiB (0.82×, 0.90×).
pub const OVERSUBSCRIBED_MIN_BYTES: u64 = 16 << 20;

/// The calling thread's CPUs: `Cpus_allowed_list` of `/proc/thread-self/status` (the affinity
/// mask a launcher's binding sets), its size capped by the CPU quota of the cgroup
/// ([`std::thread::available_parallelism`] reads both). `None` where the kernel says nothing
/// readable: the decision then treats the host's CPUs as unknown and never defers for them.
pub fn this_thread() -> Option<CpuRange> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    let (first, count) = parse_list(list)?;
    let quota = std::thread::available_parallelism().map_or(count, |n| n.get());
    Some(CpuRange {
        first: u16::try_from(first).ok()?,
        count: u16::try_from(count.min(quota)).unwrap_or(u16::MAX).max(1),
    })
}

/// The lowest CPU and the number of CPUs of a kernel CPU list (`0-3,8,10-11`). `None` when it
/// is empty or malformed, or names a CPU past 65535 (more than the kernel's limit).
pub fn parse_list(list: &str) -> Option<(usize, usize)> {
    const MAX_CPU: usize = u16::MAX as usize;
    let mut first = usize::MAX;
    let mut count = 0usize;
    for item in list.trim().split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((lo, hi)) => (lo.parse::<usize>().ok()?, hi.parse::<usize>().ok()?),
            None => {
                let cpu = item.parse::<usize>().ok()?;
                (cpu, cpu)
            }
        };
        if lo > hi || hi > MAX_CPU {
            return None;
        }
        first = first.min(lo);
        count = count.checked_add(hi - lo + 1)?;
    }
    (count > 0).then_some((first, count))
}

/// How many CPUs ranks with these ranges share: the size of the union of
/// `[first, first + count)`. `None` if any rank's CPUs are unknown.
pub fn shared(ranges: &[Option<CpuRange>]) -> Option<usize> {
    let mut spans: Vec<(usize, usize)> = ranges
        .iter()
        .map(|r| {
            r.map(|r| {
                (
                    usize::from(r.first),
                    usize::from(r.first) + usize::from(r.count),
                )
            })
        })
        .collect::<Option<_>>()?;
    spans.sort_unstable();
    let (mut total, mut reach) = (0, 0);
    for (lo, hi) in spans {
        let lo = lo.max(reach);
        if hi > lo {
            total += hi - lo;
            reach = hi;
        }
    }
    Some(total)
}

/// Whether `ranks` ranks sharing `cpus` CPUs outnumber them by more than [`OVERSUBSCRIBED`]
/// (unknown CPUs: no).
pub fn oversubscribed(ranks: usize, cpus: Option<usize>) -> bool {
    cpus.is_some_and(|c| ranks > OVERSUBSCRIBED.saturating_mul(c.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: u16, count: u16) -> Option<CpuRange> {
        Some(CpuRange { first, count })
    }

    #[test]
    fn kernel_cpu_lists() {
        assert_eq!(parse_list("\t0-1\n"), Some((0, 2)));
        assert_eq!(parse_list("3"), Some((3, 1)));
        assert_eq!(parse_list("8-11,0-3,20"), Some((0, 9)));
        for bad in ["", "x", "3-1", "1-", "-1", "0,,1", "70000", "0-70000"] {
            assert_eq!(parse_list(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_thread_reads_the_kernel() {
        let me = this_thread().expect("Linux has /proc/thread-self/status");
        assert!(me.count >= 1);
        let n = std::thread::available_parallelism().unwrap().get();
        assert!(usize::from(me.count) <= n);
    }

    #[test]
    fn shared_is_the_union_of_the_ranges() {
        // Unbound ranks on a 2-CPU host: all say 0..2.
        assert_eq!(shared(&[r(0, 2); 8]), Some(2));
        // Bound one per core on 8 cores.
        let bound: Vec<_> = (0..8).map(|c| r(c, 1)).collect();
        assert_eq!(shared(&bound), Some(8));
        // Bound to overlapping sockets.
        assert_eq!(shared(&[r(0, 4), r(2, 4), r(10, 2)]), Some(8));
        // Everyone on one core.
        assert_eq!(shared(&[r(0, 1); 4]), Some(1));
        assert_eq!(shared(&[r(0, 2), None]), None);
        assert_eq!(shared(&[r(u16::MAX, u16::MAX)]), Some(65535));
    }

    #[test]
    fn oversubscription_as_measured() {
        assert!(!oversubscribed(2, Some(2)));
        assert!(!oversubscribed(4, Some(2)));
        assert!(oversubscribed(5, Some(2)));
        assert!(oversubscribed(8, Some(2)));
        assert!(oversubscribed(3, Some(1)));
        assert!(!oversubscribed(64, None));
        assert!(oversubscribed(3, Some(0)));
    }
}
