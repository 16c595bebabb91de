//! Multicast on a real network: hosts in network namespaces on one Linux bridge (root only;
//! elsewhere every test says "skipped", and fails under `PIPECAST_REQUIRE=root`).
//!
//! - The setup probe over UDP/IP multicast with the bridge's IGMP snooping off (it floods) and
//!   on with a querier (it forwards the group to the ports that joined only): every rank that
//!   joined hears the root's probe; a rank that did not join hears nothing — and with snooping
//!   its NIC sees none of the group's frames either (a raw packet socket on it counts them) —,
//!   so the probe says no for it, and [`agree`] names it at every rank.
//! - The probe over raw Ethernet to the group MAC (0x88B6).
//! - The effective receive buffer the UDP carrier got (root: forced past rmem_max).
//! - One whole broadcast per size class over UDP multicast with the reliability protocol
//!   (`engine::multicast`), each rank a thread in its namespace on the real clock, byte-exact,
//!   also with 1 % loss and 1 % duplicates (nftables) at the bridge.

mod common;

use common::netns::{nft, sh, Lab};
use common::pattern;
use common::requirements::{root, tool, Missing};
use pipecast::engine::multicast::{Config, Member, Msg, Shape, State};
use pipecast::transport::mcast::codec::{decode, Ident};
use pipecast::transport::mcast::ether::EtherCarrier;
use pipecast::transport::mcast::probe::{agree, probe, ProbeConfig};
use pipecast::transport::mcast::udp::{UdpCarrier, UdpConfig};
use pipecast::transport::mcast::{accept, Carrier, Group, Source};
use pipecast::transport::raweth::socket::{poll_fds, RawSocket, RecvBatch};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

fn missing() -> Option<Missing> {
    root().or_else(|| tool("iproute2", "ip", &["-V"]))
}

fn addr(h: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 0, h as u8 + 1)
}

/// `n` hosts on one bridge, host h at 10.77.0.(h+1)/24; with `snooping` the bridge snoops
/// IGMP and runs a querier. Returns the lab (deleted on drop), the switch's namespace and the
/// hosts'.
fn star(tag: &str, n: usize, snooping: bool) -> (Lab, String, Vec<String>) {
    let mut lab = Lab::new(tag);
    let (sw, hosts) = lab.star(n);
    for (h, ns) in hosts.iter().enumerate() {
        let a = format!("{}/24", addr(h));
        sh(&["ip", "-n", ns, "addr", "add", &a, "dev", "eth0"]).unwrap();
    }
    if snooping {
        // The bridge floods until its querier has waited one response interval (10 s by
        // default; 1 s here, set first: the querier takes the interval it finds) after it
        // started.
        for opts in [
            &[
                "mcast_snooping",
                "1",
                "mcast_query_response_interval",
                "100",
            ][..],
            &["mcast_querier", "1"],
        ] {
            let mut cmd = vec!["ip", "-n", &sw, "link", "set", "br0", "type", "bridge"];
            cmd.extend_from_slice(opts);
            sh(&cmd).unwrap();
        }
        std::thread::sleep(Duration::from_millis(1500));
    }
    (lab, sw, hosts)
}

/// Runs `f` on a thread that entered network namespace `ns` (sockets it opens stay there).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        RawSocket::enter_netns(&ns).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// UDP carriers for every host of `hosts` (those in `not_joined` open the group's socket
/// without joining), told each other's addresses.
fn udp_carriers(hosts: &[String], group: Group, not_joined: &[usize]) -> Vec<UdpCarrier> {
    let mut cs: Vec<UdpCarrier> = hosts
        .iter()
        .enumerate()
        .map(|(h, ns)| {
            let config = UdpConfig {
                join: !not_joined.contains(&h),
                ..UdpConfig::default()
            };
            in_netns(ns, move || {
                UdpCarrier::open(group, addr(h), config).unwrap()
            })
        })
        .collect();
    let peers: Vec<_> = cs.iter().map(UdpCarrier::local_addr).collect();
    for c in &mut cs {
        c.set_peers(peers.clone());
    }
    cs
}

/// Every rank's probe at once (a thread each); rank r's answer at r.
fn probe_all<C: Carrier + 'static>(carriers: Vec<C>, root: usize, cookie: u64) -> Vec<bool> {
    let threads: Vec<_> = carriers
        .into_iter()
        .enumerate()
        .map(|(r, mut c)| {
            std::thread::spawn(move || {
                probe(&mut c, r, root, cookie, 0x5eed, ProbeConfig::default()).unwrap()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Counts the IPv4 datagrams to `group` that reach `eth0` of `ns` during `secs` seconds.
fn watch_group(ns: &str, group: Ipv4Addr, secs: f64) -> std::thread::JoinHandle<usize> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        RawSocket::enter_netns(&ns).unwrap();
        let sock = RawSocket::open_with("eth0", 0x0800).unwrap();
        let mut batch = RecvBatch::new(32, 2048);
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let mut seen = 0;
        while Instant::now() < end {
            let _ = sock.poll(false, 20, None);
            if sock.recv_batch(&mut batch).is_ok() {
                seen += batch
                    .frames()
                    .filter(|(_, _, _, b)| b.get(16..20) == Some(&group.octets()[..]))
                    .count();
            }
        }
        seen
    })
}

fn probe_case(snooping: bool) {
    let (_lab, _sw, hosts) = star("pcmp", 4, snooping);
    let cookie = 0x0032_0001 + u64::from(snooping);
    let group = Group::of(cookie);
    // Every rank joined: every one hears the probe, through a snooping bridge too.
    let heard = probe_all(udp_carriers(&hosts, group, &[]), 0, cookie);
    assert_eq!(heard, [true; 4], "snooping {snooping}");
    assert_eq!(agree(&heard), Ok(()));
    // Rank 2 did not join: it hears nothing, and every rank concludes the same. (Another job's
    // group: the bridge remembers rank 2's membership of the first for a while.)
    let cookie = cookie + 0x100;
    let group = Group::of(cookie);
    let watch = watch_group(&hosts[2], group.ip, 0.5);
    let heard = probe_all(udp_carriers(&hosts, group, &[2]), 0, cookie);
    let at_nic = watch.join().unwrap();
    assert_eq!(heard, [true, true, false, true], "snooping {snooping}");
    assert_eq!(agree(&heard), Err(vec![2]));
    if snooping {
        assert_eq!(
            at_nic, 0,
            "the snooping bridge forwarded the group to a port that did not join"
        );
    } else {
        assert!(
            at_nic > 0,
            "the flooding bridge sent rank 2's NIC none of the group's frames"
        );
    }
}

#[test]
fn the_probe_over_udp_with_snooping_off() {
    if let Some(m) = missing() {
        return m.skip();
    }
    probe_case(false);
}

#[test]
fn the_probe_over_udp_with_snooping_and_a_querier() {
    if let Some(m) = missing() {
        return m.skip();
    }
    probe_case(true);
}

#[test]
fn the_probe_over_raw_ethernet_to_the_group_mac() {
    if let Some(m) = missing() {
        return m.skip();
    }
    // Snooping filters IP multicast only: the group MAC reaches every port either way.
    for snooping in [false, true] {
        let (_lab, _sw, hosts) = star("pcme", 3, snooping);
        let cookie = 0x0032_0003;
        let group = Group::of(cookie).mac;
        let mut cs: Vec<_> = hosts
            .iter()
            .map(|ns| in_netns(ns, move || EtherCarrier::open("eth0", group).unwrap()))
            .collect();
        let macs: Vec<_> = cs.iter().map(EtherCarrier::mac).collect();
        for c in &mut cs {
            c.set_peers(macs.clone());
        }
        assert_eq!(probe_all(cs, 1, cookie), [true; 3], "snooping {snooping}");
    }
}

#[test]
fn the_udp_carrier_reports_the_receive_buffer_it_got() {
    if let Some(m) = missing() {
        return m.skip();
    }
    let (_lab, _sw, hosts) = star("pcmb", 1, false);
    let c = &udp_carriers(&hosts, Group::of(7), &[])[0];
    let got = c.rcvbuf().unwrap();
    // Root forces 8 MiB past rmem_max; the kernel doubles what it is asked for.
    assert!(got >= 8 << 20, "{got}");
    eprintln!("{}", c.describe());
}

/// `pipecast bench --floor all` between two namespaces at MTU 1500 and 9000: every receive
/// path lands every segment of the carrier's size and checks every byte (at 9000 the floor's
/// slots once truncated jumbo datagrams, and 1024 jumbo frames a chunk overflowed the socket).
#[test]
fn the_receive_floor_lands_every_mode_at_mtu_1500_and_9000() {
    if let Some(m) = missing() {
        return m.skip();
    }
    for mtu in [1500u32, 9000] {
        let mut lab = Lab::new("pcfl");
        let hosts = lab.pair(mtu, None);
        for (h, ns) in hosts.iter().enumerate() {
            let a = format!("{}/24", addr(h));
            sh(&["ip", "-n", ns, "addr", "add", &a, "dev", "eth0"]).unwrap();
        }
        let netns = format!("{},{}", hosts[0], hosts[1]);
        let rows = common::floor_rows("all", &netns);
        assert_eq!(rows.len(), 8, "MTU {mtu}: {rows:?}");
        for r in rows {
            assert_eq!(r["verified"], true, "MTU {mtu}: {r}");
            assert_eq!(r["bad"], 0, "MTU {mtu}: {r}");
            let seg = r["segment"].as_u64().unwrap();
            assert!(seg > mtu as u64 - 100 && seg < mtu as u64, "MTU {mtu}: {r}");
        }
    }
}

/// Group frames handed to the UDP carrier together (`Carrier::send_group`: one `sendmsg` with
/// UDP GSO per run of equal-length frames) arrive as the same datagrams, byte for byte and in
/// order, as the same frames sent one datagram per call: 1 frame, 64 full ones (more than one
/// GSO send's 64 KiB at MTU 1500), full ones with a short last, and lengths that change
/// mid-batch; at MTU 1500 and 9000.
#[test]
fn group_frames_sent_with_udp_gso_arrive_as_the_datagrams_sent_one_by_one() {
    if let Some(m) = missing() {
        return m.skip();
    }
    for mtu in [1500u32, 9000] {
        let mut lab = Lab::new("pcgs");
        let hosts = lab.pair(mtu, None);
        for (h, ns) in hosts.iter().enumerate() {
            let a = format!("{}/24", addr(h));
            sh(&["ip", "-n", ns, "addr", "add", &a, "dev", "eth0"]).unwrap();
        }
        let mut cs = udp_carriers(&hosts, Group::of(11), &[]);
        let mut rx = cs.pop().unwrap();
        let mut tx = cs.pop().unwrap();
        let full = tx.max_payload();
        let cases: Vec<Vec<usize>> = vec![
            vec![full],
            vec![full; 64],
            [vec![full; 9], vec![full / 3 + 1]].concat(),
            vec![full, full, 17, full, 1, 0, full, full],
            vec![7],
        ];
        for (c, lens) in cases.iter().enumerate() {
            let frames: Vec<(Vec<u8>, Vec<u8>)> = lens
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let head: Vec<u8> = (0..32).map(|b| (b + i * 7 + c) as u8).collect();
                    (head, pattern(n, c * 1000 + i))
                })
                .collect();
            let refs: Vec<(&[u8], &[u8])> = frames
                .iter()
                .map(|(h, p)| (h.as_slice(), p.as_slice()))
                .collect();
            let want: Vec<Vec<u8>> = frames
                .iter()
                .map(|(h, p)| [&h[..], &p[..]].concat())
                .collect();
            let mut got = Vec::new();
            for batched in [false, true] {
                let left = if batched {
                    tx.send_group(&refs).unwrap()
                } else {
                    tx.send_group_each(&refs).unwrap()
                };
                assert_eq!(left, refs.len(), "MTU {mtu} case {c}");
                let mut buf = vec![0u8; 65536];
                let mut these = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(5);
                while these.len() < refs.len() && Instant::now() < deadline {
                    match rx.recv(&mut buf).unwrap() {
                        Some((_, n)) => these.push(buf[..n].to_vec()),
                        None => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
                assert!(
                    rx.recv(&mut buf).unwrap().is_none(),
                    "MTU {mtu} case {c}: extra"
                );
                got.push(these);
            }
            assert_eq!(got[0], want, "MTU {mtu} case {c}: one by one");
            assert_eq!(got[1], want, "MTU {mtu} case {c}: batched");
        }
        eprintln!(
            "MTU {mtu}: {} (GSO {})",
            tx.describe(),
            if tx.gso() { "on" } else { "refused" }
        );
    }
}

/// One broadcast over UDP multicast with the protocol, a thread per rank on the real clock;
/// returns every rank's buffer.
fn udp_bcast(hosts: &[String], cookie: u64, root: usize, msize: usize) -> Vec<Vec<u8>> {
    const SEGMENT: u32 = 1400;
    let n = hosts.len();
    let carriers = udp_carriers(hosts, Group::of(cookie), &[]);
    let data = pattern(msize, root + msize);
    let config = Config {
        liveness: 5_000_000_000,
        ..Config::default()
    };
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let clock = move || start.elapsed().as_nanos() as u64;
    let threads: Vec<_> = carriers
        .into_iter()
        .enumerate()
        .map(|(r, mut c)| {
            let mut buf = if r == root {
                data.clone()
            } else {
                vec![0; msize]
            };
            let done = done.clone();
            std::thread::spawn(move || {
                // A binary ack tree relative to the root.
                let rel = (r + n - root) % n;
                let abs = |x: usize| (x + root) % n;
                let shape = Shape {
                    me: r,
                    root,
                    parent: (rel > 0).then(|| abs((rel - 1) / 2)),
                    children: [2 * rel + 1, 2 * rel + 2]
                        .into_iter()
                        .filter(|&x| x < n)
                        .map(abs)
                        .collect(),
                };
                let mut m = Member::new(shape, msize as u64, SEGMENT, config, clock()).unwrap();
                let ident = Ident {
                    cookie,
                    bseq: 1,
                    root,
                    msize: msize as u64,
                    segment: SEGMENT,
                    me: r,
                };
                let mut rx = vec![0u8; 2048];
                let mut finished = false;
                let deadline = Instant::now() + Duration::from_secs(120);
                loop {
                    assert!(Instant::now() < deadline, "rank {r} hung");
                    let now = clock();
                    while let Some((source, len)) = c.recv(&mut rx).unwrap() {
                        let is_rank = |p: usize, s: &Source| c.is_rank(p, s);
                        let Ok((repr, payload)) = accept(&rx[..len], &source, r, cookie, &is_rank)
                        else {
                            continue;
                        };
                        assert!(ident.matches(&repr));
                        match decode(&repr) {
                            Some(Msg::Data { index, .. }) => {
                                if let Some(range) = m.land(now, repr.from() as usize, index) {
                                    assert_eq!(range.len(), payload.len());
                                    buf[range].copy_from_slice(payload);
                                }
                            }
                            Some(msg) => m.handle(now, repr.from() as usize, msg),
                            None => {}
                        }
                    }
                    if m.poll_timeout(now).is_some_and(|t| t <= now) {
                        m.handle_timeout(now);
                    }
                    while let Some(out) = m.poll_transmit(now) {
                        let payload: &[u8] = match out.msg {
                            Msg::Data { index, .. } => &buf[m.segment_range(index)],
                            _ => &[],
                        };
                        let header = ident.encode(&out, payload.len()).to_bytes(payload).unwrap();
                        while !c.send(out.to, &header, payload).unwrap() {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                    }
                    match m.state() {
                        State::Running => {}
                        State::Complete => {
                            if !finished {
                                finished = true;
                                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                        }
                        State::Failed(e) => panic!("rank {r}: {e}"),
                    }
                    // A finished rank keeps answering (a lost report) until every rank is.
                    if done.load(std::sync::atomic::Ordering::SeqCst) == n {
                        if r == root {
                            eprintln!(
                                "{msize} bytes from {root} to {n} ranks: {:.1} ms, root {:?}",
                                clock() as f64 / 1e6,
                                m.stats()
                            );
                        }
                        return buf;
                    }
                    let wait = m
                        .poll_timeout(clock())
                        .map_or(5_000_000, |t| t.saturating_sub(clock()).min(5_000_000));
                    let fds: Vec<_> = c.fds().into_iter().map(|fd| (fd, false)).collect();
                    poll_fds(&fds, std::time::Duration::from_nanos(wait), None).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn bcast_case(tag: &str, loss: bool) {
    let (_lab, sw, hosts) = star(tag, 4, false);
    if loss {
        // 1 % of the UDP frames the bridge forwards dropped (per outgoing port: each receiver
        // loses its own), 1 % duplicated at every port's ingress (nftables; this kernel has
        // no netem).
        let mut rules = String::from(
            "table bridge pcmloss {\n chain lossy {\n  type filter hook forward priority 0; \
             policy accept;\n  meta l4proto udp numgen random mod 100 < 1 counter drop\n \
             }\n}\ntable netdev pcmdup {\n",
        );
        for h in 0..hosts.len() {
            rules += &format!(
                " chain in{h} {{\n  type filter hook ingress device \"p{h}\" priority 0; \
                 policy accept;\n  meta l4proto udp numgen random mod 100 < 1 counter dup to \
                 \"br0\"\n }}\n"
            );
        }
        rules += "}\n";
        nft(&sw, &rules);
    }
    let mut cookie = 0x0032_0100 + u64::from(loss);
    for root in [0, 3] {
        for msize in [0, 1, 1399, 3 * 1400 + 7, (1 << 20) + 3] {
            cookie += 2;
            let bufs = udp_bcast(&hosts, cookie, root, msize);
            let want = pattern(msize, root + msize);
            for (r, b) in bufs.iter().enumerate() {
                assert!(
                    b == &want,
                    "rank {r}: {msize} bytes from {root}, loss {loss}"
                );
            }
        }
    }
}

#[test]
fn a_broadcast_over_udp_multicast_is_byte_exact() {
    if let Some(m) = missing() {
        return m.skip();
    }
    bcast_case("pcmu", false);
}

#[test]
fn a_broadcast_over_udp_multicast_with_one_percent_loss_is_byte_exact() {
    if let Some(m) = missing().or_else(|| tool("nftables", "nft", &["--version"])) {
        return m.skip();
    }
    bcast_case("pcml", true);
}

/// `pipecast lab down --name NAME` when dropped.
struct LabDown(String);

impl Drop for LabDown {
    fn drop(&mut self) {
        let _ = common::pipecast(&["lab", "down", "--name", &self.0]);
    }
}

#[test]
fn lab_up_igmp_snooping_turns_on_snooping_and_a_querier() {
    if let Some(m) = missing().or_else(|| tool("lldpd", "lldpcli", &["-v"])) {
        return m.skip();
    }
    let dir = common::artifact_dir("mcast_lab");
    let topo = dir.join("t.json");
    std::fs::write(
        &topo,
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s1"}]}"#,
    )
    .unwrap();
    for snooping in [true, false] {
        let name = format!("mc{}{}", std::process::id() % 100_000, u8::from(snooping));
        let _down = LabDown(name.clone());
        let mut args = vec![
            "lab",
            "up",
            "--topology",
            topo.to_str().unwrap(),
            "--name",
            &name,
            "--lldp-wait",
            "0",
        ];
        if snooping {
            args.push("--igmp-snooping");
        }
        let out = common::pipecast(&args);
        assert!(out.status.success(), "{}", common::text(&out));
        let said = String::from_utf8_lossy(&out.stdout).contains("IGMP snooping with a querier");
        assert_eq!(said, snooping, "{}", common::text(&out));
        for switch in ["s0", "s1"] {
            let ns = format!("{name}-{switch}");
            let d = common::netns::sh_out(&["ip", "-n", &ns, "-d", "link", "show", "br0"]);
            let want = if snooping {
                ["mcast_snooping 1", "mcast_querier 1"]
            } else {
                ["mcast_snooping 0", "mcast_querier 0"]
            };
            for w in want {
                assert!(d.contains(w), "{switch}: no {w:?} in {d}");
            }
        }
        // The management network never snoops.
        let mg = common::netns::sh_out(&[
            "ip",
            "-n",
            &format!("{name}-mg"),
            "-d",
            "link",
            "show",
            "br0",
        ]);
        assert!(mg.contains("mcast_snooping 0"), "{mg}");
    }
}

/// Not a test: what one broadcast over UDP multicast takes on a star whose links are shaped
/// to 100 Mbit/s in each direction (a tbf on both ends), against T(m) = the message's bytes
/// at the link rate: `cargo test --test mcast measure -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_udp_multicast_on_a_shaped_star() {
    if let Some(m) = missing() {
        return m.skip();
    }
    for n in [4, 8] {
        let (_lab, sw, hosts) = star("pcmm", n, false);
        for (h, ns) in hosts.iter().enumerate() {
            common::netns::tbf(ns, "eth0", "100mbit");
            common::netns::tbf(&sw, &format!("p{h}"), "100mbit");
        }
        let mut cookie = 0x0032_0200 + n as u64 * 0x10;
        for msize in [1 << 20, 4 << 20] {
            for _ in 0..2 {
                cookie += 1;
                let t = Instant::now();
                let bufs = udp_bcast(&hosts, cookie, 0, msize);
                let took = t.elapsed().as_secs_f64();
                let want = pattern(msize, msize);
                assert!(bufs.iter().all(|b| b == &want));
                let tm = msize as f64 * 8.0 / 100e6;
                eprintln!(
                    "{n} ranks, {msize} bytes: {:.1} ms = {:.2} x T(m) ({:.1} ms)",
                    took * 1e3,
                    took / tm,
                    tm * 1e3
                );
            }
        }
    }
}
