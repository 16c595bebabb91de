//! The AF_XDP receive path (`transport::mcast::xsk`) between two network namespaces joined
//! by a veth pair: the carrier's frames to the group (and to the receiver's MAC) arrive in
//! the socket's UMEM byte for byte, across sizes and more frames than its rings hold; every
//! other frame (another EtherType, another group) passes to the kernel's stack; dropping
//! the socket detaches its XDP program. `pipecast bench --floor ether-xdp` lands every byte
//! at MTU 1500 and 9000, and as `nobody` it fails at once, saying what it lacks.
//!
//! Needs root (namespaces, CAP_NET_RAW, CAP_BPF) and `ip`; `setpriv` for the `nobody` test.
//! Without them each test prints why and passes (`PIPECAST_REQUIRE=root` makes it fail).
//! Namespaces are named `pcxd-<pid>-<n>-…` and deleted on drop.

mod common;

use common::netns::{sh_out, Lab};
use common::requirements::{root, tool};
use pipecast::transport::mcast::ether::ETHERTYPE;
use pipecast::transport::mcast::xsk::{Xsk, XskConfig};
use pipecast::transport::mcast::Group;
use pipecast::transport::raweth::socket::{Mac, RawSocket};
use std::io::IoSlice;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Frame `i`'s payload: its index, then `len - 8` bytes no other frame shares.
fn payload(i: usize, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|k| {
            (k as u64 * 31)
                .wrapping_add((i as u64).wrapping_mul(7919))
                .rotate_left(k as u32 % 13) as u8
        })
        .collect();
    let n = len.min(8);
    p[..n].copy_from_slice(&(i as u64).to_le_bytes()[..n]);
    p
}

/// Lengths of the frames' payloads: short, odd, the MTU's largest, in a cycle.
fn lengths(mtu: usize) -> Vec<usize> {
    vec![8, 9, 46, 47, 100, 1001, mtu / 2 + 3, mtu - 1, mtu]
}

/// Whether `ip link show` in `ns` shows an XDP program on `eth0`.
fn has_xdp(ns: &str) -> bool {
    sh_out(&["ip", "-n", ns, "link", "show", "dev", "eth0"]).contains("xdp")
}

/// Sends `count` frames of the carrier's EtherType from namespace `a` (to the group and to
/// `b`'s MAC, alternately), plus foreign ones (another EtherType to the group, the
/// EtherType to another group), in bursts of `burst` with a pause for the receiver to take
/// them; the receiver in `b` must get exactly the carrier's, every byte, through the XSK,
/// while the foreign ones reach a packet socket in `b` (passed to the stack).
fn frames_cross(mtu: u32, count: usize, burst: usize) {
    let mut lab = Lab::new("pcxd");
    let hosts = lab.pair(mtu, None);
    let (a, b) = (hosts[0].clone(), hosts[1].clone());
    let group = Group::of(0x5eed_0000 + u64::from(mtu)).mac;
    let other_group: Mac = [0x03, 0x50, 1, 2, 3, 4];
    let mtu = mtu as usize;
    let lens = lengths(mtu);
    let (ready_tx, ready_rx) = mpsc::channel::<Mac>();
    let (sent_tx, sent_rx) = mpsc::channel::<usize>();
    let (took_tx, took_rx) = mpsc::channel::<()>();
    let ns_b = b.clone();
    let send_lens = lens.clone();
    let receiver = std::thread::spawn(move || {
        RawSocket::enter_netns(&ns_b).unwrap();
        // The stack's view: a packet socket for each foreign kind.
        let plain_other_type = RawSocket::open_with("eth0", 0x88B5).unwrap();
        let plain_carrier = RawSocket::open_with("eth0", ETHERTYPE).unwrap();
        let own = plain_carrier.mac();
        let config = XskConfig {
            frames: 512,
            ..XskConfig::carrier(vec![group, own])
        };
        let mut xsk = Xsk::open("eth0", &config).unwrap();
        eprintln!(
            "MTU {mtu}: zero-copy {}, attached {:?}, chunk {}, multi-buffer {}",
            xsk.zero_copy(),
            xsk.attach_mode(),
            xsk.chunk(),
            xsk.multi_buffer()
        );
        assert_eq!(xsk.multi_buffer(), mtu > 3000);
        assert!(
            has_xdp(&ns_b),
            "no XDP program on eth0 while the socket is open"
        );
        ready_tx.send(own).unwrap();
        let mut seen = vec![false; count];
        let mut got = 0;
        let mut wrong = Vec::new();
        while got < count {
            let upto = sent_rx.recv_timeout(Duration::from_secs(30)).unwrap();
            let start = Instant::now();
            while got < upto {
                let n = xsk.drain(64, |pieces| {
                    let f = &pieces.concat()[..];
                    let (dst, src_type, body) = (&f[..6], &f[12..14], &f[14..]);
                    let i = body
                        .get(..8)
                        .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
                        .unwrap_or(usize::MAX);
                    let to = if i % 2 == 0 { group } else { own };
                    let ok = i < count
                        && !seen[i]
                        && dst == to
                        && src_type == ETHERTYPE.to_be_bytes()
                        && body == payload(i, lens[i % lens.len()]);
                    if ok {
                        seen[i] = true;
                        got += 1;
                    } else {
                        wrong.push(f.to_vec());
                    }
                });
                assert!(wrong.is_empty(), "frames not as sent: {:?}", wrong.len());
                if n == 0 {
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "{got} of {upto} frames arrived; socket {:?}",
                        xsk.stats()
                    );
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            took_tx.send(()).unwrap();
        }
        assert_eq!(xsk.bad(), 0);
        let stats = xsk.stats().unwrap();
        assert_eq!(stats.rx_dropped + stats.rx_invalid_descs, 0, "{stats:?}");
        // The foreign frames went to the stack, none to the XSK.
        let count_plain = |s: &RawSocket| {
            let mut batch = pipecast::transport::raweth::socket::RecvBatch::new(64, 9100);
            let mut n = 0;
            let deadline = Instant::now() + Duration::from_secs(2);
            while n < 4 && Instant::now() < deadline {
                n += s.recv_batch(&mut batch).unwrap_or(0);
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        };
        assert_eq!(count_plain(&plain_other_type), 2, "0x88B5 frames passed");
        // The carrier's EtherType to another group: passed, not redirected.
        assert_eq!(count_plain(&plain_carrier), 2, "other-group frames passed");
        drop(xsk);
        assert!(
            !has_xdp(&ns_b),
            "the XDP program stayed after the socket closed"
        );
    });
    let sender = std::thread::spawn(move || {
        RawSocket::enter_netns(&a).unwrap();
        let s = RawSocket::open_with("eth0", ETHERTYPE).unwrap();
        let other = RawSocket::open_with("eth0", 0x88B5).unwrap();
        let own_b = ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        // Foreign frames first: to the group with another EtherType, and the carrier's
        // EtherType to another group.
        for _ in 0..2 {
            let p = payload(usize::MAX / 2, 64);
            let f = [(group, [IoSlice::new(&p[..8]), IoSlice::new(&p[8..])])];
            assert_eq!(other.send_batch(&f).unwrap(), 1);
            let f = [(other_group, [IoSlice::new(&p[..8]), IoSlice::new(&p[8..])])];
            assert_eq!(s.send_batch(&f).unwrap(), 1);
        }
        let mut i = 0;
        while i < count {
            let end = (i + burst).min(count);
            while i < end {
                let p = payload(i, send_lens[i % send_lens.len()]);
                let to = if i % 2 == 0 { group } else { own_b };
                let f = [(to, [IoSlice::new(&p[..8]), IoSlice::new(&p[8..])])];
                match s.send_batch(&f) {
                    Ok(1) => i += 1,
                    Ok(_) => std::thread::sleep(Duration::from_micros(50)),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_micros(50))
                    }
                    Err(e) => panic!("send: {e}"),
                }
            }
            sent_tx.send(i).unwrap();
            took_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        }
    });
    let r = receiver.join();
    let s = sender.join();
    r.expect("receiver");
    s.expect("sender");
}

#[test]
fn frames_reach_the_xsk_byte_for_byte_at_mtu_1500() {
    common::require!(root(), tool("iproute2", "ip", &["-V"]));
    // 5 bursts of 400 through rings of 512: the indices wrap.
    frames_cross(1500, 2000, 400);
}

#[test]
fn frames_reach_the_xsk_byte_for_byte_at_mtu_9000() {
    common::require!(root(), tool("iproute2", "ip", &["-V"]));
    frames_cross(9000, 1200, 300);
}

/// `bench --floor ether-xdp` between the namespaces: every byte lands, at both MTUs.
#[test]
fn the_floor_lands_every_byte_through_the_xsk() {
    common::require!(root(), tool("iproute2", "ip", &["-V"]));
    for mtu in [1500u32, 9000] {
        let mut lab = Lab::new("pcxd");
        let hosts = lab.pair(mtu, None);
        let netns = format!("{},{}", hosts[0], hosts[1]);
        let rows = common::floor_rows("ether-xdp", &netns);
        assert_eq!(rows.len(), 1, "MTU {mtu}: {rows:?}");
        let r = &rows[0];
        assert_eq!(r["mode"], "ether-xdp");
        assert_eq!(r["verified"], true, "MTU {mtu}: {r}");
        assert_eq!(r["bad"], 0, "MTU {mtu}: {r}");
        assert_eq!(r["segment"], mtu - 32, "MTU {mtu}: {r}");
        assert!(!has_xdp(&hosts[1]), "MTU {mtu}: the program stayed");
    }
}

/// As `nobody` (no capabilities), `bench --floor ether-xdp` fails at once and says why.
#[test]
fn without_privilege_the_xsk_says_what_it_lacks() {
    common::require!(root(), tool("util-linux", "setpriv", &["--version"]));
    let out = std::process::Command::new("timeout")
        .args([
            "60",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
        .arg(common::EXE)
        .args([
            "bench",
            "--floor",
            "ether-xdp",
            "--floor-iface",
            "lo",
            "--sizes",
            "64K",
        ])
        .args(["--iters", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(124), "it hung: {err}");
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("AF_XDP") && err.contains("CAP_NET_RAW"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
