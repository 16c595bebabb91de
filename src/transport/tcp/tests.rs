//! Several rails over real sockets: 127.0.0.1 stands for every rank's NIC 0 and 127.0.0.2
//! for its NIC 1 (the whole of 127/8 is the loopback's). `tests/lab_rails.rs` does the same
//! across network namespaces with two real NICs per host.

use super::TcpTransport;
use crate::engine::drive::Engine;
use crate::engine::{Bcast, Config, Setup};
use crate::plan::Lane;
use crate::testing::pattern;
use crate::transport::drive::drive;
use crate::transport::{Buffer, Buffers, Link};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NIC0: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const NIC1: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// Two chains from `root` over 3 ranks, in opposite orders (lane 0 root→a→b, lane 1
/// root→b→a), as multilane puts one per rail.
fn two_lanes(root: usize) -> Vec<Lane> {
    let others: Vec<usize> = (0..3).filter(|&r| r != root).collect();
    let chain = |a: usize, b: usize| {
        let mut children = vec![Vec::new(); 3];
        children[root].push(a);
        children[a].push(b);
        Lane::from_children(children)
    };
    vec![chain(others[0], others[1]), chain(others[1], others[0])]
}

/// Broadcast `i` of a test (number i + 1, `len` bytes of `pattern(len, i)` from `root`), as
/// rank `me` runs it.
struct Ran {
    me: usize,
    i: usize,
    root: usize,
    len: usize,
}

impl Ran {
    /// Runs it over `lanes` (each on its rail of `rails`, if given) through `t`, connecting
    /// to its peers when it is posted as the progress thread does; returns the buffer.
    fn on(
        self,
        t: &mut TcpTransport,
        endpoint: &mut Engine,
        lanes: &[Lane],
        rails: Option<Vec<usize>>,
        clock: &dyn Fn() -> u64,
    ) -> Vec<u8> {
        let Ran { me, i, root, len } = self;
        let seq = i as u64 + 1;
        let data = if me == root {
            pattern(len, i)
        } else {
            vec![0; len]
        };
        let mut bufs = Buffers::new();
        bufs.insert(seq, Buffer::Owned(data));
        let setup = Setup {
            seq,
            root,
            msize: len as u64,
            segment: 4096,
            deep: false,
        };
        let mut bcast = Bcast::new(me, lanes, setup, Config::default(), 0).unwrap();
        if let Some(rails) = rails {
            bcast = bcast.with_rails(rails);
        }
        t.connect(&bcast.peers(), Duration::from_secs(10)).unwrap();
        let buf = bufs.get_mut(&seq).unwrap().as_mut_slice();
        endpoint.post(bcast, buf, clock()).unwrap();
        drive(t, &mut bufs, endpoint, seq, clock).unwrap();
        let Some(Buffer::Owned(v)) = bufs.remove(&seq) else {
            panic!("the buffer is back")
        };
        v
    }
}

/// Keeps `t` going (credits, goodbyes) until all `n` ranks counted themselves `finished`.
fn linger(
    t: &mut TcpTransport,
    endpoint: &mut Engine,
    finished: &AtomicUsize,
    n: usize,
    clock: &dyn Fn() -> u64,
) {
    finished.fetch_add(1, Ordering::SeqCst);
    while finished.load(Ordering::SeqCst) < n {
        t.progress(
            &mut Buffers::new(),
            endpoint,
            clock,
            Duration::from_millis(1),
        )
        .unwrap();
    }
}

/// Three ranks with two NICs each: every broadcast is byte-exact, lane 1's bytes leave
/// through the NIC 1 connections, and nothing else uses them.
#[test]
fn each_lane_leaves_through_its_own_rail() {
    let mut tcps: Vec<TcpTransport> = (0..3)
        .map(|r| TcpTransport::bind(r, "127.0.0.1").unwrap())
        .collect();
    let rails: Vec<Vec<_>> = tcps
        .iter_mut()
        .map(|t| t.bind_rails(&[NIC1]).unwrap())
        .collect();
    let addrs: Vec<_> = tcps.iter().map(TcpTransport::local_addr).collect();
    for t in &mut tcps {
        t.set_peers(addrs.clone(), 9);
        t.set_rails(&rails);
        assert_eq!(t.rails(), 2);
        assert_eq!(t.describe(), "tcp:2rails");
    }
    let cases: Vec<(usize, usize)> = [0, 1, 4097, 1_000_003]
        .iter()
        .flat_map(|&n| [(0, n), (2, n)])
        .collect();
    // A rank done with its part may still owe its parent a credit: every rank keeps its link
    // going until all are done, as the communicator's progress thread does.
    let finished = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = tcps
        .into_iter()
        .enumerate()
        .map(|(me, mut t)| {
            let cases = cases.clone();
            let finished = finished.clone();
            std::thread::spawn(move || {
                let others: Vec<usize> = (0..3).filter(|&r| r != me).collect();
                t.connect(&others, Duration::from_secs(10)).unwrap();
                let start = Instant::now();
                let clock = move || start.elapsed().as_nanos() as u64;
                let mut endpoint = Engine::new();
                let mut out = Vec::new();
                for (i, &(root, n)) in cases.iter().enumerate() {
                    let lanes = two_lanes(root);
                    let ran = Ran {
                        me,
                        i,
                        root,
                        len: n,
                    };
                    out.push(ran.on(&mut t, &mut endpoint, &lanes, Some(vec![0, 1]), &clock));
                }
                linger(&mut t, &mut endpoint, &finished, 3, &clock);
                // Each rail's connections run between that rail's addresses at both ends (the
                // connecting side binds its source to its NIC's address).
                for (&(peer, rail, _), c) in &t.conns {
                    let ends = [
                        c.stream.local_addr().unwrap().ip(),
                        c.stream.peer_addr().unwrap().ip(),
                    ];
                    let nic = if rail == 1 { NIC1 } else { NIC0 };
                    assert_eq!(ends, [nic; 2], "{me}-{peer} rail {rail}");
                }
                (out, t.counters())
            })
        })
        .collect();
    let mut sent = [0u64; 2];
    for (me, th) in threads.into_iter().enumerate() {
        let (got, counters) = th.join().unwrap();
        for (i, &(_, n)) in cases.iter().enumerate() {
            assert!(got[i] == pattern(n, i), "rank {me} case {i} ({n} bytes)");
        }
        for (rail, s) in sent.iter_mut().enumerate() {
            *s += counters[&format!("rail{rail}.bytes_sent")];
        }
    }
    // Each lane carries about half of every message (whole segments) over two hops, so each
    // rail moves about one message per broadcast, plus headers and credits.
    let moved: u64 = cases.iter().map(|&(_, n)| n as u64).sum();
    for (rail, s) in sent.iter().enumerate() {
        assert!(
            *s * 10 >= moved * 9 && *s * 10 <= moved * 11,
            "rail {rail} sent {s} bytes for {moved}"
        );
    }
}

/// `n` ranks on loopback, each knowing the others' addresses (job cookie 9).
fn ranks(n: usize) -> Vec<TcpTransport> {
    let mut tcps: Vec<TcpTransport> = (0..n)
        .map(|r| TcpTransport::bind(r, "127.0.0.1").unwrap())
        .collect();
    let addrs: Vec<_> = tcps.iter().map(TcpTransport::local_addr).collect();
    for t in &mut tcps {
        t.set_peers(addrs.clone(), 9);
    }
    tcps
}

/// A chain from `root` over `n` ranks visiting root, root + stride, root + 2 stride, … (mod
/// `n`, `stride` coprime to it): each stride gives every rank other neighbours.
fn chain(n: usize, root: usize, stride: usize) -> Vec<Lane> {
    let mut children = vec![Vec::new(); n];
    for i in 0..n - 1 {
        children[(root + i * stride) % n].push((root + (i + 1) * stride) % n);
    }
    vec![Lane::from_children(children)]
}

/// Runs `cases` (root, stride, bytes) one after another at every rank of `tcps`, each rank
/// connecting to its broadcast's peers when it posts it (as the progress thread does), and
/// keeps every link going until all ranks are done. Returns each rank's buffers and link.
fn run_chains(
    tcps: Vec<TcpTransport>,
    cases: &[(usize, usize, usize)],
) -> Vec<(Vec<Vec<u8>>, TcpTransport)> {
    let n = tcps.len();
    let finished = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = tcps
        .into_iter()
        .enumerate()
        .map(|(me, mut t)| {
            let cases = cases.to_vec();
            let finished = finished.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let clock = move || start.elapsed().as_nanos() as u64;
                let mut endpoint = Engine::new();
                let mut out = Vec::new();
                for (i, &(root, stride, len)) in cases.iter().enumerate() {
                    let lanes = chain(n, root, stride);
                    let ran = Ran { me, i, root, len };
                    out.push(ran.on(&mut t, &mut endpoint, &lanes, None, &clock));
                }
                linger(&mut t, &mut endpoint, &finished, n, &clock);
                (out, t)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// A cache of one connection: between broadcasts whose chains give each rank other
/// neighbours, idle connections close with a goodbye and reopen when needed, and every
/// byte arrives at every rank (a close never loses a byte in flight, nor looks like a gone
/// peer).
#[test]
fn a_cache_of_one_connection_closes_and_reopens_byte_exact() {
    let n = 5;
    let mut tcps = ranks(n);
    for t in &mut tcps {
        t.set_max_connections(1);
    }
    let cases: Vec<(usize, usize, usize)> = [0, 1, 4097, 100_003]
        .iter()
        .flat_map(|&len| (1..n).map(move |stride| (stride % n, stride, len)))
        .chain([(0, 1, 300_001), (4, 2, 300_001), (0, 1, 7)])
        .collect();
    let done = run_chains(tcps, &cases);
    let mut closed = 0;
    for (me, (got, t)) in done.iter().enumerate() {
        for (i, &(_, _, len)) in cases.iter().enumerate() {
            assert!(
                got[i] == pattern(len, i),
                "rank {me} case {i} ({len} bytes)"
            );
        }
        closed += t.closed_idle;
        // Bounded: at most the broadcast's own peers beyond the cache, never everybody.
        let live = t.conns.values().filter(|c| c.live()).count();
        assert!(live <= 2, "rank {me}: {}", t.describe_state(0));
        assert!(t.conns.len() <= 3, "rank {me}: {}", t.describe_state(0));
    }
    assert!(closed > 0, "the cache of one closed idle connections");
}

/// One stream per pair: chains in both directions over the same ranks (each edge carries
/// data one way in one broadcast and the other way in the next, credits always back), with
/// both ends posting at once, so that both ends of an edge often dial each other before
/// either hello arrives. Every byte arrives, and each rank ends with one stream per
/// neighbour, whichever end dialled it.
#[test]
fn both_ends_dialling_at_once_end_with_one_stream_each_byte_exact() {
    let n = 6;
    let cases: Vec<(usize, usize, usize)> = (0..12)
        .map(|i| {
            let len = [0, 1, 4097, 100_003, 7, 300_001][i % 6];
            if i % 2 == 0 {
                (0, 1, len)
            } else {
                (n - 1, n - 1, len)
            }
        })
        .collect();
    let done = run_chains(ranks(n), &cases);
    let mut moved = 0;
    for (me, (got, t)) in done.iter().enumerate() {
        for (i, &(_, _, len)) in cases.iter().enumerate() {
            assert!(
                got[i] == pattern(len, i),
                "rank {me} case {i} ({len} bytes)"
            );
        }
        moved += t.moved;
        let mut peers: Vec<usize> = t
            .conns
            .iter()
            .filter(|(_, c)| c.live())
            .map(|(&(p, _, _), _)| p)
            .collect();
        peers.sort_unstable();
        let want: Vec<usize> = [me.checked_sub(1), Some(me + 1).filter(|&r| r < n)]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(peers, want, "rank {me}: {}", t.describe_state(0));
    }
    eprintln!("directions moved to the lower rank's stream: {moved}");
}

/// Connections come only on tree edges: after chains with stride 1 from root 0, a rank holds
/// connections to its chain neighbours only.
#[test]
fn connections_are_made_only_on_tree_edges() {
    let n = 6;
    let done = run_chains(ranks(n), &[(0, 1, 10_000), (0, 1, 0)]);
    for (me, (got, t)) in done.iter().enumerate() {
        assert!(got[0] == pattern(10_000, 0), "rank {me}");
        let mut peers: Vec<usize> = t.conns.keys().map(|&(p, _, _)| p).collect();
        peers.sort_unstable();
        let want: Vec<usize> = [me.checked_sub(1), Some(me + 1).filter(|&r| r < n)]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(peers, want, "rank {me}");
    }
}

/// A stray that connects and says nothing, and one that says something else, neither stall
/// a broadcast nor join the job; the second is closed at once.
#[test]
fn strays_neither_stall_nor_join() {
    use std::io::{Read, Write};
    let tcps = ranks(2);
    let target = tcps[1].local_addr();
    let silent = std::net::TcpStream::connect(target).unwrap();
    let mut talker = std::net::TcpStream::connect(target).unwrap();
    talker
        .write_all(b"GET / HTTP/1.0\r\n\r\nand more bytes")
        .unwrap();
    let done = run_chains(tcps, &[(0, 1, 100_003), (1, 1, 5)]);
    for (me, (got, t)) in done.iter().enumerate() {
        assert!(got[0] == pattern(100_003, 0), "rank {me}");
        assert!(got[1] == pattern(5, 1), "rank {me}");
        assert!(t.conns.keys().all(|&(p, _, _)| p == 1 - me), "rank {me}");
    }
    talker
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let n = talker.read_to_end(&mut rest).unwrap_or(0);
    assert_eq!(n, 0, "the talker was closed without an answer");
    drop(silent);
}

/// Two ranks that each dial the other before either has read a hello (both `connect` first):
/// the higher rank moves its direction onto the lower rank's stream, the stream it dialled
/// closes, and broadcasts both ways stay byte-exact over the one stream left.
#[test]
fn a_simultaneous_dial_keeps_the_lower_ranks_stream() {
    let mut tcps = ranks(2);
    for (me, t) in tcps.iter_mut().enumerate() {
        t.connect(&[1 - me], Duration::from_secs(10)).unwrap();
    }
    let cases = [(0, 1, 100_003), (1, 1, 4097), (0, 1, 0), (1, 1, 300_001)];
    let done = run_chains(tcps, &cases);
    for (me, (got, t)) in done.iter().enumerate() {
        for (i, &(_, _, len)) in cases.iter().enumerate() {
            assert!(got[i] == pattern(len, i), "rank {me} case {i}");
        }
        assert_eq!(t.moved, me as u64, "rank {me}: {}", t.describe_state(0));
        let live: Vec<_> = t.conns.iter().filter(|(_, c)| c.live()).collect();
        assert_eq!(live.len(), 1, "rank {me}: {}", t.describe_state(0));
        // The stream left is the one rank 0 dialled.
        assert_eq!(live[0].1.dialed, me == 0, "rank {me}");
    }
}

/// A peer that announces a segment of a 2^60-byte message for a broadcast this rank has not
/// posted (so the link would hold it in memory of its own) gets an error naming the memory
/// limit before anything is allocated: no abort, no out-of-memory kill, no hang. Then the
/// largest segment a header can say (4 GiB - 1) of a message that fits: held lazily, nothing
/// allocated beyond what arrives (a zeroed allocation), no error yet.
#[test]
fn a_peer_announcing_more_than_memory_gets_the_named_limit() {
    use crate::engine::{DataHeader, Message};
    use crate::wire::{hello, message};
    use std::io::Write;
    let mut tcps = ranks(2);
    let mut t = tcps.pop().unwrap();
    let (mut bufs, mut endpoint) = (Buffers::new(), Engine::new());
    let start = Instant::now();
    let clock = move || start.elapsed().as_micros() as u64;
    let header = |msize: u64, len: u32| {
        message::emit(&Message::Data(DataHeader {
            seq: 1,
            root: 0,
            msize,
            segment: u32::MAX,
            lanes: 1,
            lane: 0,
            index: 0,
            len,
        }))
    };
    let run = |t: &mut TcpTransport, bufs: &mut Buffers, endpoint: &mut Engine, msize, len| {
        let mut fake = std::net::TcpStream::connect(t.local_addr()).unwrap();
        fake.write_all(&hello::emit(hello::TCP_LINK, 9, 0)).unwrap();
        fake.write_all(&hello::start(0)).unwrap();
        fake.write_all(&header(msize, len)).unwrap();
        fake.write_all(&[7; 1000]).unwrap();
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if let Err(e) = t.progress(bufs, endpoint, &clock, Duration::from_millis(10)) {
                return Some(e.to_string());
            }
        }
        drop(fake);
        None
    };
    let e = run(&mut t, &mut bufs, &mut endpoint, 1 << 60, u32::MAX).expect("an error");
    for want in [
        "rank 0 announced 4294967295 bytes of a 1152921504606846976-byte message",
        "ulimit -v",
        "MemTotal + SwapTotal",
        "hold segment 0 of broadcast 1",
    ] {
        assert!(e.contains(want), "{want}: {e}");
    }
    // A segment longer than its message is refused alike.
    let mut t = ranks(2).pop().unwrap();
    let e = run(&mut t, &mut bufs, &mut Engine::new(), 10, 11).expect("an error");
    assert!(e.contains("11 bytes of a 10-byte message"), "{e}");
    // 4 GiB - 1 of a message this host can hold (when it can): the allocation is zeroed
    // pages, touched only as bytes arrive; the link waits for the rest.
    if crate::transport::limits::memory_ceiling() > 8 << 30 {
        let mut t = ranks(2).pop().unwrap();
        let e = run(
            &mut t,
            &mut bufs,
            &mut Engine::new(),
            u64::from(u32::MAX),
            u32::MAX,
        );
        assert_eq!(e, None);
    } else {
        eprintln!("skipped: the 4 GiB hold (this host holds less than 8 GiB)");
    }
}

/// Every connection of a broadcast, dialled and accepted, carries the LAN's timers given by
/// `set_rto_min` where the kernel has `TCP_RTO_MIN_US` (read back with getsockopt: the kernel's
/// rounding of 5 ms, the delayed-ack ceiling no higher than the floor); by default they keep
/// the kernel's 200 ms. Every byte arrives either way.
#[test]
fn connections_carry_the_lans_retransmission_timers() {
    use super::timers;
    let want = match timers::probe(timers::RTO_MIN) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("skipped: the kernel refuses TCP_RTO_MIN_US ({e})");
            return;
        }
    };
    assert!(
        want.rto_min_us >= 5000 && want.rto_min_us < 200_000,
        "{want:?}"
    );
    assert!(want.delack_max_us <= want.rto_min_us, "{want:?}");
    for off in [false, true] {
        let mut tcps = ranks(3);
        if !off {
            for t in &mut tcps {
                t.set_rto_min(Some(timers::RTO_MIN));
            }
        }
        let done = run_chains(tcps, &[(0, 1, 100_003), (2, 2, 1)]);
        for (me, (got, t)) in done.iter().enumerate() {
            assert!(got[0] == pattern(100_003, 0), "rank {me}");
            assert!(got[1] == pattern(1, 1), "rank {me}");
            assert!(!t.conns.is_empty(), "rank {me}");
            for (k, c) in &t.conns {
                use std::os::fd::AsFd;
                let got = timers::read(c.stream.as_fd()).unwrap();
                let expect = if off {
                    timers::Timers {
                        rto_min_us: 200_000,
                        delack_max_us: 200_000,
                    }
                } else {
                    want
                };
                assert_eq!(
                    got, expect,
                    "rank {me} stream {k:?} (dialled: {})",
                    c.dialed
                );
            }
        }
    }
}
