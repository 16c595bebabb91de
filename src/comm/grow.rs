//! Communicators joined on existing engines ([`Comm::join_on`]): a communicator made by the
//! agreed setup with processes this process's engine has never seen (two jobs merged, MPI's
//! spawn and merge, connect and accept) joins the engine instead of building its own: no
//! thread, listener or descriptor more. Its engine's table of processes grows by the ones it
//! did not know, and its link learns where they listen; the communicator is then a view
//! mapping its ranks to the engine's processes (which differ from process to process, so
//! nothing on the wire names a process by them: a TCP hello names its sender by its
//! identity, the job cookie and rank of the setup that made its engine, `wire::hello`).
//!
//! 1. First round (`wire::joining`): each member's engine identity, where its TCP link
//!    listens, its host and CPUs, its engine's agreed settings, and whether its engine can
//!    take the communicator (a link that can add peers: TCP on one rail, with shared memory
//!    or not; the communicator's settings the engine's).
//! 2. Every member decides alike from the same blobs ([`decide`]): when every member's engine
//!    can, with the same settings and the same id asked, the communicator joins the engines;
//!    otherwise every member makes it with its own engine, as [`Comm::join`] does (its rounds
//!    follow), and rank 0 says why at info. With shared memory on, members of different
//!    engines on one host also make every member fall back (an engine of its own gives them
//!    shared memory, joined they talk over TCP), but only while that leaves every member's
//!    process with at most [`MAX_ENGINES`] engines (each blob says how many its process holds,
//!    `shared::Making`: the live ones and those other threads' joining rounds may still make):
//!    beyond, the communicator joins the engines over TCP, and rank 0
//!    says so at info. A process whose spawns keep landing on its own host thus holds two
//!    engines (progress threads) at most, however many such communicators it makes.
//! 3. Joining: each member appends the processes its engine does not know to its table and
//!    link (connected on the first broadcast that needs them, as every peer), takes the id,
//!    and a second round agrees that every member is ready (a failure at one fails all).
//!
//! What such a communicator does not do: multicast (its broadcasts run on the trees), shared
//! memory with the processes it brought (a new process on this host is reached over TCP;
//! processes the engine knew keep their links), rails (it plans on rail 0).

use super::shared::{Making, Shared, Table};
use super::{agree, cpus, hosts, tree_dump, Bootstrap, Comm, CommError, Config};
use crate::topology::InHost;
use crate::transport::NewPeer;
use crate::wire::bootstrap::CpuRange;
use crate::wire::joining::{Repr, Status};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// The most engines (progress threads) a process holds because of the shared-memory fallback
/// (issue 30, "one engine per process": at most two pipecast threads per process): [`decide`]
/// takes it only where every member's process holds fewer.
pub const MAX_ENGINES: usize = 2;

/// What [`decide`] found: the communicator joins the engines.
#[derive(Debug)]
pub(super) struct Joins {
    pub members: Vec<Member>,
    /// Why it joins although members of different engines share a host with shared memory
    /// on (they talk over TCP): the fallback would leave a process with more than
    /// [`MAX_ENGINES`] engines. Rank 0 says it at info.
    pub over_tcp: Option<String>,
}

/// A member of a communicator that joins the engines, as its first-round blob says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Member {
    pub id: (u64, u64),
    pub addr: SocketAddr,
    pub host: String,
    pub cpus: Option<CpuRange>,
}

impl Comm {
    /// Joins a communicator of `size` processes through `bootstrap`, collectively and in
    /// agreement as [`Comm::join`] does, on the engine of `engine` (this process's; `None`:
    /// it has none, and every member falls back) when every member's engine can take it: then it is a communicator with id `id` (the same at every
    /// member, free on every member's engine: the MPI glue would pass the merged
    /// communicator's context id) on the engines, its new processes added to their tables.
    /// Otherwise every member makes it with its own engine (id 0), as [`Comm::join`]; rank 0
    /// says why at info. See the module's documentation for what a joined communicator does
    /// not do (multicast, shared memory with the processes it brought, rails).
    pub fn join_on(
        engine: Option<&Comm>,
        id: u32,
        rank: usize,
        size: usize,
        mut bootstrap: Box<dyn Bootstrap>,
        config: crate::Result<Config>,
    ) -> crate::Result<Comm> {
        if rank >= size {
            return Err(CommError::BadRank { rank, size }.into());
        }
        let _span = tracing::info_span!("comm_join_on", rank, size, id).entered();
        let host = hosts::host_name(config.as_ref().ok().and_then(|c| c.machine.as_deref()));
        // Held until this member has its engine or joined: a round running beside it in
        // another thread counts it (`Making`).
        let making = Making::begin();
        let mine = joining_blob(engine, id, &host, &config, making.held())?;
        let blobs = bootstrap.allgather(&mine)?;
        if blobs.len() != size {
            return Err(CommError::Bootstrap(format!(
                "allgather returned {} blobs for {size} ranks",
                blobs.len()
            ))
            .into());
        }
        let shm = config
            .as_ref()
            .is_ok_and(|c| c.shm != crate::transport::shm::ShmMode::Off);
        match decide(&blobs, id, shm) {
            Ok(joins) => {
                if let (0, Some(why)) = (rank, &joins.over_tcp) {
                    tracing::info!("the communicator of {size} ranks joins the engines: {why}");
                }
                let config = config.expect("a member whose config failed says so: no join");
                let engine = engine.expect("a member without an engine says so: no join");
                engine.join_engine(id, rank, bootstrap, config, &joins.members)
            }
            Err(why) => {
                if rank == 0 {
                    tracing::info!(
                        "the communicator of {size} ranks gets its own engine (thread, links): {why}"
                    );
                }
                Comm::join(rank, size, bootstrap, config)
            }
        }
    }

    /// Whether `self` and `other` run on the same engine (one progress thread and set of links).
    pub fn same_engine(&self, other: &Comm) -> bool {
        Arc::ptr_eq(&self.engine, &other.engine)
    }

    /// How many processes this communicator's engine knows: its setup's and those that
    /// communicators joined on it ([`Comm::join_on`]) brought.
    pub fn engine_processes(&self) -> usize {
        self.engine.processes()
    }

    /// Step 3 (every member's engine takes the communicator): grows this engine by the
    /// members it does not know, takes `id`, agrees that every member is ready.
    fn join_engine(
        &self,
        id: u32,
        rank: usize,
        mut bootstrap: Box<dyn Bootstrap>,
        mut config: Config,
        members: &[Member],
    ) -> crate::Result<Comm> {
        let size = members.len();
        let rank_hosts: Vec<hosts::RankHost> = members
            .iter()
            .map(|m| hosts::RankHost {
                name: m.host.clone(),
                ip: m.addr.ip(),
            })
            .collect();
        let keys = hosts::host_keys(&rank_hosts);
        // Same-host members may talk over TCP (the processes a member's engine did not know),
        // so the plans take the hosts for sockets.
        let in_host = InHost::Sockets {
            max_connections: config.max_connections,
        };
        let mut took = false;
        let local = (|| -> crate::Result<(Vec<usize>, crate::topology::Topology)> {
            let topology = hosts::topology(config.topology.as_ref(), &rank_hosts, &keys)?
                .with_in_host(|_| in_host);
            let topology = if topology.rails() > 1 {
                topology.first_rails(1)
            } else {
                topology
            };
            if members[rank].id != self.engine.known.me {
                return Err(CommError::Bootstrap(format!(
                    "rank {rank}'s blob is not this process's (the allgather mixed up the ranks)"
                ))
                .into());
            }
            let procs = grow(&self.engine, members, &keys)?;
            self.engine.take_id(id)?;
            took = true;
            Ok((procs, topology))
        })();
        let ready = agree::ready_blob(local.as_ref().err());
        let agreed = bootstrap
            .allgather(&ready)
            .map_err(crate::Error::from)
            .and_then(|all| Ok(agree::all_ready(&all)?));
        if let Err(e) = agreed {
            if took {
                self.engine
                    .ids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
            }
            return Err(e);
        }
        let (procs, topology) = local.expect("a failed member fails the second round");
        if !config.profile_given {
            // The profile the engine's setup derived from the network (the same settings).
            config.profile = self.config.profile.clone();
        }
        let mut distinct = keys.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let local_cpus: Vec<_> = (0..size)
            .filter(|&r| keys[r] == keys[rank])
            .map(|r| members[r].cpus)
            .collect();
        let dump = config
            .tree_dump
            .as_deref()
            .map(|dir| tree_dump::TreeDump::new(dir, rank));
        tracing::info!(
            rank,
            id,
            size,
            processes = self.engine.processes(),
            "joined on this process's engine"
        );
        // Processes of other engines are reached over TCP.
        let known = &self.engine.known;
        let link = (members.iter().any(|m| m.id.0 != known.me.0) && !known.link.starts_with("tcp"))
            .then(|| format!("tcp+{}", known.link));
        Ok(Comm {
            rank,
            size,
            id,
            members: Some(Arc::new(procs)),
            topology,
            config,
            bootstrap: Some(bootstrap),
            plans: BTreeMap::new(),
            choices: BTreeMap::new(),
            seq: 0,
            engine: self.engine.clone(),
            failed: None,
            hosts: distinct.len(),
            host_ranks: local_cpus.len(),
            host_cpus: cpus::shared(&local_cpus),
            dump,
            joined: true,
            link,
        })
    }
}

/// This process's first-round blob for a communicator joined on its engine (`None`: it has
/// none).
fn joining_blob(
    engine: Option<&Comm>,
    id: u32,
    host: &str,
    config: &crate::Result<Config>,
    held: usize,
) -> crate::Result<Vec<u8>> {
    let engines = u16::try_from(held).unwrap_or(u16::MAX);
    let settings = config.as_ref().map(agree::settings_text);
    let Some(comm) = engine else {
        let (status, reason) = match &settings {
            Err(e) => (Status::Failed, e.to_string()),
            Ok(_) => (Status::NoEngine, "this process has no engine".to_string()),
        };
        return blob_bytes(&Repr {
            status,
            id,
            identity: (0, 0),
            addr: None,
            cpus: None,
            engines,
            host: agree::truncate(host),
            settings: "",
            reason: agree::truncate(&reason),
        });
    };
    let known = &comm.engine.known;
    let (status, reason) = match (&settings, &known.grows, &comm.failed) {
        (Err(e), _, _) => (Status::Failed, e.to_string()),
        (Ok(_), Err(why), _) => (Status::NoEngine, why.clone()),
        (Ok(_), Ok(()), Some(why)) => (Status::NoEngine, format!("its engine failed: {why}")),
        (Ok(s), Ok(()), None) if *s != known.settings => (
            Status::NoEngine,
            format!(
                "its settings ({s}) are not its engine's ({})",
                known.settings
            ),
        ),
        (Ok(_), Ok(()), None) => (Status::Engine, String::new()),
    };
    let cpus = comm
        .engine
        .table
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .cpus
        .get(known.rank)
        .copied()
        .flatten();
    blob_bytes(&Repr {
        status,
        id,
        identity: known.me,
        addr: Some(known.addr),
        cpus,
        engines,
        host: agree::truncate(host),
        settings: agree::truncate(&known.settings),
        reason: agree::truncate(&reason),
    })
}

fn blob_bytes(blob: &Repr<'_>) -> crate::Result<Vec<u8>> {
    Ok(blob
        .to_vec()
        .map_err(|e| CommError::Bootstrap(format!("joining blob: {e}")))?)
}

/// Step 2: the members, when every member's engine can take the communicator with the same
/// settings and id; otherwise why not (the same at every member: the same blobs, and `shm`
/// from the settings they agree on).
///
/// With shared memory on (`shm`), two members of different engines on one host make every
/// member fall back: joined, they would talk over TCP loopback, where an engine of the
/// communicator's own gives them shared memory. Measured with `bench/mpi_spawn_bench.c` (2
/// ranks spawn 2 on one 2-core host, Open MPI 4.1; docs/scale.md): joined, 16 MiB took
/// 1.24-1.71x the own engine's time (4 MiB a tie; below, the MPI's own broadcast runs). But
/// the fallback gives every member's process one engine (progress thread) more: it is taken
/// only when every member's process holds fewer than [`MAX_ENGINES`] (its blob's `engines`);
/// otherwise the communicator joins the engines over TCP, and [`Joins::over_tcp`] says why.
/// Measured there (the parents' second spawn, their third communicator; docs/scale.md): 16
/// MiB took 0.61-0.70x Open MPI's own broadcast's time, 1.05-1.84x a third engine's.
pub(super) fn decide(blobs: &[Vec<u8>], id: u32, shm: bool) -> Result<Joins, String> {
    let mut members = Vec::with_capacity(blobs.len());
    let mut engines = Vec::with_capacity(blobs.len());
    let mut settings: Option<&str> = None;
    for (r, b) in blobs.iter().enumerate() {
        let blob = Repr::parse(b)
            .map_err(|e| format!("rank {r} sent an unreadable joining blob ({e})"))?;
        match blob.status {
            Status::Engine => {}
            Status::NoEngine => {
                return Err(format!("rank {r}'s engine cannot take it: {}", blob.reason))
            }
            Status::Failed => return Err(format!("rank {r} failed: {}", blob.reason)),
        }
        if blob.id != id {
            return Err(format!(
                "rank {r} asked for communicator id {} and rank 0 for {id}",
                blob.id
            ));
        }
        match settings {
            None => settings = Some(blob.settings),
            Some(s) if s != blob.settings => {
                return Err(format!(
                    "rank {r}'s engine has other settings than rank 0's ({} against {s})",
                    blob.settings
                ))
            }
            Some(_) => {}
        }
        let addr = blob
            .addr
            .ok_or_else(|| format!("rank {r} gave no address"))?;
        if members.iter().any(|m: &Member| m.id == blob.identity) {
            return Err(format!("rank {r} is the same process as another rank"));
        }
        members.push(Member {
            id: blob.identity,
            addr,
            host: blob.host.to_string(),
            cpus: blob.cpus,
        });
        engines.push(usize::from(blob.engines));
    }
    let mut over_tcp = None;
    if shm {
        let shared_host = members.iter().enumerate().find_map(|(b, m)| {
            members[..b]
                .iter()
                .position(|o| o.id.0 != m.id.0 && o.host == m.host)
                .map(|a| (a, b))
        });
        if let Some((a, b)) = shared_host {
            let host = &members[b].host;
            let full = engines.iter().position(|&e| e >= MAX_ENGINES);
            let Some(r) = full else {
                return Err(format!(
                    "ranks {a} and {b} are of different engines on one host ({host}): joined they would talk over TCP, with an engine of its own over shared memory"
                ));
            };
            over_tcp = Some(format!(
                "ranks {a} and {b} are of different engines on one host ({host}) and talk over TCP: rank {r}'s process holds {} engines, and an engine of the communicator's own (shared memory) would make one more (at most {MAX_ENGINES} per process)",
                engines[r]
            ));
        }
    }
    Ok(Joins { members, over_tcp })
}

/// The engine's process of each member, appending those it does not know to its table and
/// link (under the table's lock, so that both grow alike).
fn grow(engine: &Shared, members: &[Member], keys: &[String]) -> crate::Result<Vec<usize>> {
    let mut table = engine.table.lock().unwrap_or_else(|e| e.into_inner());
    let mut procs = Vec::with_capacity(members.len());
    let mut new: Vec<usize> = Vec::new();
    for (r, m) in members.iter().enumerate() {
        match table.ids.iter().position(|&x| x == m.id) {
            Some(p) => procs.push(p),
            None => {
                procs.push(table.ids.len() + new.len());
                new.push(r);
            }
        }
    }
    if new.is_empty() {
        return Ok(procs);
    }
    let peers: Vec<NewPeer> = new
        .iter()
        .map(|&r| NewPeer {
            id: members[r].id,
            addr: members[r].addr,
        })
        .collect();
    let (reply, answer) = crossbeam_channel::bounded(1);
    engine.send(super::progress::Op::Grow { peers, reply })?;
    answer
        .recv()
        .map_err(|_| CommError::ProgressGone)?
        .map_err(|why| {
            CommError::Bootstrap(format!(
                "cannot add the new processes to this engine: {why}"
            ))
        })?;
    append(&mut table, members, &new, keys);
    Ok(procs)
}

/// Appends members `new` to `table` (their link already knows them).
fn append(table: &mut Table, members: &[Member], new: &[usize], keys: &[String]) {
    for &r in new {
        let host = table.host_number(&keys[r]);
        table.ids.push(members[r].id);
        table.host_of.push(host);
        table.cpus.push(members[r].cpus);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(status: Status, id: u32, who: (u64, u64), settings: &str) -> Vec<u8> {
        blob_on("h", 1, status, id, who, settings)
    }

    /// A member on `host` whose process holds `engines` engines.
    fn blob_on(
        host: &str,
        engines: u16,
        status: Status,
        id: u32,
        who: (u64, u64),
        settings: &str,
    ) -> Vec<u8> {
        Repr {
            status,
            id,
            identity: who,
            addr: Some("127.0.0.1:5000".parse().unwrap()),
            cpus: None,
            engines,
            host,
            settings,
            reason: "its link (raweth:eth0) cannot add peers",
        }
        .to_vec()
        .unwrap()
    }

    #[test]
    fn every_member_decides_alike_from_the_blobs() {
        let ok = [
            blob(Status::Engine, 7, (1, 0), "s"),
            blob(Status::Engine, 7, (2, 0), "s"),
        ];
        let m = decide(&ok, 7, false).unwrap().members;
        assert_eq!(m.iter().map(|m| m.id).collect::<Vec<_>>(), [(1, 0), (2, 0)]);
        let why = |blobs: &[Vec<u8>]| decide(blobs, 7, false).unwrap_err();
        assert!(
            why(&[ok[0].clone(), blob(Status::NoEngine, 7, (2, 0), "s")])
                .contains("rank 1's engine cannot take it: its link (raweth:eth0)")
        );
        assert!(
            why(&[ok[0].clone(), blob(Status::Failed, 7, (2, 0), "s")]).contains("rank 1 failed")
        );
        assert!(why(&[ok[0].clone(), blob(Status::Engine, 8, (2, 0), "s")]).contains("id 8"));
        assert!(
            why(&[ok[0].clone(), blob(Status::Engine, 7, (2, 0), "t")]).contains("other settings")
        );
        assert!(why(&[ok[0].clone(), ok[0].clone()]).contains("same process"));
        assert!(why(&[ok[0].clone(), vec![1, 2, 3]]).contains("unreadable"));
    }

    #[test]
    fn engines_sharing_a_host_fall_back_when_shared_memory_is_on() {
        let on = |host: &str, who| blob_on(host, 1, Status::Engine, 7, who, "s");
        // A0, B0 on h: joined they would talk over TCP; with shared memory off they would
        // anyway.
        let mixed = [on("h", (1, 0)), on("h", (2, 0)), on("g", (2, 1))];
        let why = decide(&mixed, 7, true).unwrap_err();
        assert!(
            why.contains("ranks 0 and 1 are of different engines on one host (h)"),
            "{why}"
        );
        let off = decide(&mixed, 7, false).unwrap();
        assert_eq!((off.members.len(), off.over_tcp), (3, None));
        // Each host's members of one engine (a job spawned onto other hosts): joined.
        let apart = [
            on("h", (1, 0)),
            on("h", (1, 1)),
            on("g", (2, 0)),
            on("g", (2, 1)),
        ];
        let joins = decide(&apart, 7, true).unwrap();
        assert_eq!((joins.members.len(), joins.over_tcp), (4, None));
    }

    /// The shared-memory fallback gives every member's process one engine more: only while
    /// every process holds fewer than [`MAX_ENGINES`]; a process that already holds 2 (its
    /// own and a fallback's from an earlier spawn onto its host) makes the communicator join
    /// the engines over TCP, the same at every member.
    #[test]
    fn the_fallback_leaves_every_process_at_most_two_engines() {
        let held = |host: &str, engines, who| blob_on(host, engines, Status::Engine, 7, who, "s");
        // Job A (2 processes) and job B: every process holds 1 engine: the fallback makes 2.
        let ab = [
            held("h", 1, (1, 0)),
            held("h", 1, (2, 0)),
            held("h", 1, (1, 1)),
        ];
        assert!(decide(&ab, 7, true)
            .unwrap_err()
            .contains("different engines on one host"));
        // Then A (now 2 engines each) and job C (1): joined over TCP, rank 0 says why.
        let ac = [
            held("h", 2, (1, 0)),
            held("h", 1, (3, 0)),
            held("h", 2, (1, 1)),
        ];
        let joins = decide(&ac, 7, true).unwrap();
        assert_eq!(
            joins.members.iter().map(|m| m.id).collect::<Vec<_>>(),
            [(1, 0), (3, 0), (1, 1)]
        );
        let why = joins.over_tcp.unwrap();
        assert!(
            why.contains(
                "ranks 0 and 1 are of different engines on one host (h) and talk over TCP"
            ) && why.contains("rank 0's process holds 2 engines")
                && why.contains("at most 2 per process"),
            "{why}"
        );
        // One member at the bound is enough (the last one here), and more than 2 too (ranks
        // as threads of one process, or engines made before this bound).
        for engines in [2, 5, u16::MAX] {
            let one = [
                held("h", 1, (1, 0)),
                held("h", 1, (2, 0)),
                held("h", engines, (2, 1)),
            ];
            let why = decide(&one, 7, true).unwrap().over_tcp.unwrap();
            assert!(
                why.contains(&format!("rank 2's process holds {engines} engines")),
                "{why}"
            );
        }
        // The other reasons to fall back stay, whatever the engines held.
        let other = [
            held("h", 2, (1, 0)),
            blob_on("h", 2, Status::Engine, 7, (2, 0), "t"),
        ];
        assert!(decide(&other, 7, true)
            .unwrap_err()
            .contains("other settings"));
        let cannot = [
            held("h", 2, (1, 0)),
            blob_on("h", 2, Status::NoEngine, 7, (2, 0), "s"),
        ];
        assert!(decide(&cannot, 7, true)
            .unwrap_err()
            .contains("cannot take it"));
        // Without a host shared by two engines, the count does not matter.
        let apart = [held("h", 2, (1, 0)), held("g", 2, (2, 0))];
        assert_eq!(decide(&apart, 7, true).unwrap().over_tcp, None);
    }
}
