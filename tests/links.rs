//! One conformance suite for every link: the same cases run against TCP, shared memory
//! (attaching to the writer's memory, and through the staging ring), RDMA verbs over its
//! in-memory model, raw Ethernet in memory (its link on an in-memory switch,
//! `raweth::medium`), the simulated link (the same, with seeded loss, duplicates and
//! reordering: raw Ethernet's lossy-path adapter recovering) and raw Ethernet on a lab
//! (`AF_PACKET` sockets on veth interfaces behind a bridge, in network namespaces: root
//! only; it says "skipped" elsewhere, and fails under `PIPECAST_REQUIRE=root`). Each rank's
//! link is behind `dyn Link` and driven the way the progress thread drives it (registration
//! around each broadcast where the link needs it). The cases: every size class (0, 1, odd,
//! one short of and not a multiple of the segment, large) from two roots over a chain and a
//! fan-out; early arrivals (one rank posts late, so data comes before its broadcast); a full
//! window (one segment in flight per child); registration (the driver's register/deregister
//! protocol checked by [`Recording`] on every link, two broadcasts on one buffer); and a peer
//! that closes mid-broadcast (its waiters fail naming it, nobody hangs: a reliable link sees
//! the connection close, a lossy one the peer fall silent).
//!
//! An integration test, above every layer: it drives the links through `engine::drive::Engine`
//! and builds labs with the tests' own namespace helpers (tests/common).

mod common;

use common::netns::Lab;
use common::pattern;
use common::requirements::{root, tool};
use pipecast::engine::drive::Engine;
use pipecast::engine::{Bcast, Config, Setup};
use pipecast::plan::{baseline, Lane};
use pipecast::transport::raweth::medium::{Impairments, Medium};
use pipecast::transport::raweth::port::Port;
use pipecast::transport::raweth::{self, RawEthTransport};
use pipecast::transport::recording::{Event, Recording};
use pipecast::transport::shm::{ShmLink, ShmMode};
use pipecast::transport::verbs::model::Fabric;
use pipecast::transport::verbs::{LinkConfig, VerbsLink};
use pipecast::transport::{Buffer, Buffers, Link, TcpTransport};
use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The links under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tcp,
    ShmAttach,
    ShmRing,
    VerbsModel,
    RawEthMemory,
    Simulated,
    RawEthLab,
}

const KINDS: [Kind; 7] = [
    Kind::Tcp,
    Kind::ShmAttach,
    Kind::ShmRing,
    Kind::VerbsModel,
    Kind::RawEthMemory,
    Kind::Simulated,
    Kind::RawEthLab,
];
const COOKIE: u64 = 0xc0f0_2929;
const SEGMENT: u64 = 4096;
/// Real time after which a case counts as hung.
const HANG: Duration = Duration::from_secs(60);

/// The simulated link's edges: 3 % of frames lost, 2 % duplicated, 10 % held back for up to 4
/// of the receiver's polls (overtaken by later ones), from a fixed seed.
const SIMULATED: Impairments = Impairments {
    drop: 0.03,
    duplicate: 0.02,
    delay: 0.1,
    max_delay: 4,
    seed: 29,
};

/// Raw Ethernet's tuning here: retransmission timers and liveness for the suite's clock of a
/// millisecond a round (a peer silent for 500 rounds is gone).
fn raweth_config() -> raweth::Config {
    raweth::Config {
        reliable: pipecast::engine::reliable::Config {
            rto_initial: 10_000_000,
            rto_min: 5_000_000,
            ..Default::default()
        },
        liveness: 500_000_000,
        ..raweth::Config::default()
    }
}

/// A MAC address for rank `r` on the in-memory switch (locally administered).
fn mac(r: usize) -> [u8; 6] {
    [0x02, 0x29, 0, 0, 0, r as u8 + 1]
}

/// Raw Ethernet links (rank r's at r), told each other's addresses.
fn raweth_links(ts: Vec<RawEthTransport>) -> Vec<Box<dyn Link>> {
    let n = ts.len();
    let macs: Vec<_> = ts.iter().map(RawEthTransport::local_mac).collect();
    ts.into_iter()
        .enumerate()
        .map(|(r, mut t)| {
            t.set_peers(macs.clone(), COOKIE).unwrap();
            let others: Vec<usize> = (0..n).filter(|&p| p != r).collect();
            t.connect(&others, Duration::from_secs(1)).unwrap();
            Box::new(t) as Box<dyn Link>
        })
        .collect()
}

/// Why raw Ethernet on a lab cannot run here, if it cannot: it needs root (namespaces,
/// CAP_NET_RAW) and iproute2.
fn lab_missing() -> Option<common::Missing> {
    let why = |m: common::Missing| common::missing(m.kind, format!("RawEthLab: {}", m.reason));
    root().or_else(|| tool("iproute2", "ip", &["-V"])).map(why)
}

/// What must outlive a case's links.
type Keep = Box<dyn Any>;

/// `n` connected links of `kind`, and what must outlive them (the verbs model's fabric, the
/// in-memory switch, the lab's namespaces); `None` when `kind` cannot run here (it said
/// so, or failed under `PIPECAST_REQUIRE`).
fn links(kind: Kind, n: usize) -> Option<(Vec<Box<dyn Link>>, Keep)> {
    let others = |r: usize| -> Vec<usize> { (0..n).filter(|&p| p != r).collect() };
    // Stream links connect all at once (each waits for its peers): a thread per rank.
    let connect_all = |links: Vec<Box<dyn Link>>| -> Vec<Box<dyn Link>> {
        let threads: Vec<_> = links
            .into_iter()
            .enumerate()
            .map(|(r, mut l)| {
                let peers = others(r);
                std::thread::spawn(move || {
                    l.connect(&peers, Duration::from_secs(20)).unwrap();
                    l
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    };
    match kind {
        Kind::Tcp => {
            let mut tcps: Vec<TcpTransport> = (0..n)
                .map(|r| TcpTransport::bind(r, "127.0.0.1").unwrap())
                .collect();
            let addrs: Vec<_> = tcps.iter().map(TcpTransport::local_addr).collect();
            for t in &mut tcps {
                t.set_peers(addrs.clone(), COOKIE);
            }
            let boxed = tcps.into_iter().map(|t| Box::new(t) as Box<dyn Link>);
            Some((connect_all(boxed.collect()), Box::new(())))
        }
        Kind::ShmAttach | Kind::ShmRing => {
            let mode = if kind == Kind::ShmRing {
                ShmMode::Ring
            } else {
                ShmMode::Cma
            };
            let tag: u64 = rand::random();
            let names: Vec<String> = (0..n)
                .map(|r| format!("pipecast.links.{tag:x}.{r}"))
                .collect();
            let boxed = (0..n).map(|r| {
                let mut l = ShmLink::bind(r, &names[r], mode, Duration::ZERO).unwrap();
                l.set_peers(names.clone(), COOKIE);
                Box::new(l) as Box<dyn Link>
            });
            Some((connect_all(boxed.collect()), Box::new(())))
        }
        Kind::VerbsModel => {
            let fabric = Fabric::new(7);
            let cfg = LinkConfig::default();
            let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
            let mut vs: Vec<VerbsLink<_>> = (0..n)
                .map(|r| {
                    let node = fabric.node_with_cq(cfg.cq_entries());
                    VerbsLink::new(r, n, node, cfg, "verbs:model".into(), ip).unwrap()
                })
                .collect();
            let addrs: Vec<_> = vs.iter().map(VerbsLink::local_addr).collect();
            for v in &mut vs {
                v.set_peers(&addrs, COOKIE).unwrap();
            }
            // Its edges connect when a broadcast first uses them, inside rounds.
            let boxed = vs.into_iter().enumerate().map(|(r, mut v)| {
                v.connect(&others(r), Duration::from_secs(20)).unwrap();
                Box::new(v) as Box<dyn Link>
            });
            Some((boxed.collect(), Box::new(fabric)))
        }
        Kind::RawEthMemory | Kind::Simulated => {
            let impair = if kind == Kind::Simulated {
                SIMULATED
            } else {
                Impairments::default()
            };
            let medium = Medium::new(1024, impair);
            let ts = (0..n)
                .map(|r| {
                    let port = medium.port(&format!("mem{r}"), mac(r), 1500).unwrap();
                    let ports = vec![Box::new(port) as Box<dyn Port>];
                    RawEthTransport::with_ports(r, ports, raweth_config()).unwrap()
                })
                .collect();
            Some((raweth_links(ts), Box::new(medium)))
        }
        Kind::RawEthLab => {
            if let Some(missing) = lab_missing() {
                missing.skip();
                return None;
            }
            let mut lab = Lab::new("pcln");
            let (_, hosts) = lab.star(n);
            let ts = (hosts.iter().enumerate())
                .map(|(r, ns)| RawEthTransport::bind_in_netns(r, ns, "eth0", raweth_config()))
                .collect::<Result<_, _>>()
                .unwrap();
            Some((raweth_links(ts), Box::new(lab)))
        }
    }
}

/// One rank: its link, endpoint, buffers, and whether it failed (with what).
struct Rank {
    link: Box<dyn Link>,
    endpoint: Engine,
    bufs: Buffers,
    /// The buffers of finished broadcasts, handed back (the driver takes them out of the
    /// link's sight).
    done: Buffers,
    failed: Option<String>,
    /// The broadcasts posted here and not finished yet.
    running: Vec<u64>,
}

impl Rank {
    /// Broadcast `seq` is over here (done or failed): forgotten, deregistered, its buffer
    /// handed back.
    fn finish(&mut self, seq: u64) {
        self.endpoint.finish(seq);
        if self.link.capabilities().needs_registration {
            self.link.deregister(seq);
        }
        if let Some(buf) = self.bufs.remove(&seq) {
            self.done.insert(seq, buf);
        }
    }
}

/// Every rank of one case, driven round robin from one thread (each round: the engine's
/// timers, one round of the link without waiting, then completions, as the progress thread
/// does them), on a virtual clock of a millisecond a round.
struct Ranks {
    ranks: Vec<Rank>,
    now: Arc<Mutex<u64>>,
    /// What must outlive the links (dropped after them).
    keep: Keep,
    kind: Kind,
    /// Each rank's log of what the driver did, when its link is wrapped in a [`Recording`].
    logs: Vec<Arc<Mutex<Vec<Event>>>>,
}

impl Ranks {
    /// `None` when `kind` cannot run here.
    fn new(kind: Kind, n: usize, wrap: bool) -> Option<Ranks> {
        let (links, keep) = links(kind, n)?;
        let mut logs = Vec::new();
        let ranks = links
            .into_iter()
            .map(|l| Rank {
                link: if wrap {
                    let (rec, log) = Recording::new(l);
                    logs.push(log);
                    Box::new(rec) as Box<dyn Link>
                } else {
                    l
                },
                endpoint: Engine::new(),
                bufs: Buffers::new(),
                done: Buffers::new(),
                failed: None,
                running: Vec::new(),
            })
            .collect();
        Some(Ranks {
            ranks,
            now: Arc::new(Mutex::new(0)),
            keep,
            kind,
            logs,
        })
    }

    /// Posts broadcast `setup` over `lanes` at rank `r` on a fresh buffer (the root's holds
    /// the message), registered first where the link needs it.
    fn post(&mut self, r: usize, lanes: &[Lane], setup: Setup, config: Config) {
        let len = setup.msize as usize;
        let bytes = if r == setup.root {
            pattern(len, setup.seq as usize)
        } else {
            vec![0xee; len]
        };
        self.post_on(r, lanes, setup, config, Buffer::Owned(bytes));
    }

    /// Posts broadcast `setup` over `lane` at ranks `ranks` ([`Ranks::post`]).
    fn post_at(
        &mut self,
        ranks: std::ops::Range<usize>,
        lane: &Lane,
        setup: Setup,
        config: Config,
    ) {
        for r in ranks {
            self.post(r, std::slice::from_ref(lane), setup, config);
        }
    }

    fn post_on(&mut self, r: usize, lanes: &[Lane], setup: Setup, config: Config, buf: Buffer) {
        let now = *self.now.lock().unwrap();
        let rank = &mut self.ranks[r];
        rank.bufs.insert(setup.seq, buf);
        if rank.link.capabilities().needs_registration {
            rank.link
                .register(setup.seq, &rank.bufs[&setup.seq])
                .unwrap();
        }
        let b = Bcast::new(r, lanes, setup, config, now).unwrap();
        let buf = rank.bufs.get_mut(&setup.seq).unwrap().as_mut_slice();
        rank.endpoint.post(b, buf, now).unwrap();
        rank.running.push(setup.seq);
    }

    /// One round of every rank that has not failed; a rank that fails closes its link (so
    /// that its peers fail too) and gives its buffers back.
    fn round(&mut self) {
        let now = {
            let mut now = self.now.lock().unwrap();
            *now += 1_000_000;
            *now
        };
        let shared = self.now.clone();
        let clock = move || *shared.lock().unwrap();
        for rank in &mut self.ranks {
            if rank.failed.is_some() {
                continue;
            }
            let result = rank
                .endpoint
                .handle_timeout(now)
                .map_err(pipecast::Error::from)
                .and_then(|()| {
                    rank.link
                        .progress(&mut rank.bufs, &mut rank.endpoint, &clock, Duration::ZERO)
                });
            if let Err(e) = result {
                rank.failed = Some(e.to_string());
                rank.link.shutdown();
                for seq in std::mem::take(&mut rank.running) {
                    rank.finish(seq);
                }
                continue;
            }
            let done: Vec<u64> = (rank.running.iter().copied())
                .filter(|&seq| rank.endpoint.is_done(seq))
                .collect();
            for seq in done {
                rank.running.retain(|&s| s != seq);
                rank.finish(seq);
            }
        }
    }

    /// Rounds until every rank that has not failed finished what it posted; panics after
    /// [`HANG`].
    fn run(&mut self, what: &str) {
        let start = Instant::now();
        while self
            .ranks
            .iter()
            .any(|r| r.failed.is_none() && !r.running.is_empty())
        {
            assert!(start.elapsed() < HANG, "{:?}: {what}: a hang", self.kind);
            self.round();
        }
    }

    /// Every rank holds broadcast `seq`'s message, and none failed.
    fn check(&self, seq: u64, what: &str) {
        for (r, rank) in self.ranks.iter().enumerate() {
            assert_eq!(rank.failed, None, "{:?}: {what}: rank {r}", self.kind);
            let got = rank.done[&seq].as_slice();
            assert!(
                got == pattern(got.len(), seq as usize),
                "{:?}: {what}: rank {r} holds wrong bytes",
                self.kind
            );
        }
    }

    /// Keeps serving every link until all are done: a rank done with its part may still owe
    /// its parent a credit.
    fn settle(&mut self) {
        for _ in 0..50 {
            self.round();
        }
    }
}

fn setup(seq: u64, root: usize, msize: usize) -> Setup {
    Setup {
        seq,
        root,
        msize: msize as u64,
        segment: SEGMENT,
        deep: false,
    }
}

fn config() -> Config {
    Config {
        window: 4,
        credit_every: 2,
        ..Config::default()
    }
}

/// The trees of the cases: a chain (every rank forwards) and a fan-out, from `root`.
fn trees(n: usize, root: usize) -> [(&'static str, Lane); 2] {
    let order: Vec<usize> = (0..n).map(|i| (root + i) % n).collect();
    [
        ("chain", Lane::chain(n, &order)),
        ("flat", baseline::flat(n, root)),
    ]
}

const SIZES: [usize; 6] = [
    0,
    1,
    4095,
    3 * SEGMENT as usize + 17,
    64 * 1024 + 1,
    (1 << 20) + 3,
];

#[test]
fn every_size_class_from_two_roots_over_two_trees_is_byte_exact() {
    let n = 4;
    for kind in KINDS {
        let Some(mut ranks) = Ranks::new(kind, n, false) else {
            continue;
        };
        let mut seq = 0;
        for root in [0, n - 1] {
            for (tree, lane) in trees(n, root) {
                for size in SIZES {
                    seq += 1;
                    ranks.post_at(0..n, &lane, setup(seq, root, size), config());
                    let what = format!("{tree} from {root}, {size} bytes");
                    ranks.run(&what);
                    ranks.check(seq, &what);
                }
            }
        }
        ranks.settle();
        if let Some(medium) = ranks.keep.downcast_ref::<Medium>() {
            let c = medium.counters();
            if kind == Kind::Simulated {
                let (lost, twice, late) = (c.dropped, c.duplicated, c.delayed);
                assert!(lost > 0 && twice > 0 && late > 0, "{kind:?}: {c:?}");
            } else {
                assert_eq!(c.dropped + c.duplicated + c.delayed, 0, "{c:?}");
            }
            assert_eq!(c.overflowed, 0, "{kind:?}: {c:?}");
        }
    }
}

/// The last rank posts only after the others ran for a while: the data of a broadcast it has
/// not posted yet arrives first (held, or left waiting at the writer), and lands when it
/// posts.
#[test]
fn data_that_arrives_before_its_broadcast_is_posted_lands_when_it_is() {
    let n = 3;
    for kind in KINDS {
        let Some(mut ranks) = Ranks::new(kind, n, false) else {
            continue;
        };
        for (i, size) in [1, 3 * SEGMENT as usize + 17, (1 << 18) + 5]
            .into_iter()
            .enumerate()
        {
            let seq = i as u64 + 1;
            let lane = trees(n, 0)[0].1.clone();
            ranks.post_at(0..n - 1, &lane, setup(seq, 0, size), config());
            for _ in 0..200 {
                ranks.round();
            }
            assert!(!ranks.ranks[n - 1].endpoint.is_done(seq));
            ranks.post_at(n - 1..n, &lane, setup(seq, 0, size), config());
            let what = format!("late rank, {size} bytes");
            ranks.run(&what);
            ranks.check(seq, &what);
        }
        ranks.settle();
    }
}

/// One segment in flight per child, a credit for each: 64 segments still arrive whole.
#[test]
fn a_full_window_of_one_segment_still_moves_every_byte() {
    let n = 3;
    let config = Config {
        window: 1,
        credit_every: 1,
        ..Config::default()
    };
    for kind in KINDS {
        let Some(mut ranks) = Ranks::new(kind, n, false) else {
            continue;
        };
        for (seq, (_, lane)) in trees(n, 1).into_iter().enumerate() {
            let seq = seq as u64 + 1;
            ranks.post_at(0..n, &lane, setup(seq, 1, 64 * 1024 - 5), config);
            ranks.run("window 1");
            ranks.check(seq, "window 1");
        }
        ranks.settle();
    }
}

/// Every link behind [`Recording`] (which needs registration): no round ever sees an
/// unregistered buffer, each buffer is registered before and deregistered after its
/// broadcast, and two broadcasts run one after the other on one buffer, registered again for
/// the second.
#[test]
fn every_link_sees_buffers_registered_before_data_and_deregistered_after() {
    let n = 3;
    for kind in KINDS {
        let Some(mut ranks) = Ranks::new(kind, n, true) else {
            continue;
        };
        let lane = trees(n, 0)[1].1.clone();
        let size = 5 * SEGMENT as usize + 3;
        for seq in 1..=2u64 {
            for r in 0..n {
                // The second broadcast reuses the first's buffer (the root's rewritten).
                let buf = match ranks.ranks[r].done.remove(&(seq - 1)) {
                    Some(Buffer::Owned(mut v)) if r == 0 => {
                        v.copy_from_slice(&pattern(size, seq as usize));
                        Buffer::Owned(v)
                    }
                    Some(b) => b,
                    None if r == 0 => Buffer::Owned(pattern(size, seq as usize)),
                    None => Buffer::Owned(vec![0xee; size]),
                };
                ranks.post_on(
                    r,
                    std::slice::from_ref(&lane),
                    setup(seq, 0, size),
                    config(),
                    buf,
                );
            }
            ranks.run("registration");
            ranks.check(seq, "registration");
        }
        ranks.settle();
        for (r, log) in ranks.logs.iter().enumerate() {
            let log = log.lock().unwrap();
            assert!(
                !log.iter().any(|e| matches!(e, Event::Unregistered(_))),
                "{kind:?}: rank {r}: a round over an unregistered buffer: {log:?}"
            );
            for seq in 1..=2u64 {
                let at = |want: Event| log.iter().position(|e| *e == want);
                let (reg, dereg) = (at(Event::Register(seq, size)), at(Event::Deregister(seq)));
                assert!(
                    matches!((reg, dereg), (Some(a), Some(b)) if a < b),
                    "{kind:?}: rank {r} broadcast {seq}: {log:?}"
                );
            }
        }
    }
}

/// The middle of a chain goes away mid-broadcast (its link dropped, as when its process
/// dies): the ranks that wait for it fail naming it, and nothing hangs.
#[test]
fn a_peer_that_closes_fails_its_waiters_without_a_hang() {
    let n = 3;
    for kind in KINDS {
        let Some(mut ranks) = Ranks::new(kind, n, false) else {
            continue;
        };
        let lane = trees(n, 0)[0].1.clone();
        ranks.post_at(0..n, &lane, setup(1, 0, 4 << 20), config());
        for _ in 0..3 {
            ranks.round();
        }
        assert!(!ranks.ranks[2].endpoint.is_done(1), "{kind:?}: too fast");
        let gone = ranks.ranks.remove(1);
        drop(gone);
        ranks.run("a peer closed");
        for (i, rank) in ranks.ranks.iter().enumerate() {
            let why = rank
                .failed
                .as_deref()
                .unwrap_or_else(|| panic!("{kind:?}: rank {} never noticed", [0, 2][i]));
            assert!(why.contains("rank 1"), "{kind:?}: {why}");
        }
    }
}
