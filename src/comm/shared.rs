//! The engine every communicator of a process shares ([`Shared`]): one progress thread, one
//! set of links, one endpoint, made by the base communicator's agreed setup; views
//! ([`Comm::view`](super::Comm::view)) are communicators over it with no thread, link or
//! descriptor of their own. It lives until its last communicator is dropped, in any order.
//! The process counts its live engines ([`live_engines`]), and those a joining round may still
//! make ([`Making`]): a communicator with new processes bounds them with both (`comm::grow`).

use super::progress::Op;
use super::CommError;
use crate::topology::Topology;
use crate::transport::Wake;
use crossbeam_channel::Sender;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The engines (each with its progress thread) this process holds: one more at each
/// [`Shared::new`], one less when one is dropped.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Joining rounds in flight in this process ([`Making`]): each may still make an engine.
static MAKING: AtomicUsize = AtomicUsize::new(0);

/// How many engines (progress threads) this process holds now.
pub fn live_engines() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// A joining round's claim on an engine it may make, from before its blob says how many
/// engines the process holds until it has made its engine or knows it makes none (dropped).
/// Two threads joining communicators at once count each other: the later one's blob says one
/// engine more than live, so the process never goes past the bound because both saw room for
/// one more (the count errs high while a round runs, never low).
pub struct Making {
    held: usize,
    making: &'static AtomicUsize,
}

impl Making {
    /// Claims: the engines this process holds as the claimant's blob says it, the live ones
    /// and those of the rounds already in flight.
    pub fn begin() -> Making {
        Making::begin_on(&LIVE, &MAKING)
    }

    fn begin_on(live: &AtomicUsize, making: &'static AtomicUsize) -> Making {
        let others = making.fetch_add(1, Ordering::SeqCst);
        Making {
            held: live.load(Ordering::SeqCst) + others,
            making,
        }
    }

    /// The engines this process holds, as the claimant's blob says it.
    pub fn held(&self) -> usize {
        self.held
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        self.making.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What every communicator of one engine shares.
pub(super) struct Shared {
    /// `None` only while dropping (the progress thread ends when it is gone).
    ops: Option<Sender<Op>>,
    /// Wakes the progress thread when an op is sent.
    wake: Arc<Wake>,
    progress: Option<JoinHandle<()>>,
    /// The ids of the communicators on this engine: live ones, and dropped ones whose
    /// broadcasts still run (the progress thread removes those when they end).
    pub ids: Arc<Mutex<BTreeSet<u32>>>,
    /// What the agreed setup found.
    pub known: Known,
    /// The engine's processes, the setup's and those communicators joined on it brought
    /// (`comm::grow`): locked while a join grows it, so that it and the link grow alike.
    pub table: Mutex<Table>,
}

/// The engine's processes, in its numbering (the setup's ranks first, then the processes
/// communicators joined on it brought, in the order they came): who each is, where it runs.
pub(super) struct Table {
    /// `ids[p]`: process p's identity, the same at every process that knows it: the job
    /// cookie and rank of the setup that made its engine.
    pub ids: Vec<(u64, u64)>,
    /// `host_of[p]`: process p's host (processes with equal numbers share one), numbered by
    /// `host_keys`.
    pub host_of: Vec<usize>,
    pub host_keys: Vec<String>,
    /// The CPUs each process may run on (`None`: unknown).
    pub cpus: Vec<Option<crate::wire::bootstrap::CpuRange>>,
}

impl Table {
    /// Process `p`'s host number, for the host `key` (a new number for a new host).
    pub fn host_number(&mut self, key: &str) -> usize {
        match self.host_keys.iter().position(|k| k == key) {
            Some(n) => n,
            None => {
                self.host_keys.push(key.to_string());
                self.host_keys.len() - 1
            }
        }
    }
}

/// What the base communicator's agreed setup found: the engine's processes, where they run
/// and the links between them.
pub(super) struct Known {
    /// This process's rank among the engine's processes, and their number.
    pub rank: usize,
    pub size: usize,
    /// The base communicator's topology, of the engine's processes (views restrict it).
    pub topology: Topology,
    /// The link that runs (`tcp`, `raweth:IFACE`, `shm:cma`, `tcp+shm:cma`).
    pub link: String,
    /// With transport `auto`: why a faster link was not taken.
    pub why_not: String,
    /// Raw Ethernet: payload bytes per full frame.
    pub frame_payload: Option<u64>,
    /// The network the profile was derived from (`None`: given, or seed 003's Table 2).
    pub network: Option<crate::model::network::Network>,
    /// This process's identity ([`Table::ids`]) and where its TCP link listens.
    pub me: (u64, u64),
    pub addr: std::net::SocketAddr,
    /// The text of the settings every rank agreed on (`agree::settings_text`): a communicator
    /// joined on this engine must agree on the same.
    pub settings: String,
    /// Whether communicators with new processes may join this engine (`comm::grow`), or why
    /// not (its link cannot add peers: raw Ethernet, verbs, several rails).
    pub grows: Result<(), String>,
    /// Multicast as the setup agreed on it: the segment (payload bytes per datagram) every
    /// rank uses, or why broadcasts use the trees only (the same at every rank).
    pub multicast: Result<u32, String>,
}

/// Where a set of the engine's processes runs: how many hosts they are on, how many share
/// this process's host, and how many CPUs those share (`None`: unknown).
pub(super) struct Placement {
    pub hosts: usize,
    pub host_ranks: usize,
    pub host_cpus: Option<usize>,
}

impl Shared {
    /// The engine of a base communicator, with its id (0) taken: its progress thread, the
    /// thread's queue and wake descriptor, and what the setup found.
    pub fn new(
        ops: Sender<Op>,
        wake: Arc<Wake>,
        progress: JoinHandle<()>,
        known: Known,
        table: Table,
    ) -> Shared {
        LIVE.fetch_add(1, Ordering::SeqCst);
        Shared {
            table: Mutex::new(table),
            ops: Some(ops),
            wake,
            progress: Some(progress),
            ids: Arc::new(Mutex::new(BTreeSet::from([0]))),
            known,
        }
    }

    /// Hands `op` to the progress thread and wakes it.
    pub fn send(&self, op: Op) -> Result<(), CommError> {
        self.ops
            .as_ref()
            .ok_or(CommError::ProgressGone)?
            .send(op)
            .map_err(|_| CommError::ProgressGone)?;
        self.wake.notify();
        Ok(())
    }

    /// Takes `id` for a new communicator: an error when a communicator on this engine has
    /// it (a live one, or a dropped one whose broadcasts still run).
    pub fn take_id(&self, id: u32) -> Result<(), CommError> {
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        if !ids.insert(id) {
            return Err(CommError::Usage(format!(
                "communicator id {id} is in use on this process's engine (by a live communicator, or by a dropped one whose broadcasts still run): every live communicator needs its own id"
            )));
        }
        Ok(())
    }

    /// Communicator `id` is dropped: the progress thread forgets it once its broadcasts
    /// in flight are over (then its id is free again), at once when none are. Returns when
    /// the progress thread has taken note, so that a communicator dropped with nothing in
    /// flight frees its id before this returns; it never waits for a broadcast.
    pub fn close(&self, id: u32) {
        let (reply, done) = crossbeam_channel::bounded(1);
        let op = Op::Close {
            comm: id,
            ids: self.ids.clone(),
            reply,
        };
        match self.send(op) {
            Ok(()) => {
                done.recv().ok();
            }
            Err(_) => {
                self.ids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
            }
        }
    }

    /// Where processes `procs` run (`procs` includes this one).
    pub fn placement(&self, procs: &[usize]) -> Placement {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mine = table.host_of[self.known.rank];
        let mut hosts: Vec<usize> = procs.iter().map(|&p| table.host_of[p]).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let local: Vec<_> = procs
            .iter()
            .filter(|&&p| table.host_of[p] == mine)
            .map(|&p| table.cpus.get(p).copied().flatten())
            .collect();
        Placement {
            hosts: hosts.len(),
            host_ranks: local.len(),
            host_cpus: super::cpus::shared(&local),
        }
    }

    /// How many processes the engine knows now (its setup's and those joined since).
    pub fn processes(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ids
            .len()
    }
}

impl Drop for Shared {
    /// Stops the progress thread, which closes this process's connections, before returning.
    fn drop(&mut self) {
        self.ops = None;
        self.wake.notify();
        if let Some(thread) = self.progress.take() {
            thread.join().ok();
        }
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two rounds at once: the later one counts the earlier's claim, so a process holding one
    /// engine never makes two more (the bound of 2); once a claim ends it counts no more.
    #[test]
    fn joining_rounds_at_once_count_each_other() {
        static LIVE1: AtomicUsize = AtomicUsize::new(1);
        static MAKING1: AtomicUsize = AtomicUsize::new(0);
        let a = Making::begin_on(&LIVE1, &MAKING1);
        let b = Making::begin_on(&LIVE1, &MAKING1);
        assert_eq!((a.held(), b.held()), (1, 2));
        drop(a);
        LIVE1.fetch_add(1, Ordering::SeqCst); // b made its engine
        drop(b);
        assert_eq!(MAKING1.load(Ordering::SeqCst), 0);
        assert_eq!(Making::begin_on(&LIVE1, &MAKING1).held(), 2);
        let threads: Vec<_> = (0..8)
            .map(|_| std::thread::spawn(|| Making::begin_on(&LIVE1, &MAKING1).held()))
            .collect();
        for t in threads {
            assert!(t.join().unwrap() >= 2);
        }
        assert_eq!(MAKING1.load(Ordering::SeqCst), 0);
    }
}
