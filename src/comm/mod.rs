//! The communicator: bootstrap, plan cache, and the progress thread that joins the engine,
//! the transport and a real clock.
//!
//! ```no_run
//! # fn main() -> pipecast::Result<()> {
//! use pipecast::comm::{Comm, Config};
//! let mut comm = Comm::from_env(Config::default())?; // PIPECAST_RANK, _SIZE, _RENDEZVOUS
//! let mut buf = vec![0u8; 1 << 20];
//! comm.bcast(&mut buf, 0)?;
//! comm.barrier()?;
//! # Ok(()) }
//! ```

pub mod agree;
mod algorithm;
mod bootstrap;
pub mod cpus;
pub mod host_cost;
pub mod hosts;
mod link;
pub mod network;
mod plan_json;
mod progress;
mod request;
pub mod settings;
mod setup;
pub mod tree_dump;

pub use crate::transport::shm::ShmMode;
pub use agree::ErrorClass;
pub use algorithm::{
    choose_segment, lanes, resolve, scatter_allgather, schedule, segment_for, Algorithm,
    DEFAULT_SEGMENT,
};
pub use bootstrap::{Bootstrap, TcpRendezvous};
pub use link::Transport;
pub use plan_json::{plan_json, PlanReport};
pub use request::Request;
pub use settings::{parse_bytes, Settings};

use crate::engine::{Config as EngineConfig, Setup};
use crate::model::Profile;
use crate::plan::{Lane, TreeKind};
use crate::topology::Topology;
use crate::transport::lend;
use crate::transport::wake::spin;
use crate::transport::Buffer;
use crossbeam_channel::Sender;
use progress::{Job, Op};
use setup::Local;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What went wrong in a communicator.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    #[error("rank {rank} is not below the job size {size}")]
    BadRank { rank: usize, size: usize },
    #[error("environment variable {name}: {problem}")]
    Env { name: &'static str, problem: String },
    #[error("the topology has {machines} machines but the job has {size} ranks: rank r is machine r, so they must match")]
    TopologySize { machines: usize, size: usize },
    #[error("the topology has {machines} machines, the job {size} ranks, and these ranks' hosts are not machines of it (by `host` or `name`): {missing}; name the hosts in the file or set PIPECAST_MACHINE")]
    TopologyHosts {
        machines: usize,
        size: usize,
        missing: String,
    },
    #[error("this communicator failed earlier ({0}) and can no longer be used")]
    Failed(String),
    /// Some rank could not set up (or ranks disagree): every rank returns this same error.
    #[error("pipecast is not used on this communicator: {detail}")]
    Agreement { class: ErrorClass, detail: String },
    #[error("the progress thread is gone (it panicked)")]
    ProgressGone,
}

/// Communicator settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Schedule of `bcast` (default `auto`).
    pub algorithm: Algorithm,
    /// Segment size (default: the model's choice, see [`resolve`]).
    pub segment: Option<u64>,
    /// Calibration profile for the model's choices (`auto`, segment size). Unless one is given
    /// ([`Config::profile_given`]), the communicator derives it from the agreed link rate and
    /// host cost (`model::network`, [`network`]); where no rank knows its link's rate, the
    /// 1 Gbit/s column of seed 003 Table 2. `pipecast calibrate` measures one.
    pub profile: Profile,
    /// The profile was given (env PIPECAST_PROFILE): the communicator keeps it as it is.
    pub profile_given: bool,
    /// The rate of this rank's data link, bits per second (env PIPECAST_LINK_RATE, tc's
    /// spelling; `pipecast lab run` sets the lab's); `None`: the topology's `gbps`, else the
    /// NIC's speed ([`network`]). Local: the ranks agree on the slowest.
    pub link_rate: Option<u64>,
    /// Window, credit batching (the engine's idle timeout is off: a late rank is waited for).
    pub engine: EngineConfig,
    /// How long a peer may show no sign of life (its process dead, its connection closed, no
    /// answer to heartbeats) before a broadcast that waits for it fails. A peer that is merely
    /// late (computing) is waited for however long it takes.
    pub timeout: Duration,
    /// Rank r runs on machine r; default: all ranks on one switch.
    pub topology: Option<Topology>,
    /// IP address to listen on (default: the interface of `iface`, else the one that reaches
    /// the rendezvous, else the first up non-loopback interface).
    pub ip: Option<String>,
    /// Interfaces or subnets to listen on (`btl_tcp_if_include` style), and the raw Ethernet
    /// interface when the transport names none (env PIPECAST_IFACE).
    pub iface: Option<String>,
    /// Transport of broadcast data (default `tcp`; env PIPECAST_TRANSPORT).
    pub transport: Transport,
    /// Raw Ethernet: receive through a PACKET_MMAP ring of this many bytes.
    pub raweth_ring: Option<usize>,
    /// How ranks on one host move segments (env PIPECAST_SHM; default: shared memory, single
    /// copy where the kernel allows it).
    pub shm: ShmMode,
    /// On a communicator whose ranks all share one host, the MPI glue leaves broadcasts below
    /// this many bytes to the MPI's own broadcast ([`Comm::defers_below`]; env
    /// PIPECAST_HOST_MIN_BYTES). `None`: the measured default, [`HOST_MIN_BYTES`].
    pub host_min_bytes: Option<u64>,
    /// How long a waiting thread (the caller waiting for its broadcast, the progress thread
    /// between broadcasts, a shared-memory link waiting for its peers) polls before it sleeps
    /// in the kernel (env PIPECAST_POLL_US; default [`POLL`]; see
    /// [`transport::wake::spin`](crate::transport::wake::spin)). Local: ranks may differ.
    pub poll: Duration,
    /// The longest one wait of the progress thread for its links while broadcasts run (env
    /// PIPECAST_ROUND_MS; default [`ROUND`]). Whatever moves a broadcast on (data from a peer,
    /// room to send, a newly posted broadcast) ends the wait at once, so a longer round changes
    /// nothing but how late a lost wake-up is noticed: tests raise it to make one unmistakable.
    /// Local: ranks may differ.
    pub round: Duration,
    /// Write this rank's trees, one line per distinct plan, to `DIR/colltree<rank>.json`
    /// (env PIPECAST_TREE_DUMP; [`tree_dump`]). Local: ranks may differ.
    pub tree_dump: Option<std::path::PathBuf>,
    /// The RDMA device, port and GID index of the verbs link (env PIPECAST_VERBS_DEVICE,
    /// _PORT, _GID_INDEX). Local: ranks may differ.
    pub verbs: crate::transport::verbs::DeviceConfig,
    /// Queue pairs the verbs link keeps: above this many, idle ones are closed (env
    /// PIPECAST_VERBS_MAX_QPS; default 64). Its completion queue is sized from it. Every
    /// rank must have the same (the agreement checks it when verbs may run).
    pub verbs_max_qps: usize,
    /// Move TCP data through io_uring where the kernel offers it (env PIPECAST_IO_URING;
    /// default on; `false`: plain `sendmsg`/`readv`). Every rank the same (agreed).
    pub io_uring: bool,
    /// This rank's host identity in the bootstrap (env PIPECAST_MACHINE; `None`: the kernel's
    /// host name, [`hosts::host_name`]). Ranks differ, but either all give one or none does
    /// (agreed).
    pub machine: Option<String>,
}

/// The default of [`Config::round`].
pub const ROUND: Duration = Duration::from_millis(50);

/// The default of [`Config::poll`]. Measured with `pipecast bench --local` (docs/shm.md).
pub const POLL: Duration = Duration::from_micros(50);

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

impl Default for Config {
    fn default() -> Config {
        Config {
            algorithm: Algorithm::Tree(TreeKind::Auto),
            segment: None,
            profile: Profile::builtin("1gbit").expect("built-in profile"),
            profile_given: false,
            link_rate: None,
            engine: EngineConfig::default(),
            timeout: Duration::from_secs(5),
            topology: None,
            ip: None,
            iface: None,
            transport: Transport::Tcp,
            raweth_ring: None,
            shm: ShmMode::Auto,
            host_min_bytes: None,
            poll: POLL,
            round: ROUND,
            tree_dump: None,
            verbs: Default::default(),
            verbs_max_qps: crate::transport::verbs::LinkConfig::default().max_qps,
            io_uring: true,
            machine: None,
        }
    }
}

/// (root, requested algorithm, message size, configured segment size).
type ChoiceKey = (usize, Algorithm, u64, Option<u64>);
/// A schedule's lanes and the rail each runs on (`Plan::rails`; empty: all on rail 0).
type Lanes = (Arc<Vec<Lane>>, RailsOf);
/// The rail of each lane.
type RailsOf = Arc<Vec<usize>>;

/// One rank's handle on a group of processes that broadcast together.
pub struct Comm {
    rank: usize,
    size: usize,
    topology: Topology,
    config: Config,
    bootstrap: Box<dyn Bootstrap>,
    plans: BTreeMap<(usize, Algorithm, u64, u64), Lanes>,
    /// The model's resolutions per (root, requested algorithm, message size, segment).
    choices: BTreeMap<ChoiceKey, (Algorithm, u64)>,
    seq: u64,
    /// `None` only while dropping.
    ops: Option<Sender<Op>>,
    /// Wakes the progress thread when an op is sent.
    wake: Arc<crate::transport::Wake>,
    progress: Option<std::thread::JoinHandle<()>>,
    failed: Option<String>,
    /// The transport that runs (`tcp`, `raweth:IFACE`, `shm:cma`, `tcp+shm:cma`).
    link: String,
    /// With transport `auto`: why a faster link was not taken ([`Comm::link_reason`]).
    why_not: String,
    /// Raw Ethernet: payload bytes per full frame (the model's segment sizes are rounded up
    /// to whole frames).
    frame_payload: Option<u64>,
    /// How many hosts the ranks are on.
    hosts: usize,
    /// How many ranks share this rank's host, and the CPUs they share (`None`: unknown).
    host_ranks: usize,
    host_cpus: Option<usize>,
    /// The network the profile was derived from (`None`: given, or seed 003's Table 2).
    network: Option<crate::model::network::Network>,
    /// `PIPECAST_TREE_DUMP`: where new plans are recorded.
    dump: Option<tree_dump::TreeDump>,
}

/// One rank's place in a single-lane broadcast tree ([`Comm::tree_node`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TreeNode {
    pub tree: Algorithm,
    /// `None` at the root.
    pub parent: Option<usize>,
    /// In send order.
    pub children: Vec<usize>,
    /// The model's segment size for this message (or the configured one).
    pub segment: u64,
}

/// What a broadcast ran.
#[derive(Debug, Clone, PartialEq)]
pub struct BcastInfo {
    /// The schedule that ran (`auto` resolved by the model).
    pub tree: Algorithm,
    pub segment: u64,
    pub lanes: usize,
    /// Time on the progress thread, ns.
    pub elapsed_ns: u64,
}

impl Comm {
    /// Joins the job through `bootstrap`: see [`Comm::join`].
    pub fn new(
        rank: usize,
        size: usize,
        bootstrap: Box<dyn Bootstrap>,
        config: Config,
    ) -> crate::Result<Comm> {
        Comm::join(rank, size, bootstrap, Ok(config))
    }

    /// Joins the job through `bootstrap`, collectively and in agreement: every rank runs the
    /// same two allgathers whatever happens locally, and every rank returns the same outcome.
    ///
    /// 1. Local setup (`config` may already be a local failure: a bad setting): listen, open
    ///    the raw socket. The blob (`wire::bootstrap`) says ready, or failed and why.
    /// 2. First allgather: if any rank failed, or ranks disagree on the settings that decide
    ///    plans and links, every rank returns [`CommError::Agreement`] naming them.
    /// 3. Setup from everybody's blobs (topology, link, connections), then a second allgather
    ///    of "ready": a failure at any rank fails every rank.
    ///
    /// So a rank never falls back to the MPI's own broadcast alone (which hung the job).
    pub fn join(
        rank: usize,
        size: usize,
        mut bootstrap: Box<dyn Bootstrap>,
        config: crate::Result<Config>,
    ) -> crate::Result<Comm> {
        if rank >= size {
            return Err(CommError::BadRank { rank, size }.into());
        }
        let _span = tracing::info_span!("comm_setup", rank, size).entered();
        let host = hosts::host_name(config.as_ref().ok().and_then(|c| c.machine.as_deref()));
        let local = config.and_then(|config| Local::open(rank, size, config));
        let mine = match &local {
            Ok(l) => l.blob(&host),
            Err(e) => {
                tracing::info!(rank, error = %e, "local setup failed: telling the other ranks");
                agree::failed_blob(e, &host)
            }
        };
        let blobs = bootstrap.allgather(&mine).and_then(|blobs| {
            if blobs.len() == size {
                Ok(blobs)
            } else {
                Err(CommError::Bootstrap(format!(
                    "allgather returned {} blobs for {size} ranks",
                    blobs.len()
                )))
            }
        });
        // When the exchange itself fails, this rank's own failure (if any) is the news.
        let blobs = match (blobs, local) {
            (Err(_), Err(e)) => return Err(e),
            (Err(e), Ok(_)) => return Err(e.into()),
            (Ok(b), local) => (b, local),
        };
        let (blobs, local) = blobs;
        let peers = agree::decide(&blobs)?;
        // Every rank is ready and agrees: the rest depends on everybody's blobs only, except
        // for rare local failures (a thread, a connection), which the second round shares.
        let local = local.expect("a failed rank fails the agreement");
        let finished = local.finish(rank, size, &peers);
        let ready = agree::ready_blob(finished.as_ref().err());
        let all = bootstrap.allgather(&ready)?;
        agree::all_ready(&all)?;
        let f = finished.expect("a failed rank fails the second round");
        let dump = f
            .config
            .tree_dump
            .as_deref()
            .map(|dir| tree_dump::TreeDump::new(dir, rank));
        Ok(Comm {
            rank,
            size,
            topology: f.topology,
            config: f.config,
            bootstrap,
            plans: BTreeMap::new(),
            choices: BTreeMap::new(),
            seq: 0,
            ops: Some(f.ops),
            wake: f.wake,
            progress: Some(f.progress),
            failed: None,
            link: f.link,
            why_not: f.why_not.join("; "),
            frame_payload: f.frame_payload,
            hosts: f.hosts,
            host_ranks: f.host_ranks,
            host_cpus: f.host_cpus,
            network: f.network,
            dump,
        })
    }

    /// Joins the job described by `PIPECAST_RANK`, `PIPECAST_SIZE`, `PIPECAST_RENDEZVOUS`
    /// (`host:port` where rank 0 listens), with the other `PIPECAST_*` settings
    /// ([`Settings`]) over `config`. A bad setting is reported to every rank (see
    /// [`Comm::join`]).
    pub fn from_env(config: Config) -> crate::Result<Comm> {
        let Some(settings::Job {
            rank,
            size,
            rendezvous,
        }) = settings::Job::from_env()?
        else {
            return Err(CommError::Env {
                name: "PIPECAST_RANK",
                problem: "not set: launch ranks with `pipecast bench --local N` or set PIPECAST_RANK, PIPECAST_SIZE and PIPECAST_RENDEZVOUS=host:port".into(),
            }
            .into());
        };
        let mut config = config;
        let applied = Settings::from_env().apply(&mut config);
        let boot = TcpRendezvous::new(
            rank,
            size,
            &rendezvous,
            config.timeout.max(Duration::from_secs(30)),
        )?;
        if config.ip.is_none() && config.iface.is_none() {
            config.ip = boot.local_ip().map(|ip| ip.to_string());
        }
        Comm::join(
            rank,
            size,
            Box::new(boot),
            applied.map(|()| config).map_err(Into::into),
        )
    }
    /// How many hosts the ranks are on (ranks with the same host name and address share one).
    pub fn hosts(&self) -> usize {
        self.hosts
    }

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

    /// Where the model's profile came from: `PIPECAST_PROFILE`, the network every rank agreed
    /// on (its rate and host cost, `model::network`), or seed 003's Table 2 at 1 Gbit/s where
    /// no rank knew its link's rate.
    pub fn profile_source(&self) -> String {
        match &self.network {
            _ if self.config.profile_given => "PIPECAST_PROFILE".into(),
            Some(n) => format!(
                "derived: {} Mbit/s, {:.1} us per segment end{}",
                n.rate_bps / 1_000_000,
                n.segment_us,
                n.host_bytes_per_us
                    .map_or(String::new(), |b| format!(", host {b:.0} MB/s"))
            ),
            None => "seed 003 Table 2, 1 Gbit/s (no link rate known: PIPECAST_LINK_RATE)".into(),
        }
    }

    /// How many ranks share this rank's host, and how many CPUs they share (`None`: unknown).
    pub fn host_cpus(&self) -> (usize, Option<usize>) {
        (self.host_ranks, self.host_cpus)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.size
    }
    pub fn topology(&self) -> &Topology {
        &self.topology
    }
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// With transport `auto`: why a faster link than the one that runs was not taken, this
    /// rank's own reasons and the agreed ones, `; `-separated (empty when none was missed, or
    /// the transport was named). For the MPI glue's verbose 1.
    pub fn link_reason(&self) -> &str {
        &self.why_not
    }

    /// The transport that runs: `tcp` or `raweth:IFACE` (`auto` resolved).
    pub fn transport(&self) -> &str {
        &self.link
    }

    /// Broadcasts `buf` from `root` to every rank with the configured algorithm.
    pub fn bcast(&mut self, buf: &mut [u8], root: usize) -> crate::Result<()> {
        let algorithm = self.config.algorithm.clone();
        self.bcast_with(buf, root, &algorithm, self.config.segment)
            .map(|_| ())
    }

    /// Broadcasts with a given algorithm and segment size (`None`: the model's choice; the
    /// non-pipelined baselines always move whole messages, see [`segment_for`]).
    pub fn bcast_with(
        &mut self,
        buf: &mut [u8],
        root: usize,
        algorithm: &Algorithm,
        segment: Option<u64>,
    ) -> crate::Result<BcastInfo> {
        let msize = buf.len() as u64;
        let (algorithm, segment, lanes, rails) =
            self.plan_rails(root, msize, algorithm, segment)?;
        let algorithm = &algorithm;
        let setup = Setup {
            seq: self.next_seq(),
            root,
            msize,
            segment,
            deep: false,
        };
        let elapsed_ns = self.run(buf, (lanes.clone(), rails), &[setup])?;
        tracing::debug!(
            rank = self.rank,
            seq = setup.seq,
            root,
            bytes = msize,
            tree = %algorithm,
            segment,
            us = elapsed_ns / 1000,
            "bcast"
        );
        Ok(BcastInfo {
            tree: algorithm.clone(),
            segment,
            lanes: lanes.len(),
            elapsed_ns,
        })
    }

    /// Returns once every rank has entered the barrier: a deep zero-byte broadcast from rank
    /// 0 (its root completes only when all subtrees reported in) followed by a release.
    pub fn barrier(&mut self) -> crate::Result<()> {
        let tree = Algorithm::Tree(TreeKind::Binomial);
        let (lanes, _) = self.lanes(0, &tree, 1, 0)?;
        let phases = [true, false].map(|deep| Setup {
            seq: self.next_seq(),
            root: 0,
            msize: 0,
            segment: 1,
            deep,
        });
        self.run(&mut [], lanes, &phases)?;
        Ok(())
    }

    /// This rank's place in the single-lane tree a broadcast of `msize` bytes from `root`
    /// would use, for callers that move the segments themselves (the Open MPI component's
    /// point-to-point path): the configured algorithm resolved by the model, or `linear`
    /// (seed 003 Algorithm 1, contention-free) when that has several lanes or is not a tree.
    pub fn tree_node(&mut self, root: usize, msize: u64) -> crate::Result<TreeNode> {
        let (mut algorithm, mut segment, mut lanes) = self.plan(root, msize)?;
        if lanes.len() != 1 || !matches!(algorithm, Algorithm::Tree(_)) {
            let linear = Algorithm::Tree(TreeKind::Linear);
            (algorithm, segment, lanes) =
                self.plan_with(root, msize, &linear, self.config.segment)?;
        }
        let lane = &lanes[0];
        Ok(TreeNode {
            tree: algorithm,
            parent: lane.parents[self.rank],
            children: lane.children[self.rank].clone(),
            segment,
        })
    }

    /// The transport's monotonic counters by name (raw Ethernet: frames, retransmits,
    /// timeouts, drops by reason; empty for TCP).
    pub fn transport_counters(&mut self) -> crate::Result<BTreeMap<String, u64>> {
        self.check()?;
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.ops
            .as_ref()
            .ok_or(CommError::ProgressGone)?
            .send(Op::Counters { reply })
            .map_err(|_| CommError::ProgressGone)?;
        self.wake.notify();
        Ok(answer.recv().map_err(|_| CommError::ProgressGone)?)
    }

    /// Allgather of small blobs through the bootstrap (for results, not data).
    pub fn allgather(&mut self, mine: &[u8]) -> crate::Result<Vec<Vec<u8>>> {
        self.check()?;
        Ok(self.bootstrap.allgather(mine)?)
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn check(&self) -> Result<(), CommError> {
        match &self.failed {
            Some(e) => Err(CommError::Failed(e.clone())),
            None => Ok(()),
        }
    }

    /// [`resolve`], cached: `auto` and the segment size for this message.
    fn resolve(
        &mut self,
        root: usize,
        algorithm: &Algorithm,
        msize: u64,
        segment: Option<u64>,
    ) -> crate::Result<(Algorithm, u64)> {
        let key = (root, algorithm.clone(), msize, segment);
        if let Some(c) = self.choices.get(&key) {
            return Ok(c.clone());
        }
        let mut c = resolve(
            &self.topology,
            root,
            algorithm,
            msize,
            segment,
            &self.config.profile,
        )?;
        if let (None, Some(frame), Algorithm::Tree(kind)) = (segment, self.frame_payload, &c.0) {
            // The model's segment in whole frames: a 1024-byte segment would travel in
            // 1024-byte frames, 38 % more frames than 1408-byte ones (MTU 1500) for the same bytes, and
            // frames, not bytes, cost CPU (measured on the lab: 1.43 → 1.25 T at 1 MiB).
            if kind.is_pipelined() && c.1 < msize {
                c.1 =
                    c.1.div_ceil(frame)
                        .saturating_mul(frame)
                        .min(u64::from(u32::MAX));
            }
        }
        self.choices.insert(key, c.clone());
        Ok(c)
    }

    /// The lanes of a schedule, cached; `true` when they were planned by this call.
    fn lanes(
        &mut self,
        root: usize,
        algorithm: &Algorithm,
        segment: u64,
        msize: u64,
    ) -> crate::Result<(Lanes, bool)> {
        let segments = msize.div_ceil(segment).max(1);
        // The tree depends on the segment count only for kbinomial (its optimal k).
        let key_segments = match algorithm {
            Algorithm::Tree(TreeKind::KBinomial(None)) => segments,
            _ => 0,
        };
        let key = (root, algorithm.clone(), segment, key_segments);
        if let Some(l) = self.plans.get(&key) {
            return Ok((l.clone(), false));
        }
        let (lanes, rails) = schedule(&self.topology, root, algorithm, segments)?;
        let l = (Arc::new(lanes), Arc::new(rails));
        self.plans.insert(key, l.clone());
        Ok((l, true))
    }

    /// The jobs of `setups` over `lanes`.
    fn jobs(&self, (lanes, rails): Lanes, setups: &[Setup]) -> Vec<Job> {
        // No idle timeout: a late rank is waited for. Peers that are gone are found by the
        // links (closed connections, unanswered heartbeats) within `config.timeout`.
        let engine = EngineConfig {
            idle_timeout: u64::MAX,
            ..self.config.engine
        };
        setups
            .iter()
            .map(|&setup| Job {
                lanes: lanes.clone(),
                rails: rails.clone(),
                setup,
                engine,
                connect_timeout: self.config.timeout,
            })
            .collect()
    }

    /// Posts a run to the progress thread; the reply arrives on the returned channel.
    fn post(
        &mut self,
        buf: Buffer,
        lanes: Lanes,
        setups: &[Setup],
    ) -> Result<crossbeam_channel::Receiver<progress::Outcome>, CommError> {
        let jobs = self.jobs(lanes, setups);
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.ops
            .as_ref()
            .ok_or(CommError::ProgressGone)?
            .send(Op::Run { buf, jobs, reply })
            .map_err(|_| CommError::ProgressGone)?;
        self.wake.notify();
        Ok(answer)
    }

    /// Runs the engine for each of `setups` in turn over `lanes` on the progress thread.
    fn run(&mut self, buf: &mut [u8], lanes: Lanes, setups: &[Setup]) -> crate::Result<u64> {
        self.check()?;
        let result = lend(buf, |loan| {
            let answer = self.post(Buffer::Loan(loan), lanes, setups)?;
            let poll = self.config.poll;
            let outcome = spin(poll, || answer.try_recv().ok()).map_or_else(|| answer.recv(), Ok);
            outcome.map_err(|_| CommError::ProgressGone)?.result
        });
        if let Err(e) = &result {
            self.failed = Some(e.to_string());
        }
        result
    }

    /// The broadcast of `msize` bytes from `root` as it will run: the schedule (`auto`
    /// resolved by the model), its segment size (in whole frames on raw Ethernet) and lanes.
    pub fn plan(
        &mut self,
        root: usize,
        msize: u64,
    ) -> crate::Result<(Algorithm, u64, Arc<Vec<Lane>>)> {
        let configured = self.config.algorithm.clone();
        self.plan_with(root, msize, &configured, self.config.segment)
    }

    /// [`Comm::plan`] for a given schedule and segment size (`None`: the model's choice).
    pub fn plan_with(
        &mut self,
        root: usize,
        msize: u64,
        algorithm: &Algorithm,
        segment: Option<u64>,
    ) -> crate::Result<(Algorithm, u64, Arc<Vec<Lane>>)> {
        self.plan_rails(root, msize, algorithm, segment)
            .map(|(a, s, lanes, _)| (a, s, lanes))
    }

    /// [`Comm::plan_with`] and the rail each lane runs on.
    fn plan_rails(
        &mut self,
        root: usize,
        msize: u64,
        algorithm: &Algorithm,
        segment: Option<u64>,
    ) -> crate::Result<(Algorithm, u64, Arc<Vec<Lane>>, RailsOf)> {
        if root >= self.size {
            return Err(crate::plan::PlanError::BadRoot {
                root,
                size: self.size,
            }
            .into());
        }
        let (algorithm, segment) = self.resolve(root, algorithm, msize, segment)?;
        let ((lanes, rails), new) = self.lanes(root, &algorithm, segment, msize)?;
        if let (true, Some(dump)) = (new, self.dump.as_mut()) {
            dump.record(&tree_dump::DumpedPlan {
                rank: self.rank,
                nranks: self.size,
                root,
                tree: algorithm.to_string(),
                segment,
                msize,
                lanes: &lanes,
            });
        }
        Ok((algorithm, segment, lanes, rails))
    }

    /// Starts broadcasting `buf` (this rank's vector; the root's holds the message) from
    /// `root` and returns at once. Blocking and nonblocking broadcasts run in the order they
    /// are posted, which must be the same at every rank (as MPI requires); several may be in
    /// flight, and they progress on the progress thread while the caller computes.
    /// [`Request::wait`] hands the vector back.
    pub fn ibcast(&mut self, buf: Vec<u8>, root: usize) -> crate::Result<Request> {
        let algorithm = self.config.algorithm.clone();
        self.ibcast_with(buf, root, &algorithm, self.config.segment)
    }

    /// [`Comm::ibcast`] with a given schedule and segment size.
    pub fn ibcast_with(
        &mut self,
        buf: Vec<u8>,
        root: usize,
        algorithm: &Algorithm,
        segment: Option<u64>,
    ) -> crate::Result<Request> {
        self.ibcast_buffer(Buffer::Owned(buf), root, algorithm, segment)
    }

    /// [`Comm::ibcast`] of a caller's bytes (the C API).
    pub fn ibcast_raw(
        &mut self,
        buf: crate::transport::RawBuf,
        root: usize,
    ) -> crate::Result<Request> {
        let algorithm = self.config.algorithm.clone();
        self.ibcast_buffer(Buffer::Raw(buf), root, &algorithm, self.config.segment)
    }

    fn ibcast_buffer(
        &mut self,
        buf: Buffer,
        root: usize,
        algorithm: &Algorithm,
        segment: Option<u64>,
    ) -> crate::Result<Request> {
        self.check()?;
        let msize = buf.len() as u64;
        let (_, segment, lanes, rails) = self.plan_rails(root, msize, algorithm, segment)?;
        let setup = Setup {
            seq: self.next_seq(),
            root,
            msize,
            segment,
            deep: false,
        };
        Ok(Request::new(
            self.post(buf, (lanes, rails), &[setup])?,
            self.config.poll,
        ))
    }
}

impl Drop for Comm {
    /// Stops the progress thread, which closes this rank's connections, before returning.
    fn drop(&mut self) {
        self.ops = None;
        self.wake.notify();
        if let Some(thread) = self.progress.take() {
            thread.join().ok();
        }
    }
}
