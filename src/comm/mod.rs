//! The communicator's API ([`Comm`]): broadcasts, barrier, plans, and what the communicator
//! knows of its job. Around it: its configuration ([`config`]), joining a job ([`join`]), the
//! MPI deferral policy ([`defer`]), the plan cache ([`plan_cache`]), the settings reader
//! ([`settings`]), the agreement ([`agree`]), the progress thread that joins the engine,
//! the links and a real clock (`progress`), the engine every communicator of a process
//! shares (`shared`), the communicators made locally as views of another (`view`) and how a
//! view's errors name peers in its ranks (`names`).
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
mod config;
pub mod cpus;
mod defer;
mod error;
mod grow;
pub mod host_cost;
pub mod hosts;
mod join;
mod link;
mod multicast;
mod multicast_setup;
mod names;
pub mod network;
mod plan_cache;
mod plan_json;
mod progress;
mod request;
pub mod settings;
mod setup;
mod shared;
pub mod tree_dump;
mod view;

pub use crate::transport::shm::ShmMode;
pub use agree::ErrorClass;
pub use algorithm::{
    choose_segment, lanes, resolve, scatter_allgather, schedule, segment_for, Algorithm,
    DEFAULT_SEGMENT,
};
pub use bootstrap::{Bootstrap, TcpRendezvous};
pub use config::{Config, MulticastMode, POLL, ROUND};
pub use defer::{FEW_READERS_MIN_BYTES, HOST_MIN_BYTES, TWO_READERS_MIN_BYTES};
pub use error::CommError;
pub use link::Transport;
pub use plan_json::{plan_json, PlanReport};
pub use request::Request;
pub use settings::{parse_bytes, Settings};
pub use shared::live_engines;

use crate::engine::{Config as EngineConfig, Setup};
use crate::plan::TreeKind;
use crate::topology::Topology;
use crate::transport::lend;
use crate::transport::wake::spin;
use crate::transport::Buffer;
use plan_cache::{ChoiceKey, PlanKey, Planned};
use progress::{Job, Op};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One rank's handle on a group of processes that broadcast together: the communicator
/// the agreed setup made (its engine's base, id 0), or a view of one ([`Comm::view`]).
pub struct Comm {
    rank: usize,
    size: usize,
    /// This communicator's id on its engine (0: the base communicator), the high half of its
    /// broadcasts' numbers ([`crate::engine::number`]).
    id: u32,
    /// `members[i]`: the engine's process of rank i (`None`: rank i is process i).
    members: Option<Arc<Vec<usize>>>,
    topology: Topology,
    config: Config,
    /// The base communicator's (views gather through broadcasts: [`Comm::allgather`]).
    bootstrap: Option<Box<dyn Bootstrap>>,
    plans: BTreeMap<PlanKey, Planned>,
    /// The model's resolutions per (root, requested algorithm, message size, segment).
    choices: BTreeMap<ChoiceKey, (Algorithm, u64)>,
    /// Its broadcasts so far: the low half of their numbers.
    seq: u32,
    /// The progress thread, links and endpoint this communicator shares with every other
    /// one of the process's engine.
    engine: Arc<shared::Shared>,
    failed: Option<String>,
    /// How many hosts the ranks are on.
    hosts: usize,
    /// How many ranks share this rank's host, and the CPUs they share (`None`: unknown).
    host_ranks: usize,
    host_cpus: Option<usize>,
    /// `PIPECAST_TREE_DUMP`: where new plans are recorded.
    dump: Option<tree_dump::TreeDump>,
    /// Joined on existing engines ([`Comm::join_on`]): its topology is its own, not the
    /// engine's restricted, and so are its views'.
    joined: bool,
    /// What [`Comm::transport`] says when it is not the engine's link: a joined communicator
    /// reaches the processes of other engines over TCP (`tcp+shm:cma` on an engine of
    /// `shm:cma`).
    link: Option<String>,
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
    /// How many hosts the ranks are on (ranks with the same host name and address share one).
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// Where the model's profile came from: `PIPECAST_PROFILE`, the network every rank agreed
    /// on (its rate and host cost, `model::network`), or seed 003's Table 2 at 1 Gbit/s where
    /// no rank knew its link's rate.
    pub fn profile_source(&self) -> String {
        match &self.engine.known.network {
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
        &self.engine.known.why_not
    }

    /// The link that runs: `tcp`, `raweth:IFACE`, `verbs`, `shm:cma`, `tcp+shm:cma`, … (`auto`
    /// resolved).
    pub fn transport(&self) -> &str {
        self.link.as_deref().unwrap_or(&self.engine.known.link)
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
        let (algorithm, segment, planned) = self.plan_rails(root, msize, algorithm, segment)?;
        let algorithm = &algorithm;
        let setup = Setup {
            seq: self.next_seq()?,
            root,
            msize,
            segment,
            deep: false,
        };
        let elapsed_ns = self.run(buf, &planned, &[setup])?;
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
            lanes: planned.lanes.len(),
            elapsed_ns,
        })
    }

    /// Returns once every rank has entered the barrier: a deep zero-byte broadcast from rank
    /// 0 (its root completes only when all subtrees reported in) followed by a release, over
    /// a complete binary tree in rank order: as deep as a binomial one, but no rank talks to
    /// more than three others, so a barrier connects no more than a broadcast does.
    pub fn barrier(&mut self) -> crate::Result<()> {
        let tree = Algorithm::Tree(TreeKind::NaiveBinary);
        let (planned, _) = self.lanes(0, &tree, 1, 0)?;
        let mut phase = |deep| -> crate::Result<Setup> {
            Ok(Setup {
                seq: self.next_seq()?,
                root: 0,
                msize: 0,
                segment: 1,
                deep,
            })
        };
        let phases = [phase(true)?, phase(false)?];
        self.run(&mut [], &planned, &phases)?;
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

    /// The monotonic counters of every link in use, by name (shared memory: bytes by path;
    /// raw Ethernet: frames, retransmits, timeouts, drops by reason; verbs: writes, queue
    /// pairs, registrations, ring bytes; TCP: bytes per rail, only with several rails). The
    /// links are the engine's: every communicator on it counts into the same ones.
    pub fn transport_counters(&mut self) -> crate::Result<BTreeMap<String, u64>> {
        self.check()?;
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.engine.send(Op::Counters { reply })?;
        Ok(answer.recv().map_err(|_| CommError::ProgressGone)?)
    }

    /// Allgather of small blobs (for results, not data): through the bootstrap on the base
    /// communicator, through broadcasts (each rank's length, then its blob) on a view.
    pub fn allgather(&mut self, mine: &[u8]) -> crate::Result<Vec<Vec<u8>>> {
        self.check()?;
        if let Some(bootstrap) = self.bootstrap.as_mut() {
            return Ok(bootstrap.allgather(mine)?);
        }
        let mut all = Vec::with_capacity(self.size);
        for root in 0..self.size {
            let mut len = (mine.len() as u64).to_le_bytes();
            self.bcast(&mut len, root)?;
            let len = u64::from_le_bytes(len);
            if len > 1 << 20 {
                return Err(CommError::Usage(format!(
                    "allgather: rank {root} offered {len} bytes, more than 1 MiB (for results, not data)"
                ))
                .into());
            }
            let mut blob = if root == self.rank {
                mine.to_vec()
            } else {
                vec![0; len as usize]
            };
            self.bcast(&mut blob, root)?;
            all.push(blob);
        }
        Ok(all)
    }

    /// The number of this communicator's next broadcast.
    fn next_seq(&mut self) -> crate::Result<u64> {
        self.seq = self.seq.checked_add(1).ok_or_else(|| {
            CommError::Usage(format!(
                "communicator {} has run {} broadcasts, the most one communicator may: use a new one (MPI_Comm_dup)",
                self.id,
                u32::MAX
            ))
        })?;
        Ok(crate::engine::number::number(self.id, self.seq))
    }

    /// How this communicator names the engine's processes in its errors (`None`: the base
    /// communicator, whose ranks they are).
    fn names(&self) -> Option<names::Names> {
        (self.id != 0).then(|| names::Names {
            id: self.id,
            members: self.members.clone(),
        })
    }

    fn check(&self) -> Result<(), CommError> {
        match &self.failed {
            Some(e) => Err(CommError::Failed(e.clone())),
            None => Ok(()),
        }
    }

    /// The jobs of `setups` over `planned`'s lanes, over the engine's processes.
    fn jobs(&self, planned: &Planned, setups: &[Setup]) -> Vec<Job> {
        // No idle timeout: a late rank is waited for. Peers that are gone are found by the
        // links (closed connections, unanswered heartbeats) within `config.timeout`.
        let engine = EngineConfig {
            idle_timeout: u64::MAX,
            ..self.config.engine
        };
        setups
            .iter()
            .map(|&setup| Job {
                lanes: planned.posted.clone(),
                rails: planned.rails.clone(),
                setup: Setup {
                    root: self.process(setup.root),
                    ..setup
                },
                root_name: setup.root as u32,
                engine,
                connect_timeout: self.config.timeout,
                multicast: planned.multicast,
            })
            .collect()
    }

    /// Posts a run to the progress thread; the reply arrives on the returned channel.
    fn post(
        &mut self,
        buf: Buffer,
        planned: &Planned,
        setups: &[Setup],
    ) -> Result<crossbeam_channel::Receiver<progress::Outcome>, CommError> {
        let jobs = self.jobs(planned, setups);
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.engine.send(Op::Run { buf, jobs, reply })?;
        Ok(answer)
    }

    /// Runs the engine for each of `setups` in turn over `lanes` on the progress thread.
    fn run(&mut self, buf: &mut [u8], planned: &Planned, setups: &[Setup]) -> crate::Result<u64> {
        self.check()?;
        let result = lend(buf, |loan| {
            let answer = self.post(Buffer::Loan(loan), planned, setups)?;
            let poll = self.config.poll;
            let outcome = spin(poll, || answer.try_recv().ok()).map_or_else(|| answer.recv(), Ok);
            outcome.map_err(|_| CommError::ProgressGone)?.result
        })
        .map_err(|e| match self.names() {
            Some(names) => names.of(e),
            None => e,
        });
        if let Err(e) = &result {
            self.failed = Some(e.to_string());
        }
        result
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
        let (_, segment, planned) = self.plan_rails(root, msize, algorithm, segment)?;
        let setup = Setup {
            seq: self.next_seq()?,
            root,
            msize,
            segment,
            deep: false,
        };
        Ok(Request::new(
            self.post(buf, &planned, &[setup])?,
            self.config.poll,
            self.names(),
        ))
    }
}

impl Drop for Comm {
    /// Tells the engine this communicator is gone (its broadcasts in flight still complete;
    /// its id is free again once they have). The last communicator of an engine stops its
    /// progress thread, which closes this process's connections, before returning.
    fn drop(&mut self) {
        self.engine.close(self.id);
    }
}
