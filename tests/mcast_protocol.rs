//! The reliable multicast protocol (`engine::multicast`) whole, over the in-memory switch
//! (`raweth::medium`, which delivers group frames to every member) through the raw Ethernet
//! multicast carrier (`transport::mcast::ether`) and its frames (`wire::mcast`), with seeded
//! loss, duplication and reordering: every byte right at every rank, sizes 0, 1, odd, one
//! short of a segment, not a multiple of it and larger than the window, every root, 2–16
//! ranks, loss-free, 1 % and 10 % loss; a rank that never answers (gone) fails the root
//! within the timeout and nobody hangs; a late rank is waited for. Virtual time: a
//! millisecond per round, every rank polled once a round (timing never decides pass/fail: a
//! run that does not end within its round budget is a hang, and fails).
//!
//! An integration test, above every layer: it drives the pure protocol with the carriers.

mod common;

use common::pattern;
use pipecast::engine::multicast::{
    absent_answer, Absent, Config, McastError, Member, Msg, Shape, State, Stats,
};
use pipecast::transport::mcast::codec::{decode, Ident};
use pipecast::transport::mcast::ether::EtherCarrier;
use pipecast::transport::mcast::{accept, Carrier, Source};
use pipecast::transport::raweth::medium::{Impairments, Medium, MemoryPort};

const MS: u64 = 1_000_000;
const COOKIE: u64 = 0x3232_c0de;
const GROUP: [u8; 6] = [0x03, 0x50, 0x32, 0, 0, 1];
const SEGMENT: u32 = 1000;
/// Sizes: empty, one byte, odd and one short of a segment, not a multiple of the segment,
/// and more segments than the window.
const SIZES: [usize; 5] = [
    0,
    1,
    999,
    3 * SEGMENT as usize + 7,
    100 * SEGMENT as usize + 3,
];
/// Virtual milliseconds after which a broadcast counts as hung.
const HANG_MS: u64 = 120_000;

fn mac(r: usize) -> [u8; 6] {
    [0x02, 0x32, 0, 0, (r >> 8) as u8, r as u8]
}

fn config() -> Config {
    Config {
        window: 32,
        ack_every: 8,
        nack_delay: 2 * MS,
        nack_interval: 10 * MS,
        sync_interval: 10 * MS,
        liveness: 300 * MS,
        ..Config::default()
    }
}

fn lossy(drop: f64, seed: u64) -> Impairments {
    if drop == 0.0 {
        return Impairments::default();
    }
    Impairments {
        drop,
        duplicate: 0.02,
        delay: 0.1,
        max_delay: 4,
        seed,
    }
}

/// Rank `me`'s place in a `k`-ary ack tree over ranks relative to `root`.
fn shape(me: usize, root: usize, n: usize, k: usize) -> Shape {
    let rel = (me + n - root) % n;
    let abs = |rel: usize| (rel + root) % n;
    Shape {
        me,
        root,
        parent: (rel > 0).then(|| abs((rel - 1) / k)),
        children: (1..=k)
            .map(|i| rel * k + i)
            .filter(|&c| c < n)
            .map(abs)
            .collect(),
    }
}

struct Rank {
    carrier: EtherCarrier<MemoryPort>,
    member: Option<Member>,
    buf: Vec<u8>,
    /// When a late rank posts (virtual ms).
    posts_at: u64,
    /// Never polled: gone.
    gone: bool,
    result: Option<Result<(), McastError>>,
}

struct Net {
    medium: Medium,
    ranks: Vec<Rank>,
    now: u64,
    bseq: u64,
}

/// What one broadcast gave.
struct Outcome {
    results: Vec<Option<Result<(), McastError>>>,
    /// When the root finished (virtual ms).
    root_done_ms: u64,
    stats: Vec<Stats>,
}

impl Net {
    fn new(n: usize, impair: Impairments) -> Net {
        let medium = Medium::new(4096, impair);
        let macs: Vec<_> = (0..n).map(mac).collect();
        let ranks = (0..n)
            .map(|r| {
                let port = medium.port(&format!("m{r}"), mac(r), 1500).unwrap();
                port.join(GROUP);
                let mut carrier = EtherCarrier::on_port(port, GROUP);
                carrier.set_peers(macs.clone());
                Rank {
                    carrier,
                    member: None,
                    buf: Vec::new(),
                    posts_at: 0,
                    gone: false,
                    result: None,
                }
            })
            .collect();
        Net {
            medium,
            ranks,
            now: 0,
            bseq: 0,
        }
    }

    /// One broadcast of `msize` bytes from `root` over a `k`-ary ack tree; `late`: ranks that
    /// post that many ms late; `gone`: ranks that never answer.
    fn bcast(
        &mut self,
        root: usize,
        msize: usize,
        k: usize,
        late: &[(usize, u64)],
        gone: &[usize],
    ) -> Outcome {
        let n = self.ranks.len();
        self.bseq += 1;
        let bseq = self.bseq;
        let data = pattern(msize, bseq as usize);
        let start = self.now;
        for (r, rank) in self.ranks.iter_mut().enumerate() {
            rank.member = None;
            rank.result = None;
            rank.gone = gone.contains(&r);
            rank.posts_at = start + late.iter().find(|l| l.0 == r).map_or(0, |l| l.1 * MS);
            rank.buf = if r == root {
                data.clone()
            } else {
                vec![0; msize]
            };
        }
        let mut rx = vec![0u8; 2048];
        let mut root_done = None;
        loop {
            self.now += MS;
            let now = self.now;
            assert!(
                now - start < HANG_MS * MS,
                "broadcast {bseq} of {msize} bytes from {root} on {n} ranks hung: {:?}",
                self.ranks
                    .iter()
                    .map(|r| r.result.clone())
                    .collect::<Vec<_>>()
            );
            for r in 0..n {
                let rank = &mut self.ranks[r];
                if rank.gone {
                    continue;
                }
                if rank.member.is_none() && now >= rank.posts_at {
                    let m = Member::new(shape(r, root, n, k), msize as u64, SEGMENT, config(), now);
                    rank.member = Some(m.unwrap());
                }
                let ident = Ident {
                    cookie: COOKIE,
                    bseq,
                    root,
                    msize: msize as u64,
                    segment: SEGMENT,
                    me: r,
                };
                let parent = shape(r, root, n, k).parent;
                let mut answers = Vec::new();
                while let Some((source, len)) = rank.carrier.recv(&mut rx).unwrap() {
                    let is_rank = |p: usize, s: &Source| rank.carrier.is_rank(p, s);
                    let (repr, payload) = accept(&rx[..len], &source, r, COOKIE, &is_rank)
                        .expect("the medium corrupts nothing");
                    if repr.bseq() != bseq {
                        continue; // an earlier broadcast's, over everywhere
                    }
                    assert!(ident.matches(&repr), "{repr:?}");
                    let from = repr.from() as usize;
                    let msg = decode(&repr).expect("no probes here");
                    match &mut rank.member {
                        Some(m) => match msg {
                            Msg::Data { index, .. } => {
                                if let Some(range) = m.land(now, from, index) {
                                    assert_eq!(payload.len(), range.len(), "segment {index}");
                                    rank.buf[range].copy_from_slice(payload);
                                }
                            }
                            _ => m.handle(now, from, msg),
                        },
                        None => answers.extend(absent_answer(parent, Absent::NotYet, from, msg)),
                    }
                }
                if let Some(m) = &mut rank.member {
                    if m.poll_timeout(now).is_some_and(|t| t <= now) {
                        m.handle_timeout(now);
                    }
                    while let Some(out) = m.poll_transmit(now) {
                        let payload: &[u8] = match out.msg {
                            Msg::Data { index, .. } => &rank.buf[m.segment_range(index)],
                            _ => &[],
                        };
                        let header = ident.encode(&out, payload.len()).to_bytes(payload).unwrap();
                        assert!(rank.carrier.send(out.to, &header, payload).unwrap());
                    }
                    if rank.result.is_none() {
                        match m.state() {
                            State::Running => {}
                            State::Complete => rank.result = Some(Ok(())),
                            State::Failed(e) => rank.result = Some(Err(e.clone())),
                        }
                        if r == root && rank.result.is_some() {
                            root_done = Some((now - start) / MS);
                        }
                    }
                }
                for out in answers {
                    let header = ident.encode(&out, 0).to_bytes(&[]).unwrap();
                    assert!(rank.carrier.send(out.to, &header, &[]).unwrap());
                }
            }
            if self.ranks.iter().all(|r| r.gone || r.result.is_some()) {
                break;
            }
        }
        Outcome {
            results: self.ranks.iter().map(|r| r.result.clone()).collect(),
            root_done_ms: root_done.unwrap_or(u64::MAX),
            stats: self
                .ranks
                .iter()
                .map(|r| r.member.as_ref().map(Member::stats).unwrap_or_default())
                .collect(),
        }
    }

    /// Runs a broadcast that must succeed: every rank's buffer is the root's.
    fn bcast_ok(&mut self, root: usize, msize: usize, k: usize, late: &[(usize, u64)]) -> Outcome {
        let out = self.bcast(root, msize, k, late, &[]);
        let data = pattern(msize, self.bseq as usize);
        for (r, rank) in self.ranks.iter().enumerate() {
            assert_eq!(
                out.results[r],
                Some(Ok(())),
                "rank {r}, broadcast of {msize} bytes from {root}"
            );
            assert!(
                rank.buf == data,
                "rank {r} holds other bytes after a broadcast of {msize} bytes from {root} \
                 ({} ranks)",
                self.ranks.len()
            );
        }
        out
    }
}

/// Every size from the given roots on `n` ranks at loss `drop` (a binary ack tree for even
/// `n`, a 3-ary one for odd).
fn sizes_and_roots(n: usize, drop: f64, roots: &[usize]) {
    let mut net = Net::new(n, lossy(drop, n as u64 * 7919 + (drop * 1000.0) as u64));
    let k = if n % 2 == 0 { 2 } else { 3 };
    let mut repaired = 0;
    for &root in roots {
        for size in SIZES {
            let out = net.bcast_ok(root, size, k, &[]);
            repaired += out
                .stats
                .iter()
                .map(|s| s.repairs + s.group_repairs)
                .sum::<u64>();
            if std::env::var("MCAST_DEBUG").is_ok() {
                eprintln!(
                    "n {n} drop {drop} root {root} size {size}: root done {} ms {:?}",
                    out.root_done_ms, out.stats[root]
                );
            }
        }
    }
    if drop > 0.0 {
        assert!(
            net.medium.counters().dropped > 0,
            "the medium dropped nothing"
        );
        assert!(repaired > 0, "nothing was repaired");
    }
}

#[test]
fn two_to_sixteen_ranks_every_root_every_size_loss_free() {
    for n in 2..=16 {
        let roots: Vec<usize> = (0..n).collect();
        sizes_and_roots(n, 0.0, &roots);
    }
}

#[test]
fn two_to_sixteen_ranks_one_percent_loss_duplicates_and_reordering() {
    for n in 2..=16 {
        let roots: Vec<usize> = if n <= 8 {
            (0..n).collect()
        } else {
            vec![0, n / 2, n - 1]
        };
        sizes_and_roots(n, 0.01, &roots);
    }
}

#[test]
fn two_to_sixteen_ranks_ten_percent_loss_duplicates_and_reordering() {
    for n in 2..=16 {
        let roots: Vec<usize> = if n <= 5 {
            (0..n).collect()
        } else {
            vec![0, n - 1]
        };
        sizes_and_roots(n, 0.10, &roots);
    }
}

#[test]
fn a_flat_ack_tree_repairs_a_loss_near_the_root_on_the_group() {
    // Every rank the root's child: a segment many of them lost is multicast again.
    let mut net = Net::new(12, lossy(0.05, 5));
    let out = net.bcast_ok(3, SIZES[4], 12, &[]);
    assert!(out.stats[3].group_repairs > 0, "{:?}", out.stats[3]);
}

#[test]
fn many_broadcasts_in_a_row_stay_byte_exact() {
    let mut net = Net::new(7, lossy(0.03, 77));
    for i in 0..40 {
        net.bcast_ok(i % 7, (i * 7919) % 20_000, 2 + i % 3, &[]);
    }
}

#[test]
fn a_late_rank_is_waited_for_beyond_the_liveness_limit() {
    let liveness_ms = config().liveness / MS;
    for drop in [0.0, 0.10] {
        let mut net = Net::new(6, lossy(drop, 11));
        // An inner rank (rank 1 is rank 0's child and 3's and 4's parent) and a leaf.
        let late = [(1, 3 * liveness_ms), (5, liveness_ms + 50)];
        let out = net.bcast_ok(0, SIZES[4], 2, &late);
        assert!(out.root_done_ms >= 3 * liveness_ms, "{}", out.root_done_ms);
        let out = net.bcast_ok(2, SIZES[3], 2, &[(2, 2 * liveness_ms)]);
        assert!(out.root_done_ms >= 2 * liveness_ms);
    }
}

fn gone_case(n: usize, root: usize, gone: usize, drop: f64) {
    let liveness_ms = config().liveness / MS;
    let mut net = Net::new(n, lossy(drop, 3));
    let out = net.bcast(root, SIZES[4], 2, &[], &[gone]);
    let root_result = out.results[root].clone().expect("the root finished");
    let e = root_result.expect_err("the root cannot complete without a gone rank");
    assert_eq!(e.gone(), Some(gone), "{e}");
    // Found by its parent within the liveness limit (plus a sync interval and the way up).
    assert!(
        out.root_done_ms <= liveness_ms + 100,
        "the root failed after {} ms (liveness {liveness_ms} ms)",
        out.root_done_ms
    );
    for (r, res) in out.results.iter().enumerate() {
        if r == gone {
            continue;
        }
        let res = res.clone().expect("every live rank ended");
        if let Err(e) = res {
            assert_eq!(e.gone(), Some(gone), "rank {r}: {e}");
        }
    }
}

#[test]
fn a_gone_rank_fails_the_root_within_the_timeout_and_nobody_hangs() {
    // A leaf (rank 5's parent is 2), an inner rank (1: 3's and 4's parent), the root's only
    // child on two ranks; loss-free and lossy.
    for drop in [0.0, 0.05] {
        gone_case(6, 0, 5, drop);
        gone_case(6, 0, 1, drop);
        gone_case(2, 1, 0, drop);
        gone_case(9, 4, 8, drop);
    }
}
