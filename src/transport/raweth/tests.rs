//! Whole broadcasts between [`FrameLink`]s over an in-memory wire (no socket, no namespace):
//! frames corrupted on the way — a flipped byte anywhere in a frame, or a source address
//! turned into another peer's — are dropped by their checksum and counted, and the
//! reliability recovers them: every rank ends with every byte right.

use super::{Config, Counters, FrameLink};
use crate::engine::drive::Engine;
use crate::engine::{Bcast, Config as EngineConfig, Setup};
use crate::plan::Lane;
use crate::testing::pattern;
use crate::transport::raweth::socket::Mac;
use crate::transport::{Buffer, Buffers, TransportError};

/// A frame in flight: to rank, from MAC, bytes after the Ethernet header.
type Wire = Vec<(usize, Mac, Vec<u8>)>;

fn mac(rank: usize) -> Mac {
    [2, 0, 0, 0, 0, rank as u8 + 1]
}

/// How the wire spoils a frame.
#[derive(Clone, Copy)]
enum Spoil {
    /// XOR one byte (at a position that moves from frame to frame) with 0x20.
    FlipByte,
    /// Deliver it as if from another peer's MAC address.
    OtherSender,
    /// Deliver it unchanged.
    Nothing,
}

/// Broadcasts `msize` bytes from `root` down a chain over `n` ranks, spoiling one frame in
/// `every` (drawn at random, seeded); returns each rank's counters. Panics on a wrong byte, an error, or a
/// broadcast that does not end within 20 000 rounds of 1 ms.
fn run(
    n: usize,
    root: usize,
    msize: usize,
    checksum: bool,
    spoil: Spoil,
    every: usize,
) -> Vec<Counters> {
    let config = Config {
        checksum,
        ..wire_config()
    };
    let order: Vec<usize> = (0..n).map(|i| (root + i) % n).collect();
    let lanes = vec![Lane::chain(n, &order)];
    let want = pattern(msize, 0);
    let mut links: Vec<FrameLink> = (0..n)
        .map(|r| FrameLink::new(r, mac(r), config, 1000))
        .collect();
    let mut endpoints: Vec<Engine> = (0..n).map(|_| Engine::new()).collect();
    let mut bufs: Vec<Buffers> = (0..n).map(|_| Buffers::new()).collect();
    for link in &mut links {
        link.set_peers((0..n).map(mac).collect(), 0xc0ffee).unwrap();
    }
    post_everywhere(&mut endpoints, &mut bufs, &lanes, root, &want, None);
    let mut sent = 0usize;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ msize as u64;
    let mut now = 0u64;
    for _ in 0..20_000 {
        if endpoints.iter().all(|e| e.is_done(1)) {
            break;
        }
        now += 1_000_000;
        let mut wire: Wire = Vec::new();
        let ranks = (&mut links[..], &mut endpoints[..], &mut bufs[..]);
        send_round(ranks, now, &mut |r, _rail, to, mut bytes| {
            let dest = (0..n).find(|&d| mac(d) == *to).expect("a peer's MAC");
            let mut from = mac(r);
            sent += 1;
            // xorshift64
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng % every as u64 == 0 {
                match spoil {
                    Spoil::FlipByte => {
                        let at = (sent * 7919) % bytes.len();
                        bytes[at] ^= 0x20;
                    }
                    Spoil::OtherSender => {
                        from = mac((0..n).find(|&o| o != r && o != dest).unwrap());
                    }
                    Spoil::Nothing => {}
                }
            }
            wire.push((dest, from, bytes));
        });
        for (to, from, bytes) in wire {
            links[to]
                .receive_frame(&mut bufs[to], &mut endpoints[to], now, from, false, &bytes)
                .unwrap_or_else(|e| panic!("rank {to}: {e}"));
        }
    }
    check_every_byte(&links, &mut endpoints, &mut bufs, &want, now);
    links.iter().map(FrameLink::counters).collect()
}

/// The links' tuning on the in-memory wire: 1000-byte frames, a 1 ms round, so a short RTO.
fn wire_config() -> Config {
    Config {
        max_payload: Some(1000),
        reliable: crate::engine::reliable::Config {
            rto_initial: 3_000_000,
            rto_min: 1_000_000,
            ..Default::default()
        },
        ..Config::default()
    }
}

/// Broadcast 1: `msize` bytes from `root` in 4096-byte segments.
fn setup_of(root: usize, msize: usize) -> Setup {
    Setup {
        seq: 1,
        root,
        msize: msize as u64,
        segment: 4096,
        deep: false,
    }
}

/// Every rank's link, endpoint and buffers.
type Ranks<'a> = (&'a mut [FrameLink], &'a mut [Engine], &'a mut [Buffers]);

/// Hands rank `to` a frame that arrived on `rail` from MAC `from`; panics on an error.
fn deliver(ranks: Ranks<'_>, now: u64, rail: usize, to: usize, from: Mac, bytes: &[u8]) {
    let (links, endpoints, bufs) = ranks;
    links[to]
        .receive_frame_on(
            rail,
            &mut bufs[to],
            &mut endpoints[to],
            now,
            from,
            false,
            bytes,
        )
        .unwrap_or_else(|e| panic!("rank {to}: {e}"));
}

/// Posts broadcast 1 ([`setup_of`]) at every rank: the root's buffer holds `want`, the
/// others' zeros; the lanes on `rails` when given (`Plan::rails`).
fn post_everywhere(
    endpoints: &mut [Engine],
    bufs: &mut [Buffers],
    lanes: &[Lane],
    root: usize,
    want: &[u8],
    rails: Option<&[usize]>,
) {
    let setup = setup_of(root, want.len());
    for r in 0..endpoints.len() {
        let data = if r == root {
            want.to_vec()
        } else {
            vec![0; want.len()]
        };
        bufs[r].insert(1, Buffer::Owned(data));
        let mut bcast = Bcast::new(r, lanes, setup, EngineConfig::default(), 0).unwrap();
        if let Some(rails) = rails {
            bcast = bcast.with_rails(rails.to_vec());
        }
        let buf = bufs[r].get_mut(&1).unwrap().as_mut_slice();
        endpoints[r].post(bcast, buf, 0).unwrap();
    }
}

/// One round at every rank: timers, queueing, liveness, then every frame it sends goes to
/// `wire` as (sender rank, rail, destination MAC, bytes after the Ethernet header).
fn send_round(ranks: Ranks<'_>, now: u64, wire: &mut impl FnMut(usize, usize, &Mac, Vec<u8>)) {
    let (links, endpoints, bufs) = ranks;
    for r in 0..links.len() {
        endpoints[r]
            .handle_timeout(now)
            .unwrap_or_else(|e| panic!("rank {r}: {e}"));
        links[r].queue(&mut endpoints[r]).unwrap();
        links[r].check_liveness(now, &endpoints[r]).unwrap();
        links[r]
            .send(&bufs[r], now, &mut |rail, frames| {
                for (to, [head, body]) in frames {
                    let mut bytes = head.to_vec();
                    bytes.extend_from_slice(body);
                    wire(r, rail, to, bytes);
                }
                Ok::<usize, TransportError>(frames.len())
            })
            .unwrap();
    }
}

/// Panics unless every rank finished broadcast 1 with `want` in its buffer.
fn check_every_byte(
    links: &[FrameLink],
    endpoints: &mut [Engine],
    bufs: &mut [Buffers],
    want: &[u8],
    now: u64,
) {
    for r in 0..links.len() {
        assert!(
            endpoints[r].is_done(1),
            "rank {r} did not finish: {}",
            links[r].describe(now)
        );
        endpoints[r].finish(1);
        let got = bufs[r].remove(&1).and_then(Buffer::into_owned).unwrap();
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            panic!("rank {r}: byte {i} is {:#x}, not {:#x}", got[i], want[i]);
        }
    }
}

#[test]
fn a_clean_wire_delivers_every_byte_and_drops_nothing() {
    for msize in [0, 1, 999, 1000, 1001, 4097, 50_003] {
        let c = run(3, 1, msize, true, Spoil::Nothing, 1);
        assert!(c.iter().all(|c| c.dropped_checksum == 0), "{c:?}");
    }
}

#[test]
fn a_flipped_byte_is_dropped_counted_and_recovered() {
    for (msize, every) in [(50_003, 7), (4097, 4), (1, 3), (0, 3)] {
        let c = run(3, 0, msize, true, Spoil::FlipByte, every);
        let dropped: u64 = c.iter().map(|c| c.dropped_checksum).sum();
        assert!(dropped > 0, "{msize} bytes: no frame was caught: {c:?}");
        let retransmits: u64 = c.iter().map(|c| c.retransmits).sum();
        assert!(msize < 1000 || retransmits > 0, "{c:?}");
    }
}

/// A frame that seems to come from another peer fails the checksum (the addresses are in
/// it) instead of acknowledging that peer's frames.
#[test]
fn a_frame_from_a_corrupted_source_address_is_dropped() {
    let c = run(3, 2, 20_000, true, Spoil::OtherSender, 5);
    let dropped: u64 = c.iter().map(|c| c.dropped_checksum).sum();
    assert!(dropped > 0, "{c:?}");
}

/// Without the checksum (a measurement setting) a clean wire still works.
#[test]
fn without_the_checksum_a_clean_wire_still_works() {
    let c = run(2, 0, 10_001, false, Spoil::Nothing, 1);
    assert!(c.iter().all(|c| c.dropped_checksum == 0), "{c:?}");
}

/// Rank `rank`'s NIC 1 (rail 1).
fn mac1(rank: usize) -> Mac {
    [2, 0, 0, 0, 1, rank as u8 + 1]
}

/// Two chains from `root` over `n` ranks in opposite orders, lane i on rail i (as multilane
/// puts them on a topology with rails).
fn two_lanes(n: usize, root: usize) -> Vec<Lane> {
    let order: Vec<usize> = (0..n).map(|i| (root + i) % n).collect();
    let mut back = vec![root];
    back.extend(order[1..].iter().rev());
    vec![Lane::chain(n, &order), Lane::chain(n, &back)]
}

/// Broadcasts `msize` bytes from `root` over `n` ranks with two NICs each, lane i on rail i,
/// over an in-memory wire that delivers each round's rail 1 frames before its rail 0 frames
/// (the two NICs' queues drain at their own pace), and loses one rail-1 frame in `lose`
/// (none when 0). Checks that every frame went from a NIC of its rail to the peer's NIC of
/// the same rail, and every byte at every rank; returns each rank's counters and bytes sent
/// per rail.
fn run_rails(n: usize, root: usize, msize: usize, lose: usize) -> Vec<(Counters, Vec<u64>)> {
    let config = wire_config();
    let mut sent = 0usize;
    let lanes = two_lanes(n, root);
    let want = pattern(msize, 0);
    let nics = [mac, mac1];
    let mut links: Vec<FrameLink> = (0..n)
        .map(|r| FrameLink::on_rails(r, vec![mac(r), mac1(r)], config, 1000))
        .collect();
    let mut endpoints: Vec<Engine> = (0..n).map(|_| Engine::new()).collect();
    let mut bufs: Vec<Buffers> = (0..n).map(|_| Buffers::new()).collect();
    for link in &mut links {
        let rails = nics.iter().map(|m| (0..n).map(m).collect()).collect();
        link.set_rail_peers(rails, 0xc0ffee).unwrap();
        assert_eq!(link.rails(), 2);
    }
    post_everywhere(
        &mut endpoints,
        &mut bufs,
        &lanes,
        root,
        &want,
        Some(&[0, 1]),
    );
    let mut now = 0u64;
    for _ in 0..20_000 {
        if endpoints.iter().all(|e| e.is_done(1)) {
            break;
        }
        now += 1_000_000;
        // Per rail: (to rank, from MAC, bytes).
        let mut wire: [Wire; 2] = [Vec::new(), Vec::new()];
        let ranks = (&mut links[..], &mut endpoints[..], &mut bufs[..]);
        send_round(ranks, now, &mut |r, rail, to, bytes| {
            let dest = (0..n)
                .find(|&d| nics[rail](d) == *to)
                .unwrap_or_else(|| panic!("rail {rail}: {to:?} is no NIC of it"));
            sent += usize::from(rail == 1);
            if rail == 1 && lose > 0 && sent % lose == 0 {
                return;
            }
            wire[rail].push((dest, nics[rail](r), bytes));
        });
        let [rail0, rail1] = wire;
        for (rail, frames) in [(1, rail1), (0, rail0)] {
            for (to, from, bytes) in frames {
                let ranks = (&mut links[..], &mut endpoints[..], &mut bufs[..]);
                deliver(ranks, now, rail, to, from, &bytes);
            }
        }
    }
    check_every_byte(&links, &mut endpoints, &mut bufs, &want, now);
    links
        .iter()
        .map(|l| (l.counters(), l.rail_bytes_sent().to_vec()))
        .collect()
}

/// Each lane on its rail: both rails carry data, every byte is right, and frames of one rail
/// overtaking the other's never look lost (reliability is per peer and rail: no
/// retransmission on a clean wire).
#[test]
fn two_rails_carry_the_two_lanes_and_reordering_between_them_is_no_loss() {
    for (root, msize) in [(0, 0), (1, 1), (2, 999), (0, 4097), (3, 100_003)] {
        let c = run_rails(4, root, msize, 0);
        for (r, (c, sent)) in c.iter().enumerate() {
            assert_eq!(
                c.retransmits + c.timeouts,
                0,
                "rank {r}, {msize} bytes: {c:?}"
            );
            assert_eq!(c.dropped_unknown_peer + c.dropped_checksum, 0, "{c:?}");
            assert_eq!(sent.iter().sum::<u64>(), c.tx_bytes, "{sent:?} {c:?}");
        }
        let root_sent = &c[root].1;
        assert!(
            root_sent.iter().all(|&b| msize < 2 || b > msize as u64 / 3),
            "{msize} bytes: the root sent {root_sent:?} per rail"
        );
    }
}

/// Frames lost on rail 1 are resent on rail 1 (its own reliability) and every byte arrives.
#[test]
fn frames_lost_on_one_rail_are_recovered_on_it() {
    for (root, msize) in [(1, 4097), (2, 100_003)] {
        let c = run_rails(4, root, msize, 7);
        let retransmits: u64 = c.iter().map(|(c, _)| c.retransmits).sum();
        assert!(retransmits > 0, "{msize} bytes: {c:?}");
    }
}

/// A frame is a rail's only: from a peer's NIC 0 MAC but arriving on rail 1, it is dropped
/// as from an unknown peer before anything in it is read; a MAC on two rails is refused.
#[test]
fn a_frame_on_the_wrong_rail_is_dropped_and_macs_are_distinct_over_rails() {
    let config = Config::default();
    let mut link = FrameLink::on_rails(0, vec![mac(0), mac1(0)], config, 1000);
    let rails = vec![(0..3).map(mac).collect(), (0..3).map(mac1).collect()];
    link.set_rail_peers(rails, 7).unwrap();
    let mut endpoint = Engine::new();
    let mut bufs = Buffers::new();
    let frame = vec![0u8; 200];
    link.receive_frame_on(1, &mut bufs, &mut endpoint, 0, mac(1), false, &frame)
        .unwrap();
    link.receive_frame_on(5, &mut bufs, &mut endpoint, 0, mac1(1), false, &frame)
        .unwrap();
    assert_eq!(link.counters().dropped_unknown_peer, 2);

    let clash = vec![(0..3).map(mac).collect(), vec![mac1(0), mac(1), mac1(2)]];
    let e = link.set_rail_peers(clash, 7).unwrap_err().to_string();
    assert!(
        e.contains("rank 1 has MAC") && e.contains("two rails"),
        "{e}"
    );
    let three = vec![(0..3).map(mac).collect::<Vec<_>>(); 3];
    assert!(link.set_rail_peers(three, 7).is_err());
}

/// Two hosts of two ranks each (ranks 0, 1 on host 0, ranks 2, 3 on host 1): host `h`'s NIC
/// on rail `rail`, shared by both its ranks.
fn host_nic(rail: usize, host: usize) -> Mac {
    [2, 0, 0, 0, rail as u8, host as u8 + 1]
}

const HOST_OF: [usize; 4] = [0, 0, 1, 1];

/// Lanes from `root` whose every edge crosses hosts (a plan's edges inside a host go over
/// shared memory, not this link): two chains and a tree, each alternating hosts.
fn cross_host_lanes(root: usize) -> Vec<Lane> {
    let sibling = root ^ 1;
    let (o1, o2) = if root < 2 { (2, 3) } else { (0, 1) };
    let mut tree = vec![Vec::new(); 4];
    tree[root] = vec![o1, o2];
    tree[o2] = vec![sibling];
    vec![
        Lane::chain(4, &[root, o1, sibling, o2]),
        Lane::chain(4, &[root, o2, sibling, o1]),
        Lane::from_children(tree),
    ]
}

/// Broadcasts `msize` bytes from `root` down `lanes` (lane i on rail i when `rails` is 2)
/// over the two hosts of [`HOST_OF`], whose ranks share their host's NICs. The wire copies
/// every frame to each rank behind the destination MAC, as the kernel copies a frame into
/// every packet socket of an interface without a filter; `spoof` (when set) also delivers
/// every data frame a second time from rank `spoof.0`'s MAC, relabelled as from rank
/// `spoof.1` (whose MAC it is not), and resealed so that its checksum passes. Checks every
/// byte at every rank; returns each rank's counters.
fn run_hosts(
    lanes: &[Lane],
    root: usize,
    msize: usize,
    rails: usize,
    spoof: Option<(usize, usize)>,
) -> Vec<Counters> {
    let n = 4;
    let config = wire_config();
    let want = pattern(msize, 0);
    let mut links: Vec<FrameLink> = (0..n)
        .map(|r| {
            let own = (0..rails).map(|l| host_nic(l, HOST_OF[r])).collect();
            FrameLink::on_rails(r, own, config, 1000)
        })
        .collect();
    let mut endpoints: Vec<Engine> = (0..n).map(|_| Engine::new()).collect();
    let mut bufs: Vec<Buffers> = (0..n).map(|_| Buffers::new()).collect();
    for (r, link) in links.iter_mut().enumerate() {
        let macs = (0..rails)
            .map(|l| (0..n).map(|p| host_nic(l, HOST_OF[p])).collect())
            .collect();
        link.set_rail_peers_on_hosts(macs, &HOST_OF, 0xc0ffee)
            .unwrap();
        // The other rank of this host is no peer of the link (shared memory reaches it).
        assert!(!link.knows(r ^ 1) && link.knows(r ^ 2) && link.knows(r ^ 3));
    }
    let on_rails = (rails == 2).then_some(&[0, 1][..]);
    post_everywhere(&mut endpoints, &mut bufs, lanes, root, &want, on_rails);
    let mut now = 0u64;
    for _ in 0..20_000 {
        if endpoints.iter().all(|e| e.is_done(1)) {
            break;
        }
        now += 1_000_000;
        // (rail, to rank, from MAC, bytes)
        let mut wire: Vec<(usize, usize, Mac, Vec<u8>)> = Vec::new();
        let ranks = (&mut links[..], &mut endpoints[..], &mut bufs[..]);
        send_round(ranks, now, &mut |r, rail, to, mut bytes| {
            let from = host_nic(rail, HOST_OF[r]);
            assert_ne!(*to, from, "rank {r} sent to its own host's NIC");
            let behind: Vec<usize> = (0..n)
                .filter(|&d| host_nic(rail, HOST_OF[d]) == *to)
                .collect();
            assert_eq!(behind.len(), 2, "{to:?}");
            if let Some((at, claims)) = spoof.filter(|s| s.0 == r) {
                use crate::wire::frame::{Frame, Kind};
                let relabel = |b: &mut Vec<u8>, rank: usize| {
                    let mut f = Frame::new_unchecked(&mut b[..]);
                    f.set_from(rank as u32);
                    f.seal(to, &from);
                };
                if Frame::new_unchecked(&bytes[..]).kind() == Kind::Data {
                    relabel(&mut bytes, claims);
                    for &d in &behind {
                        wire.push((rail, d, from, bytes.clone()));
                    }
                    relabel(&mut bytes, at);
                }
            }
            for &d in &behind {
                wire.push((rail, d, from, bytes.clone()));
            }
        });
        for (rail, to, from, bytes) in wire {
            let ranks = (&mut links[..], &mut endpoints[..], &mut bufs[..]);
            deliver(ranks, now, rail, to, from, &bytes);
        }
    }
    check_every_byte(&links, &mut endpoints, &mut bufs, &want, now);
    links.iter().map(FrameLink::counters).collect()
}

/// Two ranks per host sharing its MAC: every byte arrives at every rank for every root,
/// tree and size; each frame also reached the other rank of its host (no filter on this
/// wire), which dropped and counted it, and nothing else was dropped.
#[test]
fn ranks_sharing_a_mac_get_every_byte_and_drop_the_other_ranks_frames() {
    for root in 0..4 {
        for (t, lane) in cross_host_lanes(root).into_iter().enumerate() {
            for msize in [0, 1, 999, 4097, 100_003] {
                let c = run_hosts(std::slice::from_ref(&lane), root, msize, 1, None);
                let tx: u64 = c.iter().map(|c| c.tx_frames).sum();
                let rx: u64 = c.iter().map(|c| c.rx_frames).sum();
                let other: u64 = c.iter().map(|c| c.dropped_otherrank).sum();
                let what = format!("root {root} tree {t} {msize} bytes: {c:?}");
                assert_eq!(rx, 2 * tx, "{what}");
                assert_eq!(other, tx, "{what}");
                for c in &c {
                    assert_eq!(c.dropped_unknown_peer + c.dropped_checksum, 0, "{what}");
                }
            }
        }
    }
}

/// The same hosts with two NICs each (each rank on both rails, lane i on rail i).
#[test]
fn ranks_sharing_two_nics_get_every_byte() {
    for root in 0..4 {
        let lanes = cross_host_lanes(root);
        for msize in [0, 1, 4097, 100_003] {
            let c = run_hosts(&lanes[..2], root, msize, 2, None);
            let what = format!("root {root} {msize} bytes: {c:?}");
            let tx: u64 = c.iter().map(|c| c.tx_frames).sum();
            let other: u64 = c.iter().map(|c| c.dropped_otherrank).sum();
            assert_eq!(other, tx, "{what}");
            for c in &c {
                assert_eq!(c.dropped_unknown_peer + c.dropped_checksum, 0, "{what}");
            }
        }
    }
}

/// A frame from a MAC that claims a rank whose MAC it is not (rank 0 sending as rank 2, of
/// the other host) is dropped as from an unknown peer, even with a valid checksum, and the
/// broadcast is unharmed.
#[test]
fn a_frame_claiming_a_rank_of_another_mac_is_dropped() {
    let lanes = cross_host_lanes(0);
    let c = run_hosts(&lanes[..1], 0, 10_007, 1, Some((0, 2)));
    let spoofed: u64 = c.iter().map(|c| c.dropped_unknown_peer).sum();
    assert!(spoofed > 0, "{c:?}");
    assert!(c.iter().all(|c| c.dropped_checksum == 0), "{c:?}");
}

/// What stays refused: ranks on different hosts sharing a MAC, and a MAC on two rails.
#[test]
fn macs_shared_across_hosts_or_rails_are_refused() {
    let mut link = FrameLink::on_rails(
        0,
        vec![host_nic(0, 0), host_nic(1, 0)],
        Config::default(),
        1000,
    );
    let one = |h: [usize; 4]| vec![(0..4).map(|r| host_nic(0, h[r])).collect::<Vec<_>>()];
    // Ranks 2 and 3 on host 1 share a MAC; so do 0 and 1 on host 0: fine.
    link.set_rail_peers_on_hosts(one([0, 0, 1, 1]), &HOST_OF, 7)
        .unwrap();
    // Rank 3 on host 1 with host 0's MAC.
    let e = link
        .set_rail_peers_on_hosts(one([0, 0, 1, 0]), &HOST_OF, 7)
        .unwrap_err()
        .to_string();
    assert!(e.contains("different hosts but share MAC"), "{e}");
    // The old single-host-per-rank call refuses a shared MAC too.
    let e = link
        .set_rail_peers(one([0, 0, 1, 1]), 7)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ranks 0 and 1 are on different hosts"), "{e}");
    // Host 1's rail-0 NIC as rank 3's rail-1 NIC.
    let mut rails = one([0, 0, 1, 1]);
    rails.push(vec![
        host_nic(1, 0),
        host_nic(1, 0),
        host_nic(1, 1),
        host_nic(0, 1),
    ]);
    let e = link
        .set_rail_peers_on_hosts(rails, &HOST_OF, 7)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rank 2's on rail 0 and rank 3's on rail 1"),
        "{e}"
    );
    assert!(link
        .set_rail_peers_on_hosts(one([0, 0, 1, 1]), &[0, 0, 1], 7)
        .is_err());
}
