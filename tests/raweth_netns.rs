//! The raw Ethernet transport between network namespaces: frames cross a veth pair, and
//! whole broadcasts run between ranks (threads, each with its socket in its own host
//! namespace) behind a bridge, byte for byte, across sizes and roots, with frames dropped by
//! an nftables rule, and under a storm of frames carrying another job's cookie.
//!
//! Needs root (namespaces, CAP_NET_RAW) and `ip`; `nft` for the loss test. Without them each
//! test prints why and passes. Namespaces are named `pcrw-<pid>-<n>-…` and deleted on drop.

mod common;

use common::netns::{nft, sh, tbf, Lab};
use common::pattern;
use common::requirements::tool;
use pipecast::engine::drive::Engine;
use pipecast::engine::{Bcast, Config as EngineConfig, Setup};
use pipecast::plan::Lane;
use pipecast::transport::drive::drive;
use pipecast::transport::raweth::socket::{Mac, RawSocket, RecvBatch};
use pipecast::transport::raweth::{Config, Counters, RawEthTransport};
use pipecast::transport::{Buffer, Buffers, Link};
use pipecast::wire::frame::{Kind, Repr, HEADER_LEN};
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// Runs one broadcast over `t` on this rank's `buf` to completion (posted on `endpoint`,
/// which keeps what arrives early for later broadcasts).
fn run_bcast(
    t: &mut dyn Link,
    endpoint: &mut Engine,
    bcast: Bcast,
    buf: &mut Vec<u8>,
    clock: &dyn Fn() -> u64,
) -> pipecast::Result<()> {
    let seq = bcast.setup().seq;
    let mut bufs = Buffers::new();
    bufs.insert(seq, Buffer::Owned(std::mem::take(buf)));
    let posted = endpoint.post(bcast, bufs.get_mut(&seq).unwrap().as_mut_slice(), clock());
    let result = posted
        .map_err(Into::into)
        .and_then(|()| drive(t, &mut bufs, endpoint, seq, clock));
    *buf = bufs.remove(&seq).and_then(Buffer::into_owned).unwrap();
    result
}

/// Serves `t` for `d` with no broadcast of this rank in flight: acknowledgements,
/// heartbeats, frames of broadcasts not posted yet.
fn serve(
    t: &mut dyn Link,
    endpoint: &mut Engine,
    clock: &dyn Fn() -> u64,
    d: Duration,
) -> pipecast::Result<()> {
    let end = clock() + d.as_nanos() as u64;
    while clock() < end {
        t.progress(
            &mut Buffers::new(),
            endpoint,
            clock,
            Duration::from_millis(2),
        )?;
    }
    Ok(())
}

/// How long a rank whose broadcast is done keeps answering until its last frames are
/// acknowledged (the communicator uses `link::LINGER`, 200 ms).
const LINGER: Duration = Duration::from_millis(300);

/// What the test lacks here, if anything: root (network namespaces, CAP_NET_RAW), iproute2
/// and, with `need_nft`, nftables.
fn missing(need_nft: bool) -> Option<common::Missing> {
    if !pipecast::lab::is_root() {
        return Some(common::missing(
            "root",
            "not root: network namespaces and CAP_NET_RAW are needed",
        ));
    }
    tool("iproute2", "ip", &["-V"]).or_else(|| {
        need_nft
            .then(|| tool("nftables", "nft", &["--version"]))
            .flatten()
    })
}

/// Returns from the test when it cannot run here ([`missing`]): skipped, or failed under
/// `PIPECAST_REQUIRE`.
macro_rules! skip_unless_able {
    ($nft:expr) => {
        common::require!(missing($nft))
    };
}

#[derive(Clone)]
struct Case {
    root: usize,
    msize: usize,
    segment: u64,
    /// Lanes for `size` ranks and this root.
    lanes: fn(usize, usize) -> Vec<Lane>,
}

fn chain(size: usize, root: usize) -> Vec<Lane> {
    let order: Vec<usize> = (0..size).map(|i| (root + i) % size).collect();
    vec![Lane::chain(size, &order)]
}

fn binary(size: usize, root: usize) -> Vec<Lane> {
    // Heap order over ranks relabelled so that the root is first.
    let label = |i: usize| (root + i) % size;
    let mut children = vec![Vec::new(); size];
    for i in 1..size {
        children[label((i - 1) / 2)].push(label(i));
    }
    vec![Lane::from_children(children)]
}

fn two_lanes(size: usize, root: usize) -> Vec<Lane> {
    pipecast::comm::scatter_allgather(size, root)
}

/// Runs `cases` in order on `hosts.len()` ranks (rank r's socket in `hosts[r]`); returns each
/// rank's counters. Panics if any byte differs.
fn run_job(hosts: &[String], cases: &[Case], config: Config, cookie: u64) -> Vec<Counters> {
    let n = hosts.len();
    let board = Arc::new((Mutex::new(vec![[0u8; 6]; n]), Barrier::new(n)));
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let (board, cases, ns) = (board.clone(), cases.to_vec(), hosts[rank].clone());
            std::thread::spawn(move || {
                let mut t = RawEthTransport::bind_in_netns(rank, &ns, "eth0", config).unwrap();
                let (macs, barrier) = &*board;
                macs.lock().unwrap()[rank] = t.local_mac();
                barrier.wait();
                let all = macs.lock().unwrap().clone();
                t.set_peers(all, cookie).unwrap();
                let start = Instant::now();
                let clock = move || start.elapsed().as_nanos() as u64;
                let mut endpoint = Engine::new();
                for (seq, case) in cases.iter().enumerate() {
                    let lanes = (case.lanes)(n, case.root);
                    let setup = Setup {
                        seq: seq as u64 + 1,
                        root: case.root,
                        msize: case.msize as u64,
                        segment: case.segment,
                        deep: false,
                    };
                    let engine = EngineConfig {
                        idle_timeout: 10_000_000_000,
                        ..EngineConfig::default()
                    };
                    let want = pattern(case.msize, seq);
                    let mut buf = if rank == case.root {
                        want.clone()
                    } else {
                        vec![0u8; case.msize]
                    };
                    let bcast = Bcast::new(rank, &lanes, setup, engine, clock()).unwrap();
                    run_bcast(&mut t, &mut endpoint, bcast, &mut buf, &clock)
                        .unwrap_or_else(|e| panic!("rank {rank}, broadcast {seq}: {e}"));
                    if let Some(i) = (0..case.msize).find(|&i| buf[i] != want[i]) {
                        panic!(
                            "rank {rank}, broadcast {seq} ({} bytes from root {}): first \
                             difference at byte {i}",
                            case.msize, case.root
                        );
                    }
                }
                // Peers may still need our acks for their last frames.
                serve(&mut t, &mut endpoint, &clock, LINGER).unwrap();
                t.counters()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn frames_cross_a_veth_pair_at_both_mtus() {
    skip_unless_able!(false);
    for mtu in [1500u32, 9000] {
        let mut lab = Lab::new("pcrw");
        let hosts = lab.pair(mtu, None);
        let a = RawSocket::open_in_netns(&hosts[0], "eth0").unwrap();
        let b = RawSocket::open_in_netns(&hosts[1], "eth0").unwrap();
        assert_eq!(a.mtu(), mtu as usize);
        assert_ne!(a.mac(), b.mac());
        let ta = RawEthTransport::bind_in_netns(0, &hosts[0], "eth0", Config::default()).unwrap();
        assert_eq!(ta.max_payload(), mtu as usize - HEADER_LEN);
        // A frame of exactly MTU bytes crosses; its bytes arrive intact.
        let body = pattern(mtu as usize - HEADER_LEN, 3);
        let head = Repr {
            kind: Kind::Nop.into(),
            cookie: 42,
            ..Repr::default()
        }
        .to_bytes(&b.mac(), &a.mac(), &body);
        let mut batch = RecvBatch::new(4, mtu as usize + 64);
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut next_send = Instant::now();
        let got = loop {
            // Raw frames are unreliable by nature: send again every 100 ms until one arrives.
            if Instant::now() >= next_send {
                let sent = a
                    .send_batch(&[(b.mac(), [IoSlice::new(&head), IoSlice::new(&body)])])
                    .unwrap();
                assert_eq!(sent, 1);
                next_send += Duration::from_millis(100);
            }
            b.poll(false, 20, None).unwrap();
            if b.recv_batch(&mut batch).unwrap_or(0) > 0 {
                break batch
                    .frames()
                    .map(|(mac, _, _, bytes)| (mac, bytes.to_vec()))
                    .next()
                    .unwrap();
            }
            assert!(Instant::now() < deadline, "no frame arrived at MTU {mtu}");
        };
        assert_eq!(got.0, a.mac());
        assert_eq!(got.1.len(), mtu as usize);
        assert_eq!(&got.1[..HEADER_LEN], &head[..]);
        assert_eq!(&got.1[HEADER_LEN..], &body[..]);
        // One byte more than the MTU is refused by the kernel, not silently cut.
        let big = vec![0u8; body.len() + 1];
        assert!(a
            .send_batch(&[(b.mac(), [IoSlice::new(&head), IoSlice::new(&big)])])
            .is_err());
    }
}

fn sizes_and_roots() -> Vec<Case> {
    let mut cases = Vec::new();
    let sizes = [0usize, 1, 1407, 1408, 1409, 4097, 100_003, (1 << 20) + 3];
    for (i, &msize) in sizes.iter().enumerate() {
        let lanes: fn(usize, usize) -> Vec<Lane> = match i % 3 {
            0 => chain,
            1 => binary,
            _ => two_lanes,
        };
        cases.push(Case {
            root: i % 4,
            msize,
            segment: if i % 2 == 0 { 65536 } else { 10_000 },
            lanes,
        });
    }
    cases
}

#[test]
fn broadcasts_are_byte_exact_across_sizes_roots_and_trees() {
    skip_unless_able!(false);
    let mut lab = Lab::new("pcrw");
    let (_, hosts) = lab.star(4);
    let counters = run_job(&hosts, &sizes_and_roots(), Config::default(), 0x5eed);
    let total: u64 = counters.iter().map(|c| c.rx_frames).sum();
    assert!(total > 700, "a 1 MiB broadcast needs hundreds of frames");
}

#[test]
fn broadcasts_are_byte_exact_through_the_mmap_receive_ring() {
    skip_unless_able!(false);
    let mut lab = Lab::new("pcrw");
    let (_, hosts) = lab.star(4);
    let config = Config {
        rx_ring: Some(4 << 20),
        ..Config::default()
    };
    run_job(&hosts, &sizes_and_roots(), config, 0x5eed);
    let mut lab = Lab::new("pcrw");
    let hosts = lab.pair(9000, None);
    let case = Case {
        root: 0,
        msize: (1 << 20) + 3,
        segment: 131_072,
        lanes: chain,
    };
    run_job(&hosts, &[case], config, 0x5eee);
}

#[test]
fn two_ranks_at_mtu_9000() {
    skip_unless_able!(false);
    let mut lab = Lab::new("pcrw");
    let hosts = lab.pair(9000, None);
    let cases = vec![
        Case {
            root: 1,
            msize: (1 << 20) + 3,
            segment: 131_072,
            lanes: chain,
        },
        Case {
            root: 0,
            msize: 8911,
            segment: 4000,
            lanes: chain,
        },
    ];
    let c = run_job(&hosts, &cases, Config::default(), 9);
    // 1 MiB in 8908-byte payloads: about 118 data frames, not 743.
    assert!(c[0].rx_frames < 400, "{:?}", c[0]);
}

#[test]
fn broadcasts_complete_byte_exact_when_a_bridge_drops_frames() {
    skip_unless_able!(true);
    let mut lab = Lab::new("pcrw");
    let (sw, hosts) = lab.star(4);
    let rules = "table bridge pcrw {\n chain lossy {\n  type filter hook forward priority 0; policy accept;\n  ether type 0x88b5 numgen random mod 100 < 2 counter drop\n }\n}\n";
    nft(&sw, rules);
    let config = Config {
        reliable: pipecast::engine::reliable::Config {
            rto_initial: 5_000_000,
            ..Default::default()
        },
        ..Config::default()
    };
    // Through recvmmsg batches, then through the mmap receive ring.
    for (cookie, rx_ring) in [(0x1055, None), (0x1056, Some(4 << 20))] {
        let config = Config { rx_ring, ..config };
        let counters = run_job(&hosts, &sizes_and_roots(), config, cookie);
        let retransmits: u64 = counters.iter().map(|c| c.retransmits).sum();
        assert!(
            retransmits > 0,
            "2 % loss must cause retransmissions: {counters:?}"
        );
    }
}

#[test]
fn a_foreign_cookie_storm_is_dropped_and_counted() {
    skip_unless_able!(false);
    let mut lab = Lab::new("pcrw");
    let (_, hosts) = lab.star(3);
    // Another "job" on rank 2's interface (same MAC) sends frames with its own cookie to
    // ranks 0 and 1 while they broadcast.
    let stop = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicBool::new(false));
    let storm = {
        let running = running.clone();
        let (stop, ns0, ns1, ns2) = (
            stop.clone(),
            hosts[0].clone(),
            hosts[1].clone(),
            hosts[2].clone(),
        );
        std::thread::spawn(move || {
            let targets: Vec<Mac> = [ns0, ns1]
                .iter()
                .map(|ns| RawSocket::open_in_netns(ns, "eth0").unwrap().mac())
                .collect();
            let s = RawSocket::open_in_netns(&ns2, "eth0").unwrap();
            let from = s.mac();
            let body = vec![0xeeu8; 1000];
            let mut sent = 0u64;
            let mut pseq = 1;
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (rank, &to) in targets.iter().enumerate() {
                    // As rank 2 (whose MAC it sends from), to the rank behind `to`: only
                    // the cookie is foreign.
                    let head = Repr {
                        kind: Kind::Data.into(),
                        from: 2,
                        to: rank as u32,
                        cookie: 0xbad_c0de,
                        segment_len: 1000,
                        payload_len: 1000,
                        peer_seq: pseq,
                        msize: 1 << 20,
                        segment: 1000,
                        lanes: 1,
                        ..Repr::default()
                    }
                    .to_bytes(&to, &from, &body);
                    pseq += 1;
                    sent += s
                        .send_batch(&[(to, [IoSlice::new(&head), IoSlice::new(&body)])])
                        .unwrap_or_else(|e| {
                            eprintln!("storm send: {e}");
                            0
                        }) as u64;
                }
                rounds += 1;
                if rounds % 32 == 0 {
                    running.store(true, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            sent
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !running.load(Ordering::Relaxed) && !storm.is_finished() {
        assert!(Instant::now() < deadline, "the storm did not start");
        std::thread::sleep(Duration::from_millis(1));
    }
    let cases: Vec<Case> = (0..6)
        .map(|i| Case {
            root: i % 3,
            msize: 2_000_001 + i,
            segment: 32768,
            lanes: if i % 2 == 0 { chain } else { binary },
        })
        .collect();
    let t0 = Instant::now();
    let counters = run_job(&hosts, &cases, Config::default(), 0x600d);
    stop.store(true, Ordering::Relaxed);
    eprintln!(
        "storm: {:?}; timeouts {:?}, retransmits {:?}, dropped_cookie {:?}",
        t0.elapsed(),
        counters.iter().map(|c| c.timeouts).collect::<Vec<_>>(),
        counters.iter().map(|c| c.retransmits).collect::<Vec<_>>(),
        counters
            .iter()
            .map(|c| c.dropped_cookie)
            .collect::<Vec<_>>()
    );
    let sent = storm.join().unwrap();
    let dropped = counters[0].dropped_cookie + counters[1].dropped_cookie;
    assert!(
        sent > 0 && dropped > 0,
        "storm sent {sent}, dropped {dropped}: {counters:?}"
    );
}

// ---- Measurements (ignored by default; run with `--release -- --ignored --nocapture`) ----

/// Which transport a timed job uses.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    RawEth,
    /// With the PACKET_MMAP receive ring.
    RawEthRing,
    Tcp,
}

/// Runs `reps` broadcasts of `msize` bytes from rank 0 down a chain, all ranks starting
/// together (a barrier before each); returns the slowest rank's time per repetition (ns).
fn timed_job(hosts: &[String], via: Via, msize: usize, segment: u64, reps: usize) -> Vec<u64> {
    let n = hosts.len();
    let board = Arc::new((
        Mutex::new((vec![[0u8; 6]; n], vec![None; n])),
        Barrier::new(n),
    ));
    let times = Arc::new(Mutex::new(vec![0u64; reps]));
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let (board, ns, times) = (board.clone(), hosts[rank].clone(), times.clone());
            std::thread::spawn(move || {
                RawSocket::enter_netns(&ns).unwrap();
                let ip = format!("198.18.0.{}", rank + 1);
                let _ = sh(&["ip", "addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
                let (shared, barrier) = &*board;
                let mut raw = None;
                let mut tcp = None;
                match via {
                    Via::RawEth | Via::RawEthRing => {
                        let config = Config {
                            rx_ring: (via == Via::RawEthRing).then_some(4 << 20),
                            ..Config::default()
                        };
                        let t = RawEthTransport::bind(rank, "eth0", config).unwrap();
                        shared.lock().unwrap().0[rank] = t.local_mac();
                        raw = Some(t);
                    }
                    Via::Tcp => {
                        let t = pipecast::transport::TcpTransport::bind(rank, &ip).unwrap();
                        shared.lock().unwrap().1[rank] = Some(t.local_addr());
                        tcp = Some(t);
                    }
                }
                barrier.wait();
                let (macs, addrs) = shared.lock().unwrap().clone();
                if let Some(t) = raw.as_mut() {
                    t.set_peers(macs, 77).unwrap();
                }
                if let Some(t) = tcp.as_mut() {
                    t.set_peers(addrs.into_iter().map(Option::unwrap).collect(), 77);
                }
                let start = Instant::now();
                let clock = move || start.elapsed().as_nanos() as u64;
                let lanes = chain(n, 0);
                let mut buf = pattern(msize, 0);
                let mut endpoint = Engine::new();
                for rep in 0..reps {
                    if rank != 0 {
                        buf.fill(0);
                    }
                    let setup = Setup {
                        seq: rep as u64 + 1,
                        root: 0,
                        msize: msize as u64,
                        segment,
                        deep: false,
                    };
                    barrier.wait();
                    let t0 = clock();
                    let bcast =
                        Bcast::new(rank, &lanes, setup, EngineConfig::default(), t0).unwrap();
                    if let Some(t) = raw.as_mut() {
                        run_bcast(t, &mut endpoint, bcast, &mut buf, &clock).unwrap();
                    } else if let Some(t) = tcp.as_mut() {
                        t.connect(&bcast.peers(), Duration::from_secs(5)).unwrap();
                        run_bcast(t, &mut endpoint, bcast, &mut buf, &clock).unwrap();
                    }
                    let dt = clock() - t0;
                    assert_eq!(buf, pattern(msize, 0), "rank {rank} rep {rep}");
                    let mut times = times.lock().unwrap();
                    times[rep] = times[rep].max(dt);
                }
                if let Some(t) = raw.as_mut() {
                    eprintln!("rank {rank} counters: {:?}", t.counters());
                }
                barrier.wait();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let times = times.lock().unwrap().clone();
    times
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

#[test]
#[ignore = "measurement: run with --release -- --ignored --nocapture"]
fn measure_raweth_vs_tcp_on_a_100mbit_pair() {
    skip_unless_able!(false);
    // PCRW_RATE=1gbit to measure at another rate.
    let rate = std::env::var("PCRW_RATE").unwrap_or_else(|_| "100mbit".into());
    let mut lab = Lab::new("pcrw");
    let hosts = lab.pair(1500, Some(&rate));
    let msize = 8 << 20;
    let raw = timed_job(&hosts, Via::RawEth, msize, 65536, 5);
    let ring = timed_job(&hosts, Via::RawEthRing, msize, 65536, 5);
    let tcp = timed_job(&hosts, Via::Tcp, msize, 65536, 5);
    let (r, g, t) = (
        median(raw.clone()),
        median(ring.clone()),
        median(tcp.clone()),
    );
    let mbit = |ns: u64| msize as f64 * 8.0 / ns as f64 * 1e3;
    println!("8 MiB over a {rate} tbf veth pair, 5 runs each, median:");
    println!(
        "  raweth {:.3} s ({:.1} Mbit/s)  runs {raw:?}",
        r as f64 / 1e9,
        mbit(r)
    );
    println!(
        "  ring   {:.3} s ({:.1} Mbit/s)  runs {ring:?}",
        g as f64 / 1e9,
        mbit(g)
    );
    println!(
        "  tcp    {:.3} s ({:.1} Mbit/s)  runs {tcp:?}",
        t as f64 / 1e9,
        mbit(t)
    );
    println!("  tcp/raweth time ratio {:.3}", t as f64 / r as f64);
}

#[test]
#[ignore = "measurement: run with --release -- --ignored --nocapture"]
fn measure_loss_slowdown_on_a_100mbit_bridge() {
    skip_unless_able!(true);
    let mut results = Vec::new();
    for drop_pct in [0u32, 1] {
        let mut lab = Lab::new("pcrw");
        let (sw, hosts) = lab.star(4);
        for (h, host) in hosts.iter().enumerate() {
            tbf(host, "eth0", "100mbit");
            tbf(&sw, &format!("p{h}"), "100mbit");
        }
        if drop_pct > 0 {
            let rules = format!("table bridge pcrw {{\n chain lossy {{\n  type filter hook forward priority 0; policy accept;\n  ether type 0x88b5 numgen random mod 100 < {drop_pct} counter drop\n }}\n}}\n");
            nft(&sw, &rules);
        }
        let times = timed_job(&hosts, Via::RawEth, 4 << 20, 65536, 5);
        results.push((drop_pct, median(times.clone()), times));
    }
    println!("4 MiB chain over 4 hosts on a 100 mbit bridge, 5 runs each, median:");
    for (p, m, runs) in &results {
        println!("  drop {p} %: {:.3} s  runs {runs:?}", *m as f64 / 1e9);
    }
    println!(
        "  slowdown with 1 % loss: {:.3}x",
        results[1].1 as f64 / results[0].1 as f64
    );
}

/// LAB.md: with an 8 MB send buffer, senders into a slower downstream port lose frames
/// silently at the bridge. Two lanes (0→1→2 and 0→2→1) make ranks 0 and 2 both send to rank
/// 1, whose port is 30 mbit. Unpaced and paced at the link rate, retransmission recovers.
#[test]
fn an_oversized_send_buffer_against_tbf_still_completes() {
    skip_unless_able!(false);
    for rate in [None, Some(12_500_000u64)] {
        let mut lab = Lab::new("pcrw");
        let (sw, hosts) = lab.star(3);
        for (h, host) in hosts.iter().enumerate() {
            tbf(host, "eth0", "100mbit");
            tbf(
                &sw,
                &format!("p{h}"),
                if h == 1 { "30mbit" } else { "100mbit" },
            );
        }
        let config = Config {
            sndbuf: Some(8 << 20),
            reliable: pipecast::engine::reliable::Config {
                rate,
                ..Default::default()
            },
            ..Config::default()
        };
        let cases = vec![
            Case {
                root: 0,
                msize: (1 << 20) + 3,
                segment: 65536,
                lanes: two_lanes,
            },
            Case {
                root: 1,
                msize: 200_001,
                segment: 65536,
                lanes: two_lanes,
            },
        ];
        let c = run_job(&hosts, &cases, config, 0xb16);
        if rate.is_none() {
            let lost: u64 = c.iter().map(|c| c.retransmits).sum();
            assert!(lost > 0, "expected silent drops at the 30 mbit port: {c:?}");
        }
        eprintln!(
            "pacing {rate:?}: retransmits {:?}",
            c.iter().map(|c| c.retransmits).collect::<Vec<_>>()
        );
    }
}

/// Without CAP_NET_RAW, opening fails with an error that names the capability. As root, the
/// test re-runs itself as `nobody` (setpriv, no capabilities) to get the unprivileged path.
#[test]
fn without_cap_net_raw_the_error_names_the_capability() {
    if std::env::var_os("PCRW_UNPRIVILEGED_PROBE").is_some() {
        match RawEthTransport::bind(0, "lo", Config::default()) {
            Ok(_) => println!("PROBE: opened"),
            Err(e) => println!("PROBE: {e}"),
        }
        return;
    }
    skip_unless_able!(false);
    let me = std::env::current_exe().unwrap();
    let mut probe = match common::as_nobody(&me) {
        Ok(probe) => probe,
        Err(missing) => return missing.skip(),
    };
    let out = probe
        .args([
            "--exact",
            "without_cap_net_raw_the_error_names_the_capability",
            "--nocapture",
        ])
        .env("PCRW_UNPRIVILEGED_PROBE", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("PROBE: "))
        .unwrap_or_else(|| {
            panic!(
                "no probe output: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(line.contains("CAP_NET_RAW"), "{line}");
    assert!(
        line.contains("\"lo\""),
        "the error names the interface: {line}"
    );
}

/// What a rank of [`liveness_job`] does before its broadcast.
#[derive(Clone, Copy, PartialEq)]
enum Before {
    /// Joins at once.
    Join,
    /// Serves its link idly (acks, heartbeats) for this long, then joins: late, not gone.
    Late(Duration),
    /// Closes its socket and never joins: gone.
    Vanish,
}

/// One 1 MiB chain broadcast 0 → 1 → 2 over raw Ethernet with a 500 ms liveness limit, each
/// rank behaving as `before[rank]` says; returns each rank's outcome and how long it took.
fn liveness_job(hosts: &[String], before: [Before; 3]) -> Vec<(Result<(), String>, Duration)> {
    let n = hosts.len();
    let board = Arc::new((Mutex::new(vec![[0u8; 6]; n]), Barrier::new(n)));
    let config = Config {
        liveness: 500_000_000,
        ..Config::default()
    };
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let (board, ns) = (board.clone(), hosts[rank].clone());
            std::thread::spawn(move || {
                let mut t = RawEthTransport::bind_in_netns(rank, &ns, "eth0", config).unwrap();
                let (macs, barrier) = &*board;
                macs.lock().unwrap()[rank] = t.local_mac();
                barrier.wait();
                let all = macs.lock().unwrap().clone();
                t.set_peers(all, 0x11fe).unwrap();
                let start = Instant::now();
                let clock = move || start.elapsed().as_nanos() as u64;
                let mut endpoint = Engine::new();
                match before[rank] {
                    Before::Join => {}
                    Before::Late(d) => serve(&mut t, &mut endpoint, &clock, d).unwrap(),
                    Before::Vanish => {
                        drop(t);
                        return (Ok(()), start.elapsed());
                    }
                }
                let msize = (1 << 20) + 3;
                let lanes = chain(n, 0);
                let setup = Setup {
                    seq: 1,
                    root: 0,
                    msize: msize as u64,
                    segment: 65_536,
                    deep: false,
                };
                let engine = EngineConfig {
                    idle_timeout: u64::MAX,
                    ..EngineConfig::default()
                };
                let want = pattern(msize, 1);
                let mut buf = if rank == 0 {
                    want.clone()
                } else {
                    vec![0u8; msize]
                };
                let bcast = Bcast::new(rank, &lanes, setup, engine, clock()).unwrap();
                let result = run_bcast(&mut t, &mut endpoint, bcast, &mut buf, &clock)
                    .map_err(|e| e.to_string())
                    .and_then(|()| {
                        if buf == want {
                            Ok(())
                        } else {
                            Err("WRONG DATA".into())
                        }
                    });
                if result.is_ok() {
                    // The others may be late; keep answering them for a while.
                    serve(&mut t, &mut endpoint, &clock, Duration::from_millis(300)).ok();
                }
                (result, start.elapsed())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// A rank that arrives 2 s late (four times the liveness limit) but whose progress keeps
/// answering is waited for: everyone completes byte-exact.
#[test]
fn a_late_rank_is_waited_for_over_raw_ethernet() {
    skip_unless_able!(false);
    let mut lab = Lab::new("pcrw");
    let (_, hosts) = lab.star(3);
    let late = Before::Late(Duration::from_secs(2));
    for (r, (result, _)) in liveness_job(&hosts, [Before::Join, Before::Join, late])
        .into_iter()
        .enumerate()
    {
        result.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

/// A rank that is gone (its socket closed) is found by the liveness limit: the ranks that
/// wait for it fail with an error naming it, within the limit plus slack, never a hang and
/// never wrong data.
#[test]
fn a_gone_rank_fails_its_peers_over_raw_ethernet() {
    skip_unless_able!(false);
    let mut lab = Lab::new("pcrw");
    let (_, hosts) = lab.star(3);
    let outcomes = liveness_job(&hosts, [Before::Join, Before::Join, Before::Vanish]);
    // Rank 1 forwards to the vanished rank 2; rank 0 may finish (rank 1 took everything).
    let (result, took) = &outcomes[1];
    let err = result.as_ref().expect_err("rank 1 must see rank 2 gone");
    assert!(err.contains("rank 2 is gone"), "{err}");
    assert!(*took < Duration::from_secs(10), "took {took:?}");
    for (r, (result, _)) in outcomes.iter().enumerate() {
        if let Err(e) = result {
            assert!(!e.contains("WRONG DATA"), "rank {r}: {e}");
        }
    }
}

/// A short soak with faults (issue 14; `bench/soak.sh` runs it with 1000 broadcasts): four
/// ranks on a bridge that loses 1 % of frames and duplicates 1 % (nftables), with a token
/// bucket on every port, while a fifth host that is not in the job floods every rank with random
/// junk and with frames carrying the job's own cookie (as an attacker who sniffed it would).
/// Mixed sizes (0, 1, odd, around the frame payload, up to 300 KB), roots, trees and segment
/// sizes; every byte is checked at every rank (`run_job` panics on the first wrong byte), and
/// the same broadcasts run first on the clean bridge to report the slowdown.
#[test]
fn a_soak_with_loss_duplication_bursts_and_a_flood_stays_byte_exact() {
    use rand::{Rng, SeedableRng};
    skip_unless_able!(true);
    let count: usize = std::env::var("PIPECAST_SOAK_BCASTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x50a4);
    let trees: [fn(usize, usize) -> Vec<Lane>; 3] = [chain, binary, two_lanes];
    let cases: Vec<Case> = (0..count)
        .map(|i| Case {
            root: rng.gen_range(0..4),
            msize: match i % 5 {
                0 => [0, 1, 1407, 1408, 1409][i / 5 % 5],
                _ => rng.gen_range(2..300_000),
            },
            segment: [1408, 10_000, 65_536][rng.gen_range(0..3)],
            lanes: trees[rng.gen_range(0..3)],
        })
        .collect();
    let config = Config {
        reliable: pipecast::engine::reliable::Config {
            rto_initial: 5_000_000,
            ..Default::default()
        },
        ..Config::default()
    };
    let mut lab = Lab::new("pcrw");
    let (sw, all) = lab.star(5);
    let (hosts, intruder) = (&all[..4], all[4].clone());

    let t0 = Instant::now();
    run_job(hosts, &cases, config, 0x50a4_0001);
    let clean = t0.elapsed();

    // Loss at the bridge, duplicates injected back into it at each port's ingress (nftables
    // `dup`; this kernel has no netem), and a token bucket on every port (bursts queue).
    let mut rules = String::from(
        "table bridge pcsoak {\n chain lossy {\n  type filter hook forward priority 0; policy accept;\n  ether type 0x88b5 numgen random mod 100 < 1 counter drop\n }\n}\ntable netdev pcdup {\n",
    );
    for p in 0..4 {
        rules += &format!(
            " chain in{p} {{\n  type filter hook ingress device \"p{p}\" priority 0; policy accept;\n  ether type 0x88b5 numgen random mod 100 < 1 counter dup to \"br0\"\n }}\n"
        );
        tbf(&sw, &format!("p{p}"), "400mbit");
    }
    rules += "}\n";
    nft(&sw, &rules);
    let cookie = 0x50a4_0002;
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        let targets: Vec<Mac> = hosts
            .iter()
            .map(|ns| RawSocket::open_in_netns(ns, "eth0").unwrap().mac())
            .collect();
        std::thread::spawn(move || {
            let s = RawSocket::open_in_netns(&intruder, "eth0").unwrap();
            let mut rng = rand::rngs::StdRng::seed_from_u64(0xbad);
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for &to in &targets {
                    // Random junk of random length, then a well-formed frame with the stolen
                    // cookie claiming to be a segment of a broadcast in flight.
                    let junk: Vec<u8> = (0..rng.gen_range(1..1400)).map(|_| rng.gen()).collect();
                    let head = Repr {
                        kind: Kind::Data.into(),
                        cookie,
                        bcast_seq: rng.gen_range(1..count as u64 + 1),
                        root: rng.gen_range(0..4),
                        msize: rng.gen_range(1..300_000),
                        segment: 1412,
                        lanes: 1,
                        segment_len: 1000,
                        payload_len: 1000,
                        peer_seq: rng.gen_range(1..64),
                        ..Repr::default()
                    }
                    .to_bytes(&to, &s.mac(), &[0xa5u8; 1000]);
                    let body = [0xa5u8; 1000];
                    for frame in [
                        [IoSlice::new(&junk), IoSlice::new(&[])],
                        [IoSlice::new(&head), IoSlice::new(&body)],
                    ] {
                        sent += s.send_batch(&[(to, frame)]).unwrap_or(0) as u64;
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            sent
        })
    };
    let t0 = Instant::now();
    let counters = run_job(hosts, &cases, config, cookie);
    let faulty = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let sent = flood.join().unwrap();
    let sum = |f: fn(&Counters) -> u64| counters.iter().map(f).sum::<u64>();
    eprintln!(
        "soak: {count} broadcasts, 0 wrong bytes; clean {clean:?}, with faults {faulty:?} \
         ({:.2}x); intruder sent {sent} frames; retransmits {}, duplicates {}, dropped: \
         unknown peer {}, length {}, version {}, cookie {}",
        faulty.as_secs_f64() / clean.as_secs_f64().max(1e-9),
        sum(|c| c.retransmits),
        sum(|c| c.duplicates),
        sum(|c| c.dropped_unknown_peer),
        sum(|c| c.dropped_length),
        sum(|c| c.dropped_version),
        sum(|c| c.dropped_cookie),
    );
    assert!(sent > 0, "the intruder sent nothing");
    assert!(
        sum(|c| c.retransmits) > 0,
        "1 % loss must cause retransmissions"
    );
    assert!(
        sum(|c| c.dropped_unknown_peer + c.dropped_length + c.dropped_version + c.dropped_cookie)
            > 0,
        "the intruder's frames must be seen and dropped: {counters:?}"
    );
    assert!(
        sum(|c| c.duplicates) > 0,
        "1 % duplication must show: {counters:?}"
    );
}
