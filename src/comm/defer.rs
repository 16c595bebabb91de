//! The MPI deferral policy: below which size the MPI glue leaves a broadcast to the MPI's own
//! ([`Comm::defers_below`]), from what pipecast measured, and why in words.

use super::{cpus, Comm};

/// The default of [`Config::host_min_bytes`]. Measured with `bench/local_ompi.sh`
/// (docs/results-ompi.md, "Session 6"; 2-core machine, Open MPI 4.1): a pipecast broadcast
/// still pays a hand-over to its progress thread and a wake-up per hop (about 50–100 µs with
/// polling, [`POLL`]) where Open MPI's ranks poll shared memory, so Open MPI wins below
/// 256 KiB at any rank count and is within noise up to 2 MiB; from 4 MiB pipecast's single
/// copies won in every run (2 ranks 1.18–2.26×, 4 ranks 1.11–2.66×). Before polling, two ranks
/// lost at every size and always deferred. Two ranks defer at every size again since session
/// 10 ([`Comm::defers_below`]): Open MPI's single copy won at 4 and 16 MiB in every one of six
/// runs on a quiet machine (pipecast 0.48–0.88×; 4 ranks: pipecast 0.97–1.59×).
pub const HOST_MIN_BYTES: u64 = 4 << 20;

/// On a host of two ranks (a fan-out to one reader) the glue leaves broadcasts below this size
/// to the MPI ([`Comm::defers_below`]): there Open MPI's own broadcast makes one
/// cross-memory-attach copy, as pipecast would, without pipecast's hand-over to a progress
/// thread. From it pipecast fans out through the writer's staging ring
/// (`transport::shm::stage_from`), which runs the writer's and the reader's copies on
/// different cores. Measured under OSU's `osu_bcast` (each rank times its own call, averaged
/// over ranks; `bench/osu_local.sh`) against Open MPI 4.1's own broadcast on a 2-core host,
/// session 14 (docs/results-ompi.md, "Session 14 (issue 28)"), 12 rounds: at 16 MiB pipecast
/// lost 11 (0.58–1.66×, median 0.77), at 32 MiB it won all (1.18–1.73×), at 64 MiB too
/// (1.46–3.31×). Open MPI's single copy runs near memcpy speed up to about 20 MiB here and
/// slows past it (at 24 and 28 MiB the ring won 5 and 6 of 6 rounds in the same window).
/// Session 13 (`bench/mpi_bcast.c`, 1.59–2.09× at 16 MiB) had measured a host whose
/// cross-memory attach ran at 0.4 of memcpy speed, where session 14's ran at 0.6–0.85 of it:
/// with two ranks both benchmarks time the same thing (the root's call ends with the
/// reader's, in Open MPI as in pipecast), so the host moved, not the method.
///
/// It is where the shared-memory link starts staging for one reader: pipecast takes a
/// two-rank broadcast exactly where it would go through the ring, never by attach.
pub const FEW_READERS_MIN_BYTES: u64 = crate::transport::shm::ONE_READER_STAGE_MIN_BYTES;

/// On a host of three ranks (a fan-out to two readers) the glue leaves broadcasts below this
/// size to the MPI ([`Comm::defers_below`]): Open MPI's own broadcast makes two
/// cross-memory-attach copies on the two cores where pipecast's staging ring makes three
/// memcpys and a hand-over, and its root returns before its readers, which OSU's average over
/// ranks counts. Under `osu_bcast` (`bench/osu_local.sh`, session 14, 16 rounds): pipecast
/// lost at 16 MiB in 12 (0.51–1.26×), tied at 32 MiB (0.67–1.50×, median 1.01, 6 rounds at
/// 0.67–0.90), and won at 64 MiB in 14 (0.86–1.45×, median 1.21). Session 13's 16 MiB
/// (Fig. 10 timing, another host state: 1.26–1.99×) no longer held.
pub const TWO_READERS_MIN_BYTES: u64 = 64 << 20;

impl Comm {
    /// Below how many bytes the MPI glue should leave a broadcast to the MPI's own (0: never;
    /// `u64::MAX`: always): where pipecast's own measurements say it cannot win. The same at
    /// every rank (it depends on the hosts and their CPUs, known to all from the bootstrap,
    /// and on an agreed setting). Today that is a communicator on one host: below
    /// [`FEW_READERS_MIN_BYTES`] with two ranks, [`TWO_READERS_MIN_BYTES`] with three, else below
    /// [`Config::host_min_bytes`], or below [`cpus::OVERSUBSCRIBED_MIN_BYTES`] when its ranks
    /// outnumber its CPUs by more than [`cpus::OVERSUBSCRIBED`] (unless
    /// `PIPECAST_HOST_MIN_BYTES` is set: a forced setting). Between hosts, `min_bytes` of the
    /// glue decides as before.
    pub fn defers_below(&self) -> u64 {
        match (self.hosts, self.config.host_min_bytes) {
            (1, Some(bytes)) => bytes,
            (1, None) if self.oversubscribed() => cpus::OVERSUBSCRIBED_MIN_BYTES,
            (1, None) if self.host_ranks <= 2 => FEW_READERS_MIN_BYTES,
            (1, None) if self.host_ranks == 3 => TWO_READERS_MIN_BYTES,
            (1, None) => HOST_MIN_BYTES,
            _ => 0,
        }
    }

    fn oversubscribed(&self) -> bool {
        cpus::oversubscribed(self.host_ranks, self.host_cpus)
    }

    /// Why [`Comm::defers_below`] says what it says, in words for the glue's verbose 1
    /// (empty when it never defers).
    pub fn deferral_reason(&self) -> String {
        let cpus = match self.host_cpus {
            None => "an unknown number of CPUs".to_string(),
            Some(1) => "1 CPU".to_string(),
            Some(c) => format!("{c} CPUs"),
        };
        match (self.defers_below(), self.config.host_min_bytes) {
            (0, _) => String::new(),
            (below, Some(_)) => format!(
                "every rank on one host: broadcasts below {below} bytes go to the MPI's own broadcast (PIPECAST_HOST_MIN_BYTES)"
            ),
            (below, None) if self.oversubscribed() => format!(
                "every rank on one host, {} ranks on {cpus} (more than {} per CPU): broadcasts below {below} bytes go to the MPI's own broadcast, faster there (measured; PIPECAST_HOST_MIN_BYTES=N forces pipecast from N bytes)",
                self.host_ranks,
                cpus::OVERSUBSCRIBED
            ),
            (below, None) if self.host_ranks <= 3 => format!(
                "every rank on one host, {} ranks on {cpus}: a fan-out to {}, which the MPI's own broadcast makes at least as fast below {below} bytes; smaller broadcasts go to it (measured; PIPECAST_HOST_MIN_BYTES=N forces pipecast from N bytes)",
                self.host_ranks,
                if self.host_ranks == 2 { "one reader" } else { "two readers" }
            ),
            (below, None) => format!(
                "every rank on one host, {} ranks on {cpus}: broadcasts below {below} bytes go to the MPI's own broadcast, faster there (measured; PIPECAST_HOST_MIN_BYTES)",
                self.host_ranks
            ),
        }
    }
}
