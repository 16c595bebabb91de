//! What a rank's process spends on its broadcasts, read from `/proc` (Linux): the CPU time of
//! all its threads, page faults, context switches. Unlike wall time, these barely depend on
//! what else runs on the machine, so they say where a broadcast's time goes even on a busy
//! host (8 ranks on 2 cores should cost about 7 copies of CPU, and not much more).

use serde::{Deserialize, Serialize};
use std::ops::{AddAssign, Sub};

/// Counters of one process since it started (or a difference of two readings).
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time of all live threads (user + system), ns (`/proc/self/task/*/schedstat`).
    pub cpu_ns: u64,
    /// Minor and major page faults of the process (`/proc/self/stat`).
    pub minflt: u64,
    pub majflt: u64,
    /// Voluntary (slept) and involuntary (preempted) context switches of all live threads.
    pub vcsw: u64,
    pub ivcsw: u64,
}

impl Usage {
    /// This process's counters now; zeros where `/proc` cannot be read.
    pub fn now() -> Usage {
        // The kernel brings a thread's CPU time up to date when it is scheduled, not when
        // /proc is read: yielding first makes this thread's count exact (the others run
        // rarely at this moment: they wait for this one).
        std::thread::yield_now();
        let mut u = Usage::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // Fields after the command's closing parenthesis start at field 3 (the state).
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
            let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse().ok()).unwrap_or(0);
            u.minflt = field(10);
            u.majflt = field(12);
        }
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return u;
        };
        for task in tasks.flatten() {
            let dir = task.path();
            if let Ok(s) = std::fs::read_to_string(dir.join("schedstat")) {
                u.cpu_ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|f| f.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            if let Ok(s) = std::fs::read_to_string(dir.join("status")) {
                for line in s.lines() {
                    let value = |l: &str| l.trim().parse::<u64>().unwrap_or(0);
                    if let Some(v) = line.strip_prefix("voluntary_ctxt_switches:") {
                        u.vcsw += value(v);
                    } else if let Some(v) = line.strip_prefix("nonvoluntary_ctxt_switches:") {
                        u.ivcsw += value(v);
                    }
                }
            }
        }
        u
    }

    /// CPU time of the calling thread alone, ns (`/proc/thread-self/schedstat`; 0 when
    /// unreadable).
    pub fn thread_cpu_ns() -> u64 {
        std::thread::yield_now();
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|f| f.parse().ok()))
            .unwrap_or(0)
    }
}

impl Sub for Usage {
    type Output = Usage;
    /// The counters spent between two readings (a thread that ended in between can make a
    /// per-thread sum shrink: that counts as 0).
    fn sub(self, before: Usage) -> Usage {
        Usage {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            minflt: self.minflt.saturating_sub(before.minflt),
            majflt: self.majflt.saturating_sub(before.majflt),
            vcsw: self.vcsw.saturating_sub(before.vcsw),
            ivcsw: self.ivcsw.saturating_sub(before.ivcsw),
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        self.cpu_ns += o.cpu_ns;
        self.minflt += o.minflt;
        self.majflt += o.majflt;
        self.vcsw += o.vcsw;
        self.ivcsw += o.ivcsw;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_and_touched_pages_show_up() {
        let before = Usage::now();
        let t0 = Usage::thread_cpu_ns();
        let mut v = vec![0u8; 8 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        let mut x = 1u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        let spent = Usage::now() - before;
        assert!(spent.cpu_ns > 0, "{spent:?}");
        assert!(spent.minflt >= 1, "{spent:?}");
        assert!(Usage::thread_cpu_ns() > t0);
        let mut sum = Usage::default();
        sum += spent;
        sum += spent;
        assert_eq!(sum.cpu_ns, 2 * spent.cpu_ns);
    }
}
