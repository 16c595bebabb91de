//! How many file descriptors a rank holds (issue 30: a rank's descriptors should grow with
//! its tree neighbours, not with the number of ranks). Each rank counts `/proc/self/fd` after
//! setup and after every broadcast (outside the timed part); the report gives, over ranks,
//! the most any rank held.

use serde::{Deserialize, Serialize};

/// This process's open descriptors now (`/proc/self/fd`, less the one reading it); 0 where
/// `/proc` cannot be read.
pub fn open_now() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1))
}

/// The most descriptors this rank held: after setup, since then, and since the last
/// [`Peak::mark`].
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub struct Peak {
    pub after_setup: usize,
    pub peak: usize,
    #[serde(skip)]
    pub since_mark: usize,
}

impl Peak {
    /// Starts counting: what the rank holds once its communicator is set up.
    pub fn after_setup() -> Peak {
        let n = open_now();
        Peak {
            after_setup: n,
            peak: n,
            since_mark: n,
        }
    }

    /// Takes one more sample.
    pub fn sample(&mut self) {
        let n = open_now();
        self.peak = self.peak.max(n);
        self.since_mark = self.since_mark.max(n);
    }

    /// Starts a new [`Peak::since_mark`] from a sample now.
    pub fn mark(&mut self) {
        self.since_mark = 0;
        self.sample();
    }
}

/// Every rank's [`Peak`] at the end, over ranks: the JSON `fds` of `pipecast bench`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// The most descriptors a rank held once set up (max over ranks).
    pub after_setup: usize,
    /// The most descriptors a rank held at any sample (max over ranks) and which rank.
    pub peak: usize,
    pub peak_rank: usize,
    /// The median over ranks of each rank's peak, and the least.
    pub peak_median: usize,
    pub peak_min: usize,
    /// The most any rank but rank 0 held (rank 0 also holds the standalone rendezvous's
    /// connection to every other rank).
    pub peak_rest: usize,
}

impl Report {
    /// Over `all[rank]`; `None` for no ranks.
    pub fn over(all: &[Peak]) -> Option<Report> {
        let (peak_rank, top) = all.iter().enumerate().max_by_key(|(r, p)| (p.peak, *r))?;
        let mut peaks: Vec<usize> = all.iter().map(|p| p.peak).collect();
        peaks.sort_unstable();
        Some(Report {
            after_setup: all.iter().map(|p| p.after_setup).max().unwrap_or(0),
            peak: top.peak,
            peak_rank,
            peak_median: peaks[peaks.len() / 2],
            peak_min: peaks[0],
            peak_rest: all.iter().skip(1).map(|p| p.peak).max().unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_descriptor_is_counted() {
        let mut p = Peak::after_setup();
        assert!(p.after_setup > 0, "/proc/self/fd is readable here");
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        p.sample();
        assert_eq!(p.peak, p.after_setup + 1);
        drop(f);
        p.mark();
        assert_eq!((p.peak, p.since_mark), (p.after_setup + 1, p.after_setup));
    }

    #[test]
    fn the_report_is_over_ranks() {
        let at = |after_setup, peak| Peak {
            after_setup,
            peak,
            since_mark: 0,
        };
        let r = Report::over(&[at(10, 12), at(11, 30), at(9, 14)]).unwrap();
        assert_eq!(
            r,
            Report {
                after_setup: 11,
                peak: 30,
                peak_rank: 1,
                peak_median: 14,
                peak_min: 12,
                peak_rest: 30,
            }
        );
        assert!(Report::over(&[]).is_none());
    }
}
