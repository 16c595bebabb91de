//! The verbs link's protocol over the in-memory MODEL of verbs (`model.rs`): every tree, root
//! and awkward size byte for byte; the registered-ring fallback; several broadcasts in
//! flight; a peer that dies; ranks that disagree. And the model's own semantics.

use super::link::{LinkConfig, VerbsLink};
use super::model::{Fabric, ModelVerbs};
use super::ops::{Local, Op, QpState, RecvWr, Remote, SendWr, Verbs, VerbsError, WcKind, WcStatus};
use crate::engine::drive::Engine;
use crate::engine::{Bcast, Config, Setup};
use crate::plan::{self, Lane};
use crate::testing::pattern;
use crate::topology::{gen, Topology};
use crate::transport::{Buffer, Buffers, Driver, Link};
use crate::wire::bootstrap::VerbsAddr;
use std::cell::Cell;
use std::time::Duration;

/// One rank: its endpoint, link and buffers.
struct Rank {
    ep: Engine,
    link: VerbsLink<ModelVerbs>,
    bufs: Buffers,
}

/// The job cookie of the tests' ranks.
const COOKIE: u64 = 0x5eed_c0de;

/// `n` links on one model fabric, with each other's addresses: no queue pair yet (a
/// broadcast makes those of its edges). Their handshakes go over real TCP on the loopback.
fn links(fabric: &Fabric, n: usize, cfg: LinkConfig) -> Vec<VerbsLink<ModelVerbs>> {
    links_told(fabric, n, cfg, &|_| {})
}

/// [`links`], each told the addresses as `tell` leaves them (a listener moved elsewhere).
fn links_told(
    fabric: &Fabric,
    n: usize,
    cfg: LinkConfig,
    tell: &dyn Fn(&mut Vec<VerbsAddr>),
) -> Vec<VerbsLink<ModelVerbs>> {
    let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let links: Vec<VerbsLink<ModelVerbs>> = (0..n)
        .map(|r| {
            // The completion queue a device would be opened with (`verbs::open`).
            let node = fabric.node_with_cq(cfg.cq_entries());
            VerbsLink::new(r, n, node, cfg, "verbs:model".into(), ip).unwrap()
        })
        .collect();
    let mut addrs: Vec<_> = links.iter().map(VerbsLink::local_addr).collect();
    tell(&mut addrs);
    links
        .into_iter()
        .map(|mut link| {
            link.set_peers(&addrs, COOKIE).unwrap();
            link
        })
        .collect()
}

/// `n` ranks on one model fabric.
fn ranks(fabric: &Fabric, n: usize, cfg: LinkConfig) -> Vec<Rank> {
    ranks_of(links(fabric, n, cfg))
}

/// Ranks over `links`.
fn ranks_of(links: Vec<VerbsLink<ModelVerbs>>) -> Vec<Rank> {
    let n = links.len();
    links
        .into_iter()
        .enumerate()
        .map(|(r, mut link)| {
            // What the communicator does at creation: it connects nothing here.
            let others: Vec<usize> = (0..n).filter(|&p| p != r).collect();
            link.connect(&others, Duration::from_secs(10)).unwrap();
            Rank {
                ep: Engine::new(),
                link,
                bufs: Buffers::new(),
            }
        })
        .collect()
}

/// Broadcast `seq` from `root` of `msize` bytes in `segment`-byte segments.
fn setup_of(seq: u64, root: usize, msize: u64, segment: u64) -> Setup {
    Setup {
        seq,
        root,
        msize,
        segment,
        deep: false,
    }
}

/// Posts broadcast `setup` over `lanes` at every rank (the root holds the message) and
/// registers its buffers.
fn post(ranks: &mut [Rank], lanes: &[Lane], setup: Setup, config: Config) {
    for (r, rank) in ranks.iter_mut().enumerate() {
        post_at(rank, r, lanes, setup, config);
    }
}

/// Posts broadcast `setup` at rank `r` alone.
fn post_at(rank: &mut Rank, r: usize, lanes: &[Lane], setup: Setup, config: Config) {
    let len = setup.msize as usize;
    let b = Bcast::new(r, lanes, setup, config, 0).unwrap();
    let bytes = if r == setup.root {
        pattern(len, setup.seq as usize)
    } else {
        vec![0xee; len]
    };
    rank.bufs.insert(setup.seq, Buffer::Owned(bytes));
    let buf = rank.bufs.get_mut(&setup.seq).unwrap();
    rank.ep.post(b, buf.as_mut_slice(), 0).unwrap();
    rank.link.register(setup.seq, buf).unwrap();
}

/// Rounds of every rank's progress until broadcasts `seqs` are done everywhere (each then
/// finished and deregistered), or the first error. A virtual millisecond per round.
fn run(ranks: &mut [Rank], seqs: &[u64]) -> Result<(), (usize, crate::Error)> {
    run_counted(ranks, seqs, &mut vec![Asked::default(); ranks.len()])
}

/// What a link asked of its driver: rounds, and `talks_to` calls.
#[derive(Debug, Default, Clone, Copy)]
struct Asked {
    rounds: u64,
    talks_to: u64,
}

/// The engine, counting the link's `talks_to` calls.
struct Counting<'a> {
    ep: &'a mut Engine,
    talks_to: Cell<u64>,
}

impl Driver for Counting<'_> {
    fn next(
        &mut self,
        now: u64,
        serves: &dyn Fn(usize) -> bool,
    ) -> Option<crate::engine::driver::Outgoing> {
        Driver::next(&mut *self.ep, now, serves)
    }
    fn header(
        &mut self,
        from: usize,
        h: &crate::engine::DataHeader,
    ) -> crate::Result<crate::engine::driver::Landing> {
        Driver::header(&mut *self.ep, from, h)
    }
    fn landed(&mut self, now: u64, from: usize, m: &crate::engine::Message) -> crate::Result<()> {
        Driver::landed(&mut *self.ep, now, from, m)
    }
    fn held(
        &mut self,
        bufs: &mut dyn crate::engine::driver::Memory,
        now: u64,
        from: usize,
        m: crate::engine::Message,
        payload: Vec<u8>,
    ) -> crate::Result<()> {
        Driver::held(&mut *self.ep, bufs, now, from, m, payload)
    }
    fn waiting_for(&self) -> Vec<usize> {
        Driver::waiting_for(&*self.ep)
    }
    fn talks_to(&self) -> Vec<usize> {
        self.talks_to.set(self.talks_to.get() + 1);
        Driver::talks_to(&*self.ep)
    }
    fn in_flight(&self) -> u64 {
        Driver::in_flight(&*self.ep)
    }
    fn expected(&self, serves: &dyn Fn(usize) -> bool) -> Vec<crate::engine::Expected> {
        Driver::expected(&*self.ep, serves)
    }
    fn broadcast(&self, seq: u64) -> Option<crate::engine::driver::Broadcast<'_>> {
        Driver::broadcast(&*self.ep, seq)
    }
    fn may_wait(&self, wait: Duration) -> Duration {
        Driver::may_wait(&*self.ep, wait)
    }
}

/// [`run`], adding to `asked` what each rank's link asked of its driver.
fn run_counted(
    ranks: &mut [Rank],
    seqs: &[u64],
    asked: &mut [Asked],
) -> Result<(), (usize, crate::Error)> {
    let now = Cell::new(0u64);
    let clock = || now.get();
    let mut left: Vec<Vec<u64>> = ranks.iter().map(|_| seqs.to_vec()).collect();
    for _round in 0..200_000 {
        now.set(now.get() + 1_000_000);
        for (r, rank) in ranks.iter_mut().enumerate() {
            if left[r].is_empty() {
                continue;
            }
            rank.ep
                .handle_timeout(now.get())
                .map_err(|e| (r, e.into()))?;
            let mut driver = Counting {
                ep: &mut rank.ep,
                talks_to: Cell::new(0),
            };
            rank.link
                .progress(&mut rank.bufs, &mut driver, &clock, Duration::ZERO)
                .map_err(|e| (r, e))?;
            asked[r].rounds += 1;
            asked[r].talks_to += driver.talks_to.get();
            for seq in left[r].clone() {
                if rank.ep.is_done(seq) {
                    rank.ep.finish(seq);
                    rank.link.deregister(seq);
                    left[r].retain(|&s| s != seq);
                }
            }
        }
        if left.iter().all(Vec::is_empty) {
            return Ok(());
        }
    }
    panic!("broadcasts {seqs:?} did not finish: a hang");
}

fn check(ranks: &[Rank], seq: u64, what: &str) {
    for (r, rank) in ranks.iter().enumerate() {
        let got = rank.bufs[&seq].as_slice();
        let want = pattern(got.len(), seq as usize);
        assert!(
            got == want.as_slice(),
            "rank {r} holds wrong bytes ({what})"
        );
    }
}

fn config() -> Config {
    Config {
        window: 4,
        credit_every: 2,
        ..Config::default()
    }
}

/// Every tree, every root, sizes 0, 1, odd, around and not a multiple of the segment, and
/// large: byte-exact at every rank, segments written straight into registered buffers (no
/// ring, no staging), with no receiver ever out of posted receives.
#[test]
fn every_tree_root_and_size_is_byte_exact_over_the_model() {
    let segment = 64u64;
    for size in [2, 3, 5] {
        let topo = gen::random_cluster(2, size, size as u64);
        let fabric = Fabric::new(7);
        let mut rs = ranks(&fabric, size, LinkConfig::default());
        let mut seq = 0;
        for tree in crate::sim::tests::all_trees() {
            for root in 0..size {
                let Ok(plan) = plan::build(&topo, root, &tree, Some(4)) else {
                    continue;
                };
                for msize in [0, 1, 7, segment - 1, segment + 1, 5 * segment + 3, 70_001] {
                    seq += 1;
                    let setup = Setup {
                        seq,
                        root,
                        msize,
                        segment,
                        deep: seq % 2 == 0,
                    };
                    post(&mut rs, &plan.lanes, setup, config());
                    run(&mut rs, &[seq]).unwrap_or_else(|(r, e)| {
                        panic!("{tree} root {root} msize {msize}: rank {r}: {e}")
                    });
                    check(&rs, seq, &format!("{tree} root {root} msize {msize}"));
                    for r in &mut rs {
                        r.bufs.remove(&seq);
                    }
                }
            }
        }
        for r in &rs {
            let c = r.link.counters();
            assert_eq!(c.get("verbs_ring_bytes"), None, "no ring without need");
            assert_eq!(c.get("verbs_staged_bytes"), None, "no staging without need");
            assert_eq!(r.link.cache_stats().2, 0, "every registration released");
        }
        assert_eq!(
            fabric.stats().rnr_naks,
            0,
            "receives pre-posted from `expected`"
        );
        assert_eq!(fabric.stats().remote_access_errors, 0);
    }
}

/// Ranks whose buffers cannot be registered (a locked-memory limit): children take their
/// segments through their registered ring in pieces (segments larger than a ring slot),
/// parents write through staging slots; byte-exact either way, and mixed.
#[test]
fn unregistrable_buffers_go_through_the_rings_byte_exact() {
    let cfg = LinkConfig {
        ring_slots: 2,
        ring_slot: 24,
        stage_slots: 2,
        ..LinkConfig::default()
    };
    let size = 5;
    let topo = Topology::single_switch(size);
    for limited in [vec![0, 1, 2, 3, 4], vec![1, 3], vec![0]] {
        let fabric = Fabric::new(7);
        let mut rs = ranks(&fabric, size, cfg);
        // Every edge connected first (a queue pair's own regions need registering too: with
        // a limit of 0 bytes, an edge made later fails, naming the limit).
        connect_all(&mut rs, &topo);
        for &r in &limited {
            fabric.limit_registration(r, 0);
        }
        let mut seq = size as u64;
        for tree in ["binary", "linear", "multilane"] {
            for root in [0, 3] {
                let plan = plan::build(&topo, root, &tree.parse().unwrap(), Some(4)).unwrap();
                for msize in [0, 1, 23, 24, 25, 100, 1001] {
                    seq += 1;
                    let setup = setup_of(seq, root, msize, 50);
                    post(&mut rs, &plan.lanes, setup, config());
                    run(&mut rs, &[seq]).unwrap_or_else(|(r, e)| {
                        panic!(
                            "limited {limited:?} {tree} root {root} msize {msize}: rank {r}: {e}"
                        )
                    });
                    check(
                        &rs,
                        seq,
                        &format!("limited {limited:?} {tree} {root} {msize}"),
                    );
                }
            }
        }
        let ring: u64 = rs
            .iter()
            .map(|r| {
                r.link
                    .counters()
                    .get("verbs_ring_bytes")
                    .copied()
                    .unwrap_or(0)
            })
            .sum();
        let staged: u64 = rs
            .iter()
            .map(|r| {
                r.link
                    .counters()
                    .get("verbs_staged_bytes")
                    .copied()
                    .unwrap_or(0)
            })
            .sum();
        assert!(ring > 0 && staged > 0, "ring {ring} staged {staged}");
    }
}

/// Three broadcasts in flight at once, different roots and trees, one buffer registered
/// by the cache once per broadcast; all byte-exact. They are of three communicators with
/// sequence numbers of equal low bytes: tokens and work request ids must not collide.
#[test]
fn broadcasts_in_flight_together_are_byte_exact() {
    use crate::engine::number::number;
    let size = 4;
    let topo = Topology::single_switch(size);
    let fabric = Fabric::new(7);
    let mut rs = ranks(&fabric, size, LinkConfig::default());
    let seqs = [number(0, 1), number(1, 1), number(5, 257)];
    for (seq, (tree, root, msize)) in
        seqs.into_iter()
            .zip([("binary", 0, 5000), ("linear", 2, 777), ("flat", 3, 1)])
    {
        let plan = plan::build(&topo, root, &tree.parse().unwrap(), Some(4)).unwrap();
        let setup = setup_of(seq, root, msize, 128);
        post(&mut rs, &plan.lanes, setup, config());
    }
    run(&mut rs, &seqs).unwrap_or_else(|(r, e)| panic!("rank {r}: {e}"));
    for seq in seqs {
        check(&rs, seq, "in flight together");
    }
}

/// A rank dies in the middle of a broadcast: the ranks that wait for it fail (its queue
/// pair's sends fail with "retry exceeded"), naming it, and nothing hangs.
#[test]
fn a_peer_that_disappears_fails_the_broadcast_without_a_hang() {
    let size = 3;
    let topo = Topology::single_switch(size);
    let fabric = Fabric::new(7);
    let mut rs = ranks(&fabric, size, LinkConfig::default());
    let plan = plan::build(&topo, 0, &"naive-linear".parse().unwrap(), None).unwrap();
    let setup = setup_of(1, 0, 100_000, 1000);
    post(&mut rs, &plan.lanes, setup, config());
    // A few rounds, then rank 1 (the middle of the chain) dies.
    let now = Cell::new(0u64);
    let clock = || now.get();
    for _ in 0..3 {
        for rank in rs.iter_mut() {
            rank.link
                .progress(&mut rank.bufs, &mut rank.ep, &clock, Duration::ZERO)
                .unwrap();
        }
    }
    assert!(!rs[2].ep.is_done(1));
    let dead = rs.remove(1);
    drop(dead);
    let mut failed = [None, None];
    for _ in 0..10_000 {
        now.set(now.get() + 10_000_000);
        for (i, rank) in rs.iter_mut().enumerate() {
            if failed[i].is_some() {
                continue;
            }
            if let Err(e) = rank
                .link
                .progress(&mut rank.bufs, &mut rank.ep, &clock, Duration::ZERO)
            {
                failed[i] = Some(e.to_string());
            }
        }
        if failed.iter().all(Option::is_some) {
            break;
        }
    }
    for (i, f) in failed.iter().enumerate() {
        let f = f
            .as_deref()
            .unwrap_or_else(|| panic!("rank {} never noticed", [0, 2][i]));
        assert!(f.contains("rank 1"), "{f}");
    }
    assert!(fabric.stats().retry_exceeded > 0);
}

/// A one-byte flat broadcast from every root (sequence numbers 1 to the number of ranks):
/// every edge connected.
fn connect_all(rs: &mut [Rank], topo: &Topology) {
    for root in 0..rs.len() {
        let plan = plan::build(topo, root, &"flat".parse().unwrap(), None).unwrap();
        let seq = 1 + root as u64;
        let setup = setup_of(seq, root, 1, 64);
        post(rs, &plan.lanes, setup, config());
        run(rs, &[seq]).unwrap_or_else(|(r, e)| panic!("connecting: rank {r}: {e}"));
        for r in rs.iter_mut() {
            r.bufs.remove(&seq);
        }
    }
}

/// A queue pair made under a locked-memory limit too low for its own regions fails with an
/// error naming the limit (the first edge uses the regions registered at creation).
#[test]
fn an_edge_that_cannot_register_its_rings_names_the_limit() {
    let size = 3;
    let topo = Topology::single_switch(size);
    let fabric = Fabric::new(7);
    let mut rs = ranks(&fabric, size, LinkConfig::default());
    fabric.limit_registration(0, 0);
    let plan = plan::build(&topo, 0, &"flat".parse().unwrap(), None).unwrap();
    let setup = setup_of(1, 0, 10, 64);
    post(&mut rs, &plan.lanes, setup, config());
    let (r, e) = run(&mut rs, &[1]).unwrap_err();
    let e = e.to_string();
    assert_eq!(r, 0, "{e}");
    assert!(
        e.contains("cannot register") && e.contains("ulimit -l"),
        "{e}"
    );
}

/// Broadcasts of each of `msizes` bytes over each (tree, root) of `trees`, one after another
/// (512-byte segments), each byte-exact at every rank; numbered after those the ranks ran.
/// What each rank's link asked of its driver meanwhile.
fn one_after_another(
    rs: &mut [Rank],
    topo: &Topology,
    trees: &[(&str, usize)],
    msizes: &[u64],
) -> Vec<Asked> {
    let mut asked = vec![Asked::default(); rs.len()];
    let mut seq = rs[0].bufs.keys().max().copied().unwrap_or(0);
    for &(tree, root) in trees {
        let plan = plan::build(topo, root, &tree.parse().unwrap(), None).unwrap();
        for &msize in msizes {
            seq += 1;
            post(rs, &plan.lanes, setup_of(seq, root, msize, 512), config());
            run_counted(rs, &[seq], &mut asked)
                .unwrap_or_else(|(r, e)| panic!("{tree} {root}: rank {r}: {e}"));
            check(rs, seq, &format!("{tree} root {root}"));
        }
    }
    asked
}

/// The distinct peers (parents and children, every lane) of `rank` in `lanes`.
fn edges_of(rank: usize, lanes: &[Lane], root: usize) -> usize {
    let setup = setup_of(1, root, 1, 64);
    Bcast::new(rank, lanes, setup, config(), 0)
        .unwrap()
        .peers()
        .len()
}

/// Queue pairs per tree edge: a rank makes queue pairs only to its parents and children
/// (linear: at most 2; binomial: its children and parent), one pair per edge even though both
/// ends ask at once (crossing requests), and byte-exact.
#[test]
fn a_rank_makes_queue_pairs_only_for_its_tree_edges() {
    let size = 8;
    let topo = Topology::single_switch(size);
    for tree in ["linear", "binomial", "binary", "flat"] {
        let fabric = Fabric::new(7);
        let mut rs = ranks(&fabric, size, LinkConfig::default());
        let plan = plan::build(&topo, 0, &tree.parse().unwrap(), Some(4)).unwrap();
        for (seq, msize) in [(1, 70_001), (2, 1)] {
            let setup = setup_of(seq, 0, msize, 1000);
            post(&mut rs, &plan.lanes, setup, config());
            run(&mut rs, &[seq]).unwrap_or_else(|(r, e)| panic!("{tree}: rank {r}: {e}"));
            check(&rs, seq, tree);
        }
        let mut total = 0;
        for r in 0..size {
            let (made, destroyed) = fabric.qps_of(r);
            let want = edges_of(r, &plan.lanes, 0);
            assert_eq!((made, destroyed), (want, 0), "{tree}: rank {r}");
            if tree == "linear" {
                assert!(made <= 2, "linear: rank {r} has {made} queue pairs");
            }
            total += made;
        }
        let edges: usize = (0..size).map(|r| edges_of(r, &plan.lanes, 0)).sum();
        assert_eq!(
            total, edges,
            "{tree}: one queue pair at each end of each edge"
        );
        assert!(total < size * (size - 1) || tree == "flat");
    }
}

/// Under a router (peers on the same host served by shared memory), the link makes queue
/// pairs only to the peers it was given (`connect`), though the broadcast's other peers
/// are in the endpoint too; and it asks to be served between broadcasts, to answer
/// handshakes.
#[test]
fn queue_pairs_only_to_the_peers_routed_to_the_link() {
    let fabric = Fabric::new(7);
    let mut ls = links(&fabric, 3, LinkConfig::default());
    let mut r0 = Rank {
        ep: Engine::new(),
        link: ls.remove(0),
        bufs: Buffers::new(),
    };
    r0.link.connect(&[2], Duration::from_secs(10)).unwrap();
    assert!(r0.link.serves_idle());
    let topo = Topology::single_switch(3);
    let plan = plan::build(&topo, 0, &"flat".parse().unwrap(), None).unwrap();
    post_at(&mut r0, 0, &plan.lanes, setup_of(1, 0, 10, 64), config());
    r0.link
        .progress(&mut r0.bufs, &mut r0.ep, &|| 0, Duration::ZERO)
        .unwrap();
    assert_eq!(fabric.qps_of(0), (1, 0), "a queue pair to rank 2 only");
    r0.link.deregister(1);
}

/// Broadcasts whose root changes: the first one from a root makes the queue pairs of its
/// edges that are new, later ones reuse them; all byte-exact.
#[test]
fn changing_roots_make_queue_pairs_on_first_use_and_reuse_them() {
    let size = 6;
    let topo = Topology::single_switch(size);
    let fabric = Fabric::new(7);
    let mut rs = ranks(&fabric, size, LinkConfig::default());
    let made = |f: &Fabric| (0..size).map(|r| f.qps_of(r).0).collect::<Vec<_>>();
    let mut seq = 0;
    let mut seen: Vec<Vec<usize>> = vec![Vec::new(); size];
    for root in [0, 0, 3, 3, 0, 5, 3, 5] {
        let plan = plan::build(&topo, root, &"binomial".parse().unwrap(), None).unwrap();
        let before = made(&fabric);
        seq += 1;
        let setup = setup_of(seq, root, 3001, 256);
        post(&mut rs, &plan.lanes, setup, config());
        run(&mut rs, &[seq]).unwrap_or_else(|(r, e)| panic!("root {root}: rank {r}: {e}"));
        check(&rs, seq, &format!("root {root}"));
        let after = made(&fabric);
        for r in 0..size {
            let b = Bcast::new(r, &plan.lanes, setup, config(), 0).unwrap();
            let new: Vec<usize> = b
                .peers()
                .into_iter()
                .filter(|p| !seen[r].contains(p))
                .collect();
            assert_eq!(
                after[r] - before[r],
                new.len(),
                "root {root}: rank {r} makes queue pairs for its new edges {new:?} only"
            );
            seen[r].extend(new);
            assert_eq!(fabric.qps_of(r).1, 0, "nothing closed under the bound");
        }
    }
}

/// A small bound: idle edges over it are closed (both ends agree), later broadcasts connect
/// them again, every byte stays right, and once idle each rank holds at most the bound.
#[test]
fn the_queue_pair_cache_is_bounded_and_closes_idle_edges_safely() {
    let size = 5;
    let topo = Topology::single_switch(size);
    let fabric = Fabric::new(7);
    let cfg = LinkConfig {
        max_qps: 1,
        ..LinkConfig::default()
    };
    let mut rs = ranks(&fabric, size, cfg);
    let trees = [
        ("binomial", 0),
        ("linear", 2),
        ("binomial", 4),
        ("flat", 1),
        ("binomial", 0),
    ];
    let asked = one_after_another(&mut rs, &topo, &trees, &[1, 5000]);
    // The peers in use are asked for when the broadcasts in flight change (each posted and
    // finished once), not every round.
    let broadcasts = (trees.len() * 2) as u64;
    for (r, a) in asked.iter().enumerate() {
        assert!(a.talks_to <= 2 * broadcasts + 1, "rank {r}: {a:?}");
    }
    let (talks, rounds) = asked
        .iter()
        .fold((0, 0), |(t, n), a| (t + a.talks_to, n + a.rounds));
    assert!(talks * 3 < rounds, "{asked:?}");
    // Idle rounds: the closes finish.
    let clock = || 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        for rank in rs.iter_mut() {
            rank.link
                .progress(&mut rank.bufs, &mut rank.ep, &clock, Duration::ZERO)
                .unwrap();
        }
        let live: Vec<usize> = (0..size)
            .map(|r| fabric.qps_of(r))
            .map(|(m, d)| m - d)
            .collect();
        if live.iter().all(|&n| n <= 1) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "idle edges not closed: {live:?}"
        );
    }
    let closed: usize = (0..size).map(|r| fabric.qps_of(r).1).sum();
    assert!(closed > 0);
    assert_eq!(
        fabric.stats().retry_exceeded,
        0,
        "no send met a closed queue pair"
    );
}

/// The completion queue is sized for `max_qps` queue pairs, and the model checks that it
/// never overruns: with shallow queues and a bound of 2, flat trees whose root has 5
/// children grow it first, and roots changing close idle edges and connect others (the
/// destroyed ones' completions count until the queue is polled empty); all byte-exact.
#[test]
fn the_completion_queue_never_overruns_and_grows_for_wide_trees() {
    let size = 6;
    let topo = Topology::single_switch(size);
    let fabric = Fabric::new(7);
    let cfg = shallow(2);
    assert_eq!(cfg.cq_entries(), 2 * (4 + 12));
    let mut rs = ranks(&fabric, size, cfg);
    let trees = [
        ("flat", 0),
        ("binomial", 3),
        ("flat", 5),
        ("linear", 1),
        ("flat", 0),
    ];
    one_after_another(&mut rs, &topo, &trees, &[1, 9000]);
    assert_eq!(fabric.stats().cq_overruns, 0);
    for r in [0, 5] {
        let c = rs[r].link.counters();
        assert!(
            c.get("verbs_cq_resizes").is_some_and(|&n| n > 0),
            "rank {r}: {c:?}"
        );
    }
    assert!(
        (0..size).map(|r| fabric.qps_of(r).1).sum::<usize>() > 0,
        "edges closed"
    );
}

/// Shallow queues (4 sends, 12 receives) and at most `max_qps` queue pairs kept: a small
/// completion queue, which wide trees must grow.
fn shallow(max_qps: usize) -> LinkConfig {
    LinkConfig {
        max_qps,
        send_depth: 4,
        recv_depth: 12,
        control_recvs: 4,
        ..LinkConfig::default()
    }
}

/// A completion queue grown for a wide tree shrinks back once the rank's edges need at most
/// a quarter of it (idle edges closed down to the bound), never below its size at creation,
/// and grows again when needed: no overrun, byte-exact throughout.
#[test]
fn a_grown_completion_queue_shrinks_when_its_edges_are_closed() {
    let size = 9;
    let topo = Topology::single_switch(size);
    let fabric = Fabric::new(7);
    let cfg = shallow(2);
    let base = cfg.cq_entries();
    let mut rs = ranks(&fabric, size, cfg);
    // The root of a flat tree holds 8 busy edges: its queue grows.
    one_after_another(&mut rs, &topo, &[("flat", 0)], &[1, 9000]);
    let grown = fabric.cq_entries_of(0);
    assert!(grown >= 8 * (4 + 12), "{grown}");
    // Chains from rank 0 use one edge there: the idle ones are closed down to the bound of
    // 2, a quarter of the grown queue or less, which then shrinks to its first size.
    let chains = [("linear", 0), ("linear", 0), ("linear", 0)];
    one_after_another(&mut rs, &topo, &chains, &[1, 9000]);
    let c = rs[0].link.counters();
    assert!(c.get("verbs_cq_shrinks").is_some_and(|&n| n > 0), "{c:?}");
    assert_eq!(fabric.cq_entries_of(0), base);
    // And it grows again for the next flat broadcast.
    one_after_another(&mut rs, &topo, &[("flat", 0)], &[9000]);
    assert!(fabric.cq_entries_of(0) > base);
    assert_eq!(fabric.stats().cq_overruns, 0);
}

/// Rank 0 needs an edge to rank 1, which is gone before the handshake, goes away in the
/// middle of it, or never answers: rank 0's broadcast fails naming rank 1, never hangs.
#[test]
fn a_peer_gone_mid_connect_is_an_error_not_a_hang() {
    let topo = Topology::single_switch(2);
    let plan = plan::build(&topo, 0, &"linear".parse().unwrap(), None).unwrap();
    let setup = setup_of(1, 0, 1000, 100);
    let clock = || 0u64;
    // How rank 0 fares while rank 1 does nothing (`before` runs once, after its first round).
    let fails = |before: &dyn Fn(&mut Vec<Rank>), timeout: Duration| -> String {
        let fabric = Fabric::new(7);
        let mut rs = ranks(&fabric, 2, LinkConfig::default());
        rs[0].link.connect(&[1], timeout).unwrap();
        post(&mut rs, &plan.lanes, setup, config());
        let r0 = &mut rs[0];
        let first = r0
            .link
            .progress(&mut r0.bufs, &mut r0.ep, &clock, Duration::ZERO);
        before(&mut rs);
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        let mut result = first;
        while result.is_ok() {
            assert!(std::time::Instant::now() < give_up, "rank 0 hangs");
            let r0 = &mut rs[0];
            result = r0
                .link
                .progress(&mut r0.bufs, &mut r0.ep, &clock, Duration::ZERO);
        }
        result.unwrap_err().to_string()
    };
    // Gone in the middle: it took the request's connection (queued at its listener) and
    // went away without answering.
    let e = fails(&|rs| drop(rs.remove(1)), Duration::from_secs(10));
    assert!(e.contains("rank 1") && e.contains("handshake"), "{e}");
    // Alive but silent: the deadline.
    let e = fails(&|_| {}, Duration::from_millis(200));
    assert!(e.contains("rank 1") && e.contains("did not answer"), "{e}");
    // Gone before: its listener is closed.
    let fabric = Fabric::new(7);
    let mut ls = links(&fabric, 2, LinkConfig::default());
    drop(ls.remove(1));
    let mut r0 = Rank {
        ep: Engine::new(),
        link: ls.remove(0),
        bufs: Buffers::new(),
    };
    r0.link.connect(&[1], Duration::from_secs(10)).unwrap();
    post_at(&mut r0, 0, &plan.lanes, setup, config());
    let e = r0
        .link
        .progress(&mut r0.bufs, &mut r0.ep, &clock, Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 1") && e.contains("still running"), "{e}");
}

/// Rank 0 needs edges to ranks 1, 2 and 3 (a flat tree), and rank 1's host does not answer:
/// its listener's accept queue is full, so the kernel drops the SYNs, as for a host that is
/// down. The edges to 2 and 3 connect and their broadcast completes there, byte-exact, while
/// the connection to rank 1 is still under way (a connect that waited would hold up rank 0's
/// whole link meanwhile). Then nobody listens there any more (a retransmitted SYN is
/// refused): rank 0's broadcast fails naming rank 1, never hangs.
#[test]
fn a_peer_whose_host_does_not_answer_holds_up_no_other_edge() {
    use std::os::fd::AsRawFd;
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: listen(2) on a listening socket this test owns only shrinks its backlog.
    assert_eq!(unsafe { libc::listen(down.as_raw_fd(), 0) }, 0);
    let down_at = down.local_addr().unwrap();
    let filler = std::net::TcpStream::connect(down_at).unwrap(); // the queue is full now
    let size = 4;
    let fabric = Fabric::new(7);
    let mut rs = ranks_of(links_told(&fabric, size, LinkConfig::default(), &|a| {
        a[1].listen = down_at
    }));
    rs[0]
        .link
        .connect(&[1, 2, 3], Duration::from_secs(600))
        .unwrap();
    let topo = Topology::single_switch(size);
    let plan = plan::build(&topo, 0, &"flat".parse().unwrap(), None).unwrap();
    let setup = setup_of(1, 0, 70_001, 1000);
    for r in [0, 2, 3] {
        post_at(&mut rs[r], r, &plan.lanes, setup, config());
    }
    let clock = || 0u64;
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    let mut done = [false; 4];
    while !(done[2] && done[3]) {
        assert!(std::time::Instant::now() < give_up, "ranks 2 and 3 hang");
        for r in [0, 2, 3] {
            let rank = &mut rs[r];
            rank.link
                .progress(&mut rank.bufs, &mut rank.ep, &clock, Duration::ZERO)
                .unwrap_or_else(|e| panic!("rank {r}: {e}"));
            if r != 0 && !done[r] && rank.ep.is_done(1) {
                rank.ep.finish(1);
                rank.link.deregister(1);
                done[r] = true;
            }
        }
    }
    for r in [2, 3] {
        assert!(
            rs[r].bufs[&1].as_slice() == pattern(70_001, 1).as_slice(),
            "rank {r} holds wrong bytes"
        );
    }
    let state = rs[0].link.describe_state(0);
    assert!(
        state.contains("3 queue pairs (1 connecting)") && state.contains("0 failed"),
        "{state}"
    );
    // Its host is gone for good.
    drop((down, filler));
    let r0 = &mut rs[0];
    let e = loop {
        assert!(std::time::Instant::now() < give_up, "rank 0 hangs");
        if let Err(e) = r0
            .link
            .progress(&mut r0.bufs, &mut r0.ep, &clock, Duration::ZERO)
        {
            break e.to_string();
        }
        std::thread::sleep(Duration::from_millis(10)); // the SYN is retransmitted in ~1 s
    };
    assert!(
        e.contains("rank 1") && e.contains(&down_at.to_string()) && e.contains("still running"),
        "{e}"
    );
    r0.link.deregister(1);
}

/// Ranks that disagree on the message size fail with an error naming both shapes (the
/// child's advert carries its own) instead of writing past a buffer.
#[test]
fn ranks_that_disagree_on_the_size_fail_instead_of_writing_past_a_buffer() {
    let topo = Topology::single_switch(2);
    let fabric = Fabric::new(7);
    let mut rs = ranks(&fabric, 2, LinkConfig::default());
    let plan = plan::build(&topo, 0, &"linear".parse().unwrap(), None).unwrap();
    for (r, msize) in [(0usize, 1000u64), (1, 100)] {
        let setup = setup_of(1, 0, msize, 64);
        let b = Bcast::new(r, &plan.lanes, setup, config(), 0).unwrap();
        let rank = &mut rs[r];
        rank.bufs
            .insert(1, Buffer::Owned(pattern(msize as usize, 1)));
        let buf = rank.bufs.get_mut(&1).unwrap();
        rank.ep.post(b, buf.as_mut_slice(), 0).unwrap();
        rank.link.register(1, buf).unwrap();
    }
    let (r, e) = run(&mut rs, &[1]).unwrap_err();
    assert_eq!(r, 0);
    let e = e.to_string();
    assert!(e.contains("1000 bytes") && e.contains("100 bytes"), "{e}");
}

/// The registration cache: requests inside a registered range share it; the region goes
/// when its last holder lets go; an invalidated range is never handed out again.
#[test]
fn the_registration_cache_shares_ranges_and_invalidates_safely() {
    use super::mr_cache::MrCache;
    let fabric = Fabric::new(7);
    let mut v = fabric.node();
    let mut cache = MrCache::new();
    let mut buf = vec![0u8; 4096];
    let p = buf.as_mut_ptr();
    // SAFETY: `buf` outlives every region (all are released before it drops).
    let (a, b) = unsafe {
        let a = cache.acquire(&mut v, p, 4096).unwrap();
        let b = cache.acquire(&mut v, p.add(100), 200).unwrap();
        (a, b)
    };
    assert_eq!(a, b, "inside a registered range");
    assert_eq!((cache.registered, cache.reused, cache.len()), (1, 1, 1));
    cache.invalidate(&mut v, p as u64 + 10, p as u64 + 11);
    // SAFETY: as above.
    let c = unsafe { cache.acquire(&mut v, p, 16) }.unwrap();
    assert_ne!(c, a, "an invalidated range is not handed out");
    cache.release(&mut v, a.id);
    assert_eq!(cache.len(), 2);
    cache.release(&mut v, b.id);
    cache.release(&mut v, c.id);
    assert!(cache.is_empty(), "released regions are deregistered");
    drop(buf);
}

// ---- The model's own semantics ----

/// Two nodes with one queue pair each, connected (RTS both ways), and a registered region of
/// 64 bytes on each.
struct Pair {
    fabric: Fabric,
    a: ModelVerbs,
    b: ModelVerbs,
    qa: super::ops::QpId,
    qb: super::ops::QpId,
    mem_a: Vec<u8>,
    mem_b: Vec<u8>,
    mr_a: super::ops::Mr,
    mr_b: super::ops::Mr,
}

fn pair(rnr_retry: u32) -> Pair {
    let fabric = Fabric::new(rnr_retry);
    let (mut a, mut b) = (fabric.node(), fabric.node());
    let (qa, qb) = (a.create_qp().unwrap(), b.create_qp().unwrap());
    let (mut mem_a, mut mem_b) = (vec![0u8; 64], vec![0u8; 64]);
    // SAFETY: the vectors live in the returned pair, and the nodes (fields declared before
    // them) are dropped first.
    let (mr_a, mr_b) = unsafe {
        (
            a.register(mem_a.as_mut_ptr(), 64).unwrap(),
            b.register(mem_b.as_mut_ptr(), 64).unwrap(),
        )
    };
    a.to_init(qa).unwrap();
    b.to_init(qb).unwrap();
    let ra = Remote {
        qpn: b.qp_num(qb),
        port: b.port(),
    };
    let rb = Remote {
        qpn: a.qp_num(qa),
        port: a.port(),
    };
    a.to_rtr(qa, &ra).unwrap();
    b.to_rtr(qb, &rb).unwrap();
    a.to_rts(qa).unwrap();
    b.to_rts(qb).unwrap();
    Pair {
        fabric,
        a,
        b,
        qa,
        qb,
        mem_a,
        mem_b,
        mr_a,
        mr_b,
    }
}

/// A write of `len` bytes of `mem_a` into `mem_b` at `at` (with a wrong rkey if `bad_key`).
fn write(p: &mut Pair, wr_id: u64, at: usize, len: u32, imm: Option<u32>, bad_key: bool) {
    let rkey = p.mr_b.rkey + if bad_key { 10 } else { 0 };
    let wr = SendWr {
        wr_id,
        op: Op::Write {
            remote_addr: p.mem_b.as_ptr() as u64 + at as u64,
            rkey,
            imm,
        },
        local: Local::Sge {
            addr: p.mem_a.as_ptr() as u64,
            len,
            lkey: p.mr_a.lkey,
        },
    };
    // SAFETY: the source lies in `mem_a`, registered, alive as long as the pair.
    unsafe { p.a.post_send(p.qa, &wr) }.unwrap();
}

fn recv(p: &mut Pair, wr_id: u64) {
    let wr = RecvWr {
        wr_id,
        addr: p.mem_b.as_ptr() as u64 + 48,
        len: 16,
        lkey: p.mr_b.lkey,
    };
    // SAFETY: inside `mem_b`, registered, alive as long as the pair.
    unsafe { p.b.post_recv(p.qb, &wr) }.unwrap();
}

fn polled(v: &mut ModelVerbs) -> Vec<super::ops::Completion> {
    let mut out = Vec::new();
    v.poll(&mut out, 100).unwrap();
    out
}

#[test]
fn model_queue_pairs_move_through_their_states_in_order_only() {
    let fabric = Fabric::new(7);
    let mut a = fabric.node();
    let q = a.create_qp().unwrap();
    assert_eq!(a.state(q), QpState::Reset);
    let remote = Remote {
        qpn: 0x100,
        port: a.port(),
    };
    assert!(matches!(
        a.to_rtr(q, &remote),
        Err(VerbsError::BadState { .. })
    ));
    a.to_init(q).unwrap();
    let wr = SendWr {
        wr_id: 1,
        op: Op::Send,
        local: Local::Inline(b"x"),
    };
    // SAFETY: an inline send references no memory.
    assert!(unsafe { a.post_send(q, &wr) }.is_err(), "no sends in INIT");
    assert!(a.to_rts(q).is_err(), "RTS needs RTR");
    a.to_rtr(q, &remote).unwrap();
    a.to_rts(q).unwrap();
    assert_eq!(a.state(q), QpState::Rts);
    assert!(a.to_init(q).is_err());
}

#[test]
fn model_writes_land_in_order_with_their_immediates() {
    let mut p = pair(7);
    p.mem_a[..8].copy_from_slice(b"abcdefgh");
    recv(&mut p, 100);
    recv(&mut p, 101);
    write(&mut p, 1, 0, 4, None, false);
    write(&mut p, 2, 8, 8, Some(0xabc), false);
    write(&mut p, 3, 20, 0, Some(0xdef), false);
    assert_eq!(&p.mem_b[..4], b"abcd");
    assert_eq!(&p.mem_b[8..16], b"abcdefgh");
    let sent: Vec<u64> = polled(&mut p.a).iter().map(|c| c.wr_id).collect();
    assert_eq!(sent, [1, 2, 3], "a queue pair completes in order");
    let got = polled(&mut p.b);
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.kind, c.imm, c.byte_len))
            .collect::<Vec<_>>(),
        [
            (100, WcKind::RecvWriteImm, Some(0xabc), 8),
            (101, WcKind::RecvWriteImm, Some(0xdef), 0)
        ],
        "a plain write consumes no receive"
    );
}

#[test]
fn model_rnr_waits_for_a_receive_or_fails_after_its_retries() {
    let mut p = pair(7);
    write(&mut p, 1, 0, 4, Some(1), false);
    assert!(
        polled(&mut p.a).is_empty(),
        "no receive posted: RNR, retried"
    );
    assert!(p.fabric.stats().rnr_naks > 0);
    recv(&mut p, 100);
    assert_eq!(polled(&mut p.a)[0].status, WcStatus::Success);
    assert_eq!(polled(&mut p.b)[0].imm, Some(1));

    let mut p = pair(2);
    for _ in 0..3 {
        write(&mut p, 1, 0, 4, Some(1), false);
    }
    let c = polled(&mut p.a);
    assert_eq!(c[0].status, WcStatus::RnrRetryExceeded);
    assert!(c[1..].iter().all(|c| c.status == WcStatus::Flushed));
    assert_eq!(p.a.state(p.qa), QpState::Error);
}

#[test]
fn model_remote_access_errors_for_a_bad_key_or_range() {
    for (at, len, rkey_ok) in [(0usize, 4u32, false), (60, 8, true)] {
        let mut p = pair(7);
        recv(&mut p, 100);
        write(&mut p, 1, at, len, None, !rkey_ok);
        write(&mut p, 2, 0, 4, None, false);
        let c = polled(&mut p.a);
        assert_eq!(c[0].status, WcStatus::RemoteAccess);
        assert_eq!(c[1].status, WcStatus::Flushed, "what follows is flushed");
        assert_eq!(p.a.state(p.qa), QpState::Error);
        assert_eq!(p.b.state(p.qb), QpState::Error, "the responder fails too");
        assert_eq!(polled(&mut p.b)[0].status, WcStatus::Flushed);
        assert_eq!(p.mem_b, vec![0u8; 64], "nothing written");
    }
}

/// One completion more than the queue holds is an overrun: every later poll fails (on a
/// device the queue and its queue pairs go to the error state); a resize makes room.
#[test]
fn model_completion_queue_overruns_are_fatal() {
    let mut p = pair(7);
    p.a.resize_cq(2).unwrap();
    assert_eq!(p.a.cq_entries(), 2);
    write(&mut p, 1, 0, 4, None, false);
    write(&mut p, 2, 0, 4, None, false);
    assert!(p.a.resize_cq(1).is_err(), "it holds 2");
    p.a.resize_cq(3).unwrap();
    write(&mut p, 3, 0, 4, None, false);
    assert_eq!(p.fabric.stats().cq_overruns, 0);
    write(&mut p, 4, 0, 4, None, false);
    assert_eq!(p.fabric.stats().cq_overruns, 1);
    let e = p.a.poll(&mut Vec::new(), 10).unwrap_err().to_string();
    assert!(e.contains("overran its 3 entries"), "{e}");
}

#[test]
fn model_sends_to_a_dead_peer_fail_with_retry_exceeded() {
    let mut p = pair(7);
    p.fabric.kill(p.b.node());
    write(&mut p, 1, 0, 4, None, false);
    let c = polled(&mut p.a);
    assert_eq!(c[0].status, WcStatus::RetryExceeded);
    assert_eq!(p.fabric.stats().retry_exceeded, 1);
}

/// Under a router whose waiting link is another one (shared memory between the two ranks of
/// each host; verbs between the hosts, the verbs link not waiting itself), broadcasts with
/// different roots, trees and sizes are byte-exact at every rank, and nothing hangs. Each
/// round waits up to the driver's 50 ms (`ROUND`); that the verbs link's wait set ends such
/// a wait is checked without timing by
/// `the_wait_set_is_readable_on_a_handshake_and_on_a_completion`.
#[test]
fn under_a_router_waiting_on_shared_memory_verbs_broadcasts_are_byte_exact() {
    use crate::transport::router::Router;
    use crate::transport::shm::{ShmLink, ShmMode};
    use crate::transport::Wake;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const ROUND: Duration = Duration::from_millis(50);
    let size = 4;
    let host = |r: usize| r / 2; // ranks 0, 1 on one host; 2, 3 on the other
    let topo = Topology::single_switch(size);
    let fabric = Fabric::new(7);
    let verbs = links(&fabric, size, LinkConfig::default());
    let tag: u64 = rand::random();
    let names: Vec<String> = (0..size)
        .map(|r| format!("pipecast.test.verbs-router.{tag:x}.{r}"))
        .collect();
    let runs: Vec<(u64, usize, &str, u64)> = vec![
        (1, 0, "binomial", 70_001),
        (2, 3, "linear", 1),
        (3, 1, "flat", 9_000),
        (4, 2, "binary", 0),
        (5, 0, "linear", 33_333),
    ];
    let (tx, rx) = std::sync::mpsc::channel();
    let over = Arc::new(AtomicBool::new(false));
    // Every rank's socket is bound before any rank connects (as the bootstrap guarantees):
    // shared memory dials on first use, and a socket that does not exist is a gone rank.
    let shms: Vec<ShmLink> = (0..size)
        .map(|r| {
            let mut shm = ShmLink::bind(r, &names[r], ShmMode::Auto, Duration::ZERO).unwrap();
            shm.set_peers(names.clone(), COOKIE);
            shm
        })
        .collect();
    for ((r, v), shm) in verbs.into_iter().enumerate().zip(shms) {
        let route = (0..size).map(|p| usize::from(host(p) != host(r))).collect();
        let links: Vec<Box<dyn Link>> = vec![Box::new(shm), Box::new(v)];
        let mut router = Router::new(links, route);
        let runs = runs.clone();
        let topo = topo.clone();
        let tx = tx.clone();
        let over = over.clone();
        std::thread::spawn(move || {
            let wake = Wake::new().unwrap();
            router.set_wake(wake.raw());
            let others: Vec<usize> = (0..size).filter(|&p| p != r).collect();
            router.connect(&others, Duration::from_secs(30)).unwrap();
            let start = std::time::Instant::now();
            let clock = move || start.elapsed().as_nanos() as u64;
            let mut ep = Engine::new();
            let mut bufs = Buffers::new();
            for (seq, root, tree, msize) in runs {
                let plan = plan::build(&topo, root, &tree.parse().unwrap(), None).unwrap();
                let setup = setup_of(seq, root, msize, 1000);
                let b = Bcast::new(r, &plan.lanes, setup, config(), clock()).unwrap();
                let bytes = if r == root {
                    pattern(msize as usize, seq as usize)
                } else {
                    vec![0xee; msize as usize]
                };
                bufs.insert(seq, Buffer::Owned(bytes));
                let buf = bufs.get_mut(&seq).unwrap();
                ep.post(b, buf.as_mut_slice(), clock()).unwrap();
                router.register(seq, buf).unwrap();
                while !ep.is_done(seq) {
                    ep.handle_timeout(clock()).unwrap();
                    router
                        .progress(&mut bufs, &mut ep, &clock, ROUND)
                        .unwrap_or_else(|e| panic!("rank {r}, broadcast {seq}: {e}"));
                }
                ep.finish(seq);
                router.deregister(seq);
                let ok = bufs[&seq].as_slice() == pattern(msize as usize, seq as usize).as_slice();
                tx.send((r, seq, ok)).unwrap();
            }
            // Serve the others until they are done too (as the progress thread does between
            // broadcasts), then stop.
            while !over.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(120) {
                router
                    .progress(&mut bufs, &mut ep, &clock, Duration::from_millis(20))
                    .ok();
            }
        });
    }
    drop(tx);
    for _ in 0..size * runs.len() {
        let (r, seq, ok) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a rank hangs under the router");
        assert!(ok, "rank {r} holds wrong bytes in broadcast {seq}");
    }
    over.store(true, Ordering::Relaxed);
    let (made, _) = (0..size)
        .map(|r| fabric.qps_of(r))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert!(made > 0, "queue pairs between the hosts");
}

/// The verbs link's `wait_fd` (what a router's waiting link waits on) becomes readable when a
/// peer dials its queue pair handshake listener, and when a completion arrives after its
/// round: decided by readiness, not by time.
#[test]
fn the_wait_set_is_readable_on_a_handshake_and_on_a_completion() {
    use super::waitset::readable;
    let topo = Topology::single_switch(2);
    let fabric = Fabric::new(7);
    let mut rs = ranks(&fabric, 2, LinkConfig::default());
    let fd = rs[0].link.wait_fd().expect("a wait set");
    assert!(!readable(fd));
    // Rank 1 needs the edge to rank 0 and dials its listener: the kernel completes the TCP
    // handshake without rank 0, whose wait set then reads ready.
    let plan = plan::build(&topo, 1, &"linear".parse().unwrap(), None).unwrap();
    let setup = setup_of(1, 1, 70_001, 1000);
    post_at(&mut rs[1], 1, &plan.lanes, setup, config());
    let clock = || 0u64;
    let mut give_up = 0;
    while !readable(fd) {
        give_up += 1;
        assert!(give_up < 100_000, "no handshake reached rank 0's wait set");
        let r1 = &mut rs[1];
        r1.link
            .progress(&mut r1.bufs, &mut r1.ep, &clock, Duration::ZERO)
            .unwrap();
        std::thread::yield_now();
    }
    post_at(&mut rs[0], 0, &plan.lanes, setup, config());
    run(&mut rs, &[1]).unwrap();
    check(&rs, 1, "linear root 1");
    // A round that handled everything leaves it unreadable; rank 1's next broadcast writes
    // into rank 0 (a completion there), which makes it readable.
    let r0 = &mut rs[0];
    let setup = setup_of(2, 1, 9000, 1000);
    post_at(r0, 0, &plan.lanes, setup, config());
    let mut give_up = 0;
    loop {
        let r0 = &mut rs[0];
        r0.link
            .progress(&mut r0.bufs, &mut r0.ep, &clock, Duration::ZERO)
            .unwrap();
        if !readable(fd) {
            break;
        }
        give_up += 1;
        assert!(give_up < 1000, "rank 0's wait set stays readable");
    }
    post_at(&mut rs[1], 1, &plan.lanes, setup, config());
    let mut give_up = 0;
    while !readable(fd) {
        give_up += 1;
        assert!(
            give_up < 1000,
            "a completion did not reach rank 0's wait set"
        );
        let r1 = &mut rs[1];
        r1.link
            .progress(&mut r1.bufs, &mut r1.ep, &clock, Duration::ZERO)
            .unwrap();
    }
    run(&mut rs, &[2]).unwrap();
    check(&rs, 2, "linear root 1 again");
}
