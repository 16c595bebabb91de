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
                    let seq = i as u64 + 1;
                    let data = if me == root {
                        pattern(n, i)
                    } else {
                        vec![0; n]
                    };
                    let mut bufs = Buffers::new();
                    bufs.insert(seq, Buffer::Owned(data));
                    let setup = Setup {
                        seq,
                        root,
                        msize: n as u64,
                        segment: 4096,
                        deep: false,
                    };
                    let bcast = Bcast::new(me, &two_lanes(root), setup, Config::default(), 0)
                        .unwrap()
                        .with_rails(vec![0, 1]);
                    let buf = bufs.get_mut(&seq).unwrap().as_mut_slice();
                    endpoint.post(bcast, buf, clock()).unwrap();
                    drive(&mut t, &mut bufs, &mut endpoint, seq, &clock).unwrap();
                    let Some(Buffer::Owned(v)) = bufs.remove(&seq) else {
                        panic!("the buffer is back")
                    };
                    out.push(v);
                }
                finished.fetch_add(1, Ordering::SeqCst);
                while finished.load(Ordering::SeqCst) < 3 {
                    let wait = Duration::from_millis(1);
                    t.progress(&mut Buffers::new(), &mut endpoint, &clock, wait)
                        .unwrap();
                }
                // Each rail's connections run between that rail's addresses at both ends (the
                // connecting side binds its source to its NIC's address).
                for (&(peer, rail), c) in &t.conns {
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
