//! `pipecast bench --floor MODES`: the floor of the kernel's receive paths for a multicast
//! receiver, no protocol run (docs/multicast.md, "Receivers' CPU: the floor of the kernel's
//! receive paths"). A sender thread (in one network namespace) sends the message as datagrams
//! of the carrier's segment — a 32-byte header with the segment's index, then its payload —
//! in chunks; a receiver thread (in another) takes each chunk whole, after it was sent, and
//! lands every payload at its offset in the message's buffer. The receiver's thread CPU per
//! message is set against the CPU of one memcpy of the message in the same thread; the
//! sender's is reported beside it, because the kernel's delivery work (veth, bridge, the
//! receive path up to the socket or ring) runs in softirq under the sender's `sendmsg` here,
//! not in the receiver's thread. Every byte is compared with the sender's afterwards.
//!
//! Modes: `udp-none` / `ether-none` (a sender alone: nothing receives; its CPU is the
//! baseline of the delivery work), `udp-carrier` (the UDP carrier's `recv_batch`: `recvmmsg`
//! of 64 into its slots, then a copy), `udp-split` (`recvmmsg` with each payload's iovec
//! straight at its place in the buffer: one copy, the kernel's), `ether-packet` (the raw
//! socket's port: `recvmmsg` of 64, then a copy), `ether-carrier` (the raw Ethernet carrier's
//! `recv_batch` as it is), `ether-ring2` (the link's TPACKET_V2 ring, one slot per frame),
//! `ether-ring3` (a TPACKET_V3 ring: blocks of frames, no system call per frame),
//! `ether-xdp` (an AF_XDP socket on queue 0, `transport::mcast::xsk`: an XDP program
//! redirects the group's frames into its UMEM, read from its RX ring; named explicitly, not
//! part of `all`, as it needs CAP_BPF and an interface without another XDP program).

use super::usage::Usage;
use crate::CliResult;
use pipecast::transport::mcast::ether::{EtherCarrier, ETHERTYPE};
use pipecast::transport::mcast::ring3::Ring3;
use pipecast::transport::mcast::udp::{UdpCarrier, UdpConfig};
use pipecast::transport::mcast::xsk::{chunk_for, Xsk, XskConfig};
use pipecast::transport::mcast::{Batch, Carrier, Group, To};
use pipecast::transport::raweth::port::{PacketPort, Port};
use pipecast::transport::raweth::ring::RxRing;
use pipecast::transport::raweth::socket::{poll_fds, Addressed, RawSocket};
use serde::Serialize;
use std::os::fd::RawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bytes before a datagram's payload (a data frame's header).
const HEAD: usize = pipecast::wire::mcast::DATA_HEADER_LEN;
/// Bytes per chunk: what the receiver's socket or ring holds at once (1024 datagrams at an
/// MTU of 1500; fewer at a jumbo MTU, whose 1024 overflowed the socket).
const CHUNK_BYTES: usize = 1024 * 1500;

/// Datagrams of `seg` bytes per chunk.
fn chunk(seg: usize) -> usize {
    (CHUNK_BYTES / seg.max(1)).max(1)
}
/// Receive buffer asked for (forced where privileged) and ring size.
const RCVBUF: usize = 64 << 20;
/// Frames taken per call.
const BATCH: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    UdpNone,
    UdpCarrier,
    UdpSplit,
    EtherNone,
    EtherPacket,
    EtherCarrier,
    EtherRing2,
    EtherRing3,
    EtherXdp,
}

/// The modes of `all`; `ether-xdp` is named on its own (module docs).
const ALL: usize = 8;

const MODES: [(&str, Mode); 9] = [
    ("udp-none", Mode::UdpNone),
    ("udp-carrier", Mode::UdpCarrier),
    ("udp-split", Mode::UdpSplit),
    ("ether-none", Mode::EtherNone),
    ("ether-packet", Mode::EtherPacket),
    ("ether-carrier", Mode::EtherCarrier),
    ("ether-ring2", Mode::EtherRing2),
    ("ether-ring3", Mode::EtherRing3),
    ("ether-xdp", Mode::EtherXdp),
];

impl Mode {
    fn name(self) -> &'static str {
        MODES.iter().find(|(_, m)| *m == self).expect("listed").0
    }
    fn udp(self) -> bool {
        matches!(self, Mode::UdpNone | Mode::UdpCarrier | Mode::UdpSplit)
    }
    fn receives(self) -> bool {
        !matches!(self, Mode::UdpNone | Mode::EtherNone)
    }
}

/// Parses `MODES` (a comma list, or `all`).
fn parse_modes(s: &str) -> Result<Vec<Mode>, String> {
    if s == "all" {
        return Ok(MODES[..ALL].iter().map(|(_, m)| *m).collect());
    }
    s.split(',')
        .map(|w| {
            MODES
                .iter()
                .find(|(n, _)| *n == w.trim())
                .map(|(_, m)| *m)
                .ok_or_else(|| {
                    let names: Vec<_> = MODES.iter().map(|(n, _)| *n).collect();
                    format!("--floor: no mode {w:?} (modes: all, {})", names.join(", "))
                })
        })
        .collect()
}

/// What `--floor` runs.
pub struct Floor {
    pub modes: String,
    /// `SEND_NS,RECV_NS` (network namespaces), or none: both in this one.
    pub netns: Option<String>,
    pub iface: String,
    pub bytes: usize,
    pub reps: usize,
    pub json: bool,
}

/// One mode's result; CPU in µs per message.
#[derive(Serialize, Debug)]
struct Row {
    mode: &'static str,
    bytes: usize,
    segment: usize,
    datagrams: usize,
    /// The receiver's thread CPU per message: mean, min, max over repetitions.
    recv_cpu_us: [f64; 3],
    /// The sender's thread CPU per message (with the kernel's delivery work under it).
    send_cpu_us: [f64; 3],
    /// One memcpy of the message in the receiver's thread.
    memcpy_cpu_us: f64,
    /// `recv_cpu_us` over `memcpy_cpu_us`.
    recv_per_memcpy: [f64; 3],
    wall_us: f64,
    /// Datagrams whose header, length or place was wrong (dropped or moved).
    bad: u64,
    verified: bool,
}

/// Mean, min and max of `v`, rounded to 1/`scale`.
fn stats(v: &[f64], scale: f64) -> [f64; 3] {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = v.iter().cloned().fold(0.0, f64::max);
    let r = |x: f64| (x * scale).round() / scale;
    [r(mean), r(min), r(max)]
}

pub fn run(f: Floor) -> CliResult {
    let modes = parse_modes(&f.modes)?;
    let (send_ns, recv_ns) = match &f.netns {
        Some(s) => match s.split_once(',') {
            Some((a, b)) => (Some(a.to_string()), Some(b.to_string())),
            None => return Err("--floor-netns takes SEND_NS,RECV_NS".into()),
        },
        None => (None, None),
    };
    if f.bytes == 0 {
        return Err("--floor needs a message of at least 1 byte (--sizes)".into());
    }
    let mut rows = Vec::new();
    for mode in modes {
        let row = run_mode(mode, &f, send_ns.clone(), recv_ns.clone())
            .map_err(|e| format!("{}: {e}", mode.name()))?;
        if !f.json {
            eprintln!(
                "{:<14} recv {:>9.1} us ({:>6.1}-{:>6.1} x memcpy {:.1} us)  send {:>9.1} us  wall {:>8.0} us  bad {} verified {}",
                row.mode,
                row.recv_cpu_us[0],
                row.recv_per_memcpy[1],
                row.recv_per_memcpy[2],
                row.memcpy_cpu_us,
                row.send_cpu_us[0],
                row.wall_us,
                row.bad,
                row.verified
            );
        }
        rows.push(row);
    }
    if f.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        println!(
            "# pipecast bench --floor: {} bytes, {} repetitions, iface {}, netns {}; CPU per message, us (mean; min-max over repetitions)",
            f.bytes,
            f.reps,
            f.iface,
            f.netns.as_deref().unwrap_or("(this one)")
        );
        println!(
            "{:<14} {:>9} {:>22} {:>10} {:>22} {:>12} {:>5} {:>8}",
            "mode",
            "segment",
            "receiver us",
            "memcpy us",
            "receiver / memcpy",
            "sender us",
            "bad",
            "verified"
        );
        for r in &rows {
            println!(
                "{:<14} {:>9} {:>22} {:>10.1} {:>22} {:>12.1} {:>5} {:>8}",
                r.mode,
                r.segment,
                format!(
                    "{:.1} ({:.1}-{:.1})",
                    r.recv_cpu_us[0], r.recv_cpu_us[1], r.recv_cpu_us[2]
                ),
                r.memcpy_cpu_us,
                format!(
                    "{:.2} ({:.2}-{:.2})",
                    r.recv_per_memcpy[0], r.recv_per_memcpy[1], r.recv_per_memcpy[2]
                ),
                r.send_cpu_us[0],
                r.bad,
                r.verified
            );
        }
    }
    if rows.iter().any(|r| !r.verified) {
        return Err("a receiver's bytes differ from the sender's".into());
    }
    Ok(())
}

/// The message's bytes: a pattern no two segments share.
fn pattern(bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| (i as u64).wrapping_mul(0x9e37_79b9).rotate_right(13) as u8 ^ (i >> 11) as u8)
        .collect()
}

/// Datagram `idx`'s header: its index and the repetition.
fn header(idx: usize, rep: usize) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[..8].copy_from_slice(&(idx as u64).to_le_bytes());
    h[8..12].copy_from_slice(&(rep as u32).to_le_bytes());
    h
}

/// Where payloads land.
struct Landing {
    buf: Vec<u8>,
    landed: Vec<bool>,
    seg: usize,
    rep: usize,
    count: usize,
    bad: u64,
}

impl Landing {
    fn segment_len(&self, idx: usize) -> usize {
        self.seg.min(self.buf.len() - idx * self.seg)
    }

    /// The segment a header names, when it is of this repetition and within the message.
    fn index(&self, head: &[u8]) -> Option<usize> {
        let idx = u64::from_le_bytes(head.get(..8)?.try_into().ok()?) as usize;
        let rep = u32::from_le_bytes(head.get(8..12)?.try_into().ok()?) as usize;
        (rep == self.rep && idx < self.landed.len()).then_some(idx)
    }

    /// Lands one datagram (header, then payload), every length checked first.
    fn land(&mut self, frame: &[u8]) {
        let Some(idx) = frame.get(..HEAD).and_then(|h| self.index(h)) else {
            self.bad += 1;
            return;
        };
        let payload = &frame[HEAD..];
        if payload.len() != self.segment_len(idx) || self.landed[idx] {
            self.bad += 1;
            return;
        }
        let at = idx * self.seg;
        self.buf[at..at + payload.len()].copy_from_slice(payload);
        self.landed[idx] = true;
        self.count += 1;
    }
}

impl Landing {
    /// Lands one whole Ethernet frame from an AF_XDP socket, in one piece or several (a
    /// frame larger than a chunk): its EtherType looked at, its header read from the first
    /// piece, its payload copied piece by piece to its place, every length checked first.
    fn land_pieces(&mut self, pieces: &[&[u8]]) {
        const ETH: usize = 14;
        let first = pieces.first().copied().unwrap_or_default();
        if pieces.len() == 1 {
            match first.get(12..ETH) {
                Some(t) if t == ETHERTYPE.to_be_bytes() => return self.land(&first[ETH..]),
                _ => {
                    self.bad += 1;
                    return;
                }
            }
        }
        let idx = match first.get(12..ETH + HEAD) {
            Some(h) if h[..2] == ETHERTYPE.to_be_bytes() => self.index(&h[2..]),
            _ => None,
        };
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let Some(idx) =
            idx.filter(|&i| total - ETH - HEAD == self.segment_len(i) && !self.landed[i])
        else {
            self.bad += 1;
            return;
        };
        let mut at = idx * self.seg;
        for (k, piece) in pieces.iter().enumerate() {
            let body = if k == 0 { &piece[ETH + HEAD..] } else { piece };
            self.buf[at..at + body.len()].copy_from_slice(body);
            at += body.len();
        }
        self.landed[idx] = true;
        self.count += 1;
    }
}

enum Rx {
    None,
    Udp(UdpCarrier, Batch),
    Split(
        UdpCarrier,
        Vec<u8>,
        Vec<(usize, pipecast::transport::mcast::Source)>,
    ),
    Packet(PacketPort),
    Ether(EtherCarrier<PacketPort>, Batch),
    Ring2(RawSocket, RxRing),
    Ring3(RawSocket, Ring3),
    Xdp(Box<Xsk>),
}

impl Rx {
    fn fd(&self) -> Option<RawFd> {
        match self {
            Rx::None => None,
            Rx::Udp(c, _) | Rx::Split(c, _, _) => c.fds().first().copied(),
            Rx::Packet(p) => Some(p.fd()),
            Rx::Ether(c, _) => c.fds().first().copied(),
            Rx::Ring2(s, _) | Rx::Ring3(s, _) => Some(s.raw_fd()),
            Rx::Xdp(x) => Some(x.fd()),
        }
    }

    /// Takes what waits; how many datagrams it saw.
    fn take(&mut self, l: &mut Landing) -> std::io::Result<usize> {
        let ours = |l: &mut Landing, to: Addressed, cut: bool, bytes: &[u8]| {
            if to == Addressed::Us && !cut {
                l.land(bytes);
            } else {
                l.bad += 1;
            }
        };
        match self {
            Rx::None => Ok(0),
            Rx::Udp(c, batch) => {
                batch.clear();
                let n = c.recv_batch(batch)?;
                for i in 0..batch.len() {
                    l.land(batch.get(i).0);
                }
                Ok(n)
            }
            Rx::Split(c, heads, got) => take_split(c, heads, got, l),
            Rx::Packet(p) => p.receive(BATCH, &mut |(_, to, cut, b)| ours(l, to, cut, b)),
            Rx::Ether(c, batch) => {
                batch.clear();
                let n = c.recv_batch(batch)?;
                for i in 0..batch.len() {
                    l.land(batch.get(i).0);
                }
                Ok(n)
            }
            Rx::Ring2(_, r) => Ok(r.drain(4 * BATCH, |_, to, cut, b| ours(l, to, cut, b))),
            Rx::Ring3(_, r) => Ok(r.drain(4, |_, to, cut, b| ours(l, to, cut, b))),
            // Whole Ethernet frames, as the program redirected them (the group's MAC and
            // the carrier's EtherType); the header is skipped after a look at its type.
            Rx::Xdp(x) => Ok(x.drain(4 * BATCH, |pieces| l.land_pieces(pieces))),
        }
    }
}

/// `recvmmsg` with each payload's iovec at the next segments not landed yet; a datagram
/// whose header names another segment than the one it landed in is moved there (counted
/// as bad) and its own place posted again.
fn take_split(
    c: &mut UdpCarrier,
    heads: &mut [u8],
    got: &mut Vec<(usize, pipecast::transport::mcast::Source)>,
    l: &mut Landing,
) -> std::io::Result<usize> {
    let first = l.landed.iter().position(|d| !d).unwrap_or(l.landed.len());
    let mut posted = [0usize; BATCH];
    let mut bodies: Vec<&mut [u8]> = Vec::with_capacity(BATCH);
    let seg = l.seg;
    for (i, body) in l.buf[first * seg..].chunks_mut(seg).enumerate() {
        if bodies.len() == BATCH {
            break;
        }
        if !l.landed[first + i] {
            posted[bodies.len()] = first + i;
            bodies.push(body);
        }
    }
    let n = bodies.len();
    let lens: Vec<usize> = bodies.iter().map(|b| b.len()).collect();
    let r = c.recv_split(&mut heads[..n * HEAD], &mut bodies, got)?;
    drop(bodies);
    for (i, &(len, _)) in got.iter().enumerate().take(r) {
        let head = &heads[i * HEAD..(i + 1) * HEAD];
        let Some(idx) = l.index(head) else {
            l.bad += 1;
            continue;
        };
        let body = len.saturating_sub(HEAD);
        if len < HEAD || body > lens[i] || body != l.segment_len(idx) || l.landed[idx] {
            l.bad += 1;
            continue;
        }
        if idx != posted[i] {
            // Landed in another segment's place: moved to its own.
            l.bad += 1;
            let from = posted[i] * seg;
            l.buf.copy_within(from..from + body, idx * seg);
        }
        l.landed[idx] = true;
        l.count += 1;
    }
    Ok(r)
}

enum Tx {
    Udp(UdpCarrier),
    Ether(Box<EtherCarrier<PacketPort>>),
}

impl Tx {
    fn send(&mut self, head: &[u8], payload: &[u8]) -> std::io::Result<bool> {
        match self {
            Tx::Udp(c) => c.send(To::Group, head, payload),
            Tx::Ether(c) => c.send(To::Group, head, payload),
        }
    }
}

fn ipv4_of(iface: &str) -> Result<std::net::Ipv4Addr, String> {
    pipecast::transport::ifaddrs::ipv4_interfaces()
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|i| i.name == iface)
        .map(|i| i.addr)
        .ok_or_else(|| format!("no IPv4 address on {iface}"))
}

fn enter(ns: &Option<String>) -> Result<(), String> {
    match ns {
        Some(ns) => RawSocket::enter_netns(ns).map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

/// The segment a datagram of `mode` carries on `iface`: the carrier's, MTU less the headers.
fn segment(mode: Mode, mtu: usize) -> usize {
    if mode.udp() {
        mtu - 20 - 8 - HEAD
    } else {
        mtu - HEAD
    }
}

fn open_rx(mode: Mode, iface: &str, group: Group) -> Result<(Rx, usize), String> {
    let e = |e: pipecast::transport::TransportError| e.to_string();
    let raw = || -> Result<RawSocket, String> {
        let s =
            RawSocket::open_with(iface, pipecast::transport::mcast::ether::ETHERTYPE).map_err(e)?;
        s.add_membership(&group.mac).ok();
        if s.set_int(libc::SO_RCVBUFFORCE, RCVBUF as i32).is_err() {
            s.set_int(libc::SO_RCVBUF, RCVBUF as i32).ok();
        }
        Ok(s)
    };
    let udp = || -> Result<UdpCarrier, String> {
        let config = UdpConfig {
            rcvbuf: RCVBUF,
            ..UdpConfig::default()
        };
        UdpCarrier::open(group, ipv4_of(iface)?, config).map_err(e)
    };
    // The interface's MTU as this thread's namespace sees it (`/sys` may show another's);
    // loopback's 64 KiB counts as Ethernet's 1500.
    let mtu = if mode == Mode::EtherXdp {
        // Asked without a raw socket: AF_XDP's own error says what it lacks.
        pipecast::transport::mcast::xsk::interface(iface)
            .map_err(e)?
            .1
    } else {
        RawSocket::open_with(iface, 0x88B7).map_err(e)?.mtu()
    };
    let mtu = if iface == "lo" { mtu.min(1500) } else { mtu };
    Ok(match mode {
        Mode::UdpNone | Mode::EtherNone => (Rx::None, mtu),
        // Slots hold a whole datagram of the MTU (a shorter one truncates jumbo frames).
        Mode::UdpCarrier => (Rx::Udp(udp()?, Batch::new(BATCH, mtu + 64)), mtu),
        Mode::UdpSplit => (Rx::Split(udp()?, vec![0; BATCH * HEAD], Vec::new()), mtu),
        Mode::EtherPacket => (Rx::Packet(PacketPort::plain(raw()?, BATCH)), mtu),
        Mode::EtherCarrier => {
            let c = EtherCarrier::open(iface, group.mac).map_err(e)?;
            (Rx::Ether(c, Batch::new(BATCH, mtu + 64)), mtu)
        }
        Mode::EtherRing2 => {
            let s = raw()?;
            // Room for two chunks of frames in slots of the socket's MTU (64 KiB on lo).
            let slot = (s.mtu() + 128).next_power_of_two();
            let r = RxRing::new(&s, (2 * chunk(s.mtu()) * slot).min(256 << 20)).map_err(e)?;
            (Rx::Ring2(s, r), mtu)
        }
        Mode::EtherRing3 => {
            let s = raw()?;
            let r = Ring3::new(&s, 1 << 20, 16, 1).map_err(e)?;
            (Rx::Ring3(s, r), mtu)
        }
        Mode::EtherXdp => {
            // Room for a chunk of frames, each in as many UMEM chunks as it spans (behind
            // the kernel's headroom in each), rounded up to a power of two: 4 MiB at MTU
            // 1500 and 9000, about what the TPACKET_V2 ring of `ether-ring2` maps.
            let umem_chunk = chunk_for(mtu);
            let pieces = (mtu + 14).div_ceil(umem_chunk - 256);
            let config = XskConfig {
                frames: (pieces * chunk(mtu - HEAD)).next_power_of_two() as u32,
                chunk: Some(umem_chunk as u32),
                ..XskConfig::carrier(vec![group.mac])
            };
            let x = Xsk::open(iface, &config).map_err(e)?;
            eprintln!(
                "ether-xdp: AF_XDP on {iface} queue 0, {} mode, XDP program attached {:?}, {} chunks of {} bytes",
                if x.zero_copy() { "zero-copy" } else { "copy" },
                x.attach_mode(),
                config.frames,
                x.chunk()
            );
            (Rx::Xdp(Box::new(x)), mtu)
        }
    })
}

fn open_tx(mode: Mode, iface: &str, group: Group, loopback: bool) -> Result<Tx, String> {
    let e = |e: pipecast::transport::TransportError| e.to_string();
    if mode.udp() {
        let config = UdpConfig {
            join: false,
            loopback,
            ..UdpConfig::default()
        };
        Ok(Tx::Udp(
            UdpCarrier::open(group, ipv4_of(iface)?, config).map_err(e)?,
        ))
    } else {
        Ok(Tx::Ether(Box::new(
            EtherCarrier::open(iface, group.mac).map_err(e)?,
        )))
    }
}

fn run_mode(
    mode: Mode,
    f: &Floor,
    send_ns: Option<String>,
    recv_ns: Option<String>,
) -> Result<Row, String> {
    let bytes = f.bytes;
    let reps = f.reps.max(1);
    let iface = f.iface.clone();
    let same_ns = send_ns == recv_ns;
    let cookie = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let group = Group::of(cookie);
    // The receiver says it is ready with the segment; chunks go one way, acks the other.
    let (ready_tx, ready_rx) = mpsc::channel::<Result<usize, String>>();
    let (chunk_tx, chunk_rx) = mpsc::channel::<usize>();
    let (ack_tx, ack_rx) = mpsc::channel::<()>();
    let riface = iface.clone();
    let receiver = std::thread::spawn(
        move || -> Result<(Vec<f64>, f64, u64, bool, usize), String> {
            let opened = enter(&recv_ns).and_then(|()| open_rx(mode, &riface, group));
            let (mut rx, mtu) = match opened {
                Ok(o) => o,
                Err(e) => {
                    ready_tx.send(Err(e.clone())).ok();
                    return Err(e);
                }
            };
            let seg = segment(mode, mtu);
            let n = bytes.div_ceil(seg);
            let mut l = Landing {
                buf: vec![0; bytes],
                landed: vec![false; n],
                seg,
                rep: 0,
                count: 0,
                bad: 0,
            };
            // One memcpy of the message in this thread, into a buffer already touched.
            let src = pattern(bytes);
            let mut dst = vec![1u8; bytes];
            let c0 = Usage::thread_cpu_ns();
            for _ in 0..5 {
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&mut dst);
            }
            let memcpy = Usage::thread_cpu_ns().saturating_sub(c0) as f64 / 5000.0;
            ready_tx.send(Ok(seg)).ok();
            let mut cpu = Vec::new();
            let mut verified = true;
            for rep in 0..reps {
                l.buf.fill(0);
                l.landed.fill(false);
                (l.rep, l.count) = (rep, 0);
                let c0 = Usage::thread_cpu_ns();
                let mut sent = 0;
                while sent < n {
                    sent = chunk_rx
                        .recv_timeout(Duration::from_secs(30))
                        .map_err(|_| "the sender stopped".to_string())?;
                    let want = if mode.receives() { sent } else { 0 };
                    let mut quiet = Instant::now();
                    while l.count < want {
                        if rx.take(&mut l).map_err(|e| e.to_string())? > 0 {
                            quiet = Instant::now();
                            continue;
                        }
                        if quiet.elapsed() > Duration::from_secs(5) {
                            return Err(format!(
                                "{} of {want} datagrams arrived ({} bad): lost",
                                l.count, l.bad
                            ));
                        }
                        if let Some(fd) = rx.fd() {
                            poll_fds(&[(fd, false)], Duration::from_millis(100), None)
                                .map_err(|e| e.to_string())?;
                        }
                    }
                    ack_tx.send(()).ok();
                }
                cpu.push(Usage::thread_cpu_ns().saturating_sub(c0) as f64 / 1000.0);
                if mode.receives() {
                    verified &= l.buf == src;
                }
            }
            Ok((cpu, memcpy, l.bad, verified, seg))
        },
    );
    let sender = std::thread::spawn(move || -> Result<(Vec<f64>, f64), String> {
        let seg = ready_rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "the receiver did not start".to_string())??;
        enter(&send_ns)?;
        let mut tx = open_tx(mode, &iface, group, same_ns)?;
        let src = pattern(bytes);
        let n = bytes.div_ceil(seg);
        let mut cpu = Vec::new();
        let t0 = Instant::now();
        for rep in 0..reps {
            let c0 = Usage::thread_cpu_ns();
            let mut idx = 0;
            while idx < n {
                let end = (idx + chunk(seg)).min(n);
                while idx < end {
                    let at = idx * seg;
                    let payload = &src[at..(at + seg).min(bytes)];
                    if tx
                        .send(&header(idx, rep), payload)
                        .map_err(|e| e.to_string())?
                    {
                        idx += 1;
                    } else {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                chunk_tx
                    .send(idx)
                    .map_err(|_| "the receiver stopped".to_string())?;
                ack_rx
                    .recv_timeout(Duration::from_secs(30))
                    .map_err(|_| "the receiver stopped".to_string())?;
            }
            cpu.push(Usage::thread_cpu_ns().saturating_sub(c0) as f64 / 1000.0);
        }
        Ok((cpu, t0.elapsed().as_secs_f64() * 1e6 / reps as f64))
    });
    let r = receiver.join().map_err(|_| "the receiver panicked")?;
    let s = sender.join().map_err(|_| "the sender panicked")?;
    let (scpu, wall, rcpu, memcpy, bad, verified, seg) = match (s, r) {
        (Ok((scpu, wall)), Ok((rcpu, memcpy, bad, verified, seg))) => {
            (scpu, wall, rcpu, memcpy, bad, verified, seg)
        }
        (Err(e), Ok(_)) => return Err(format!("sender: {e}")),
        (Ok(_), Err(e)) => return Err(format!("receiver: {e}")),
        (Err(s), Err(r)) => return Err(format!("sender: {s}; receiver: {r}")),
    };
    let ratio: Vec<f64> = rcpu.iter().map(|c| c / memcpy.max(1e-3)).collect();
    Ok(Row {
        mode: mode.name(),
        bytes,
        segment: seg,
        datagrams: bytes.div_ceil(seg),
        recv_cpu_us: stats(&rcpu, 10.0),
        send_cpu_us: stats(&scpu, 10.0),
        memcpy_cpu_us: (memcpy * 10.0).round() / 10.0,
        recv_per_memcpy: stats(&ratio, 100.0),
        wall_us: wall.round(),
        bad,
        verified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_land_in_place_and_wrong_ones_are_refused() {
        let bytes = 10;
        let mut l = Landing {
            buf: vec![0; bytes],
            landed: vec![false; 3],
            seg: 4,
            rep: 1,
            count: 0,
            bad: 0,
        };
        let frame = |idx: usize, rep: usize, p: &[u8]| [&header(idx, rep)[..], p].concat();
        l.land(&frame(2, 1, b"ij"));
        l.land(&frame(0, 1, b"abcd"));
        l.land(&frame(0, 1, b"abcd")); // twice
        l.land(&frame(1, 0, b"efgh")); // another repetition's
        l.land(&frame(1, 1, b"efg")); // short
        l.land(&frame(3, 1, b"xxxx")); // past the message
        l.land(&header(1, 1)[..8]); // no whole header
        assert_eq!((l.count, l.bad), (2, 5));
        l.land(&frame(1, 1, b"efgh"));
        assert_eq!(l.count, 3);
        assert_eq!(&l.buf, b"abcdefghij");
    }

    #[test]
    fn frames_in_pieces_land_in_place_and_wrong_ones_are_refused() {
        let mut l = Landing {
            buf: vec![0; 10],
            landed: vec![false; 3],
            seg: 4,
            rep: 0,
            count: 0,
            bad: 0,
        };
        let mut eth = [0u8; 14];
        eth[12..].copy_from_slice(&ETHERTYPE.to_be_bytes());
        let frame = |idx: usize, p: &[u8]| [&eth[..], &header(idx, 0)[..], p].concat();
        // One piece; the header and part of the payload, then the rest in two more.
        l.land_pieces(&[&frame(2, b"ij")]);
        let f = frame(0, b"abcd");
        l.land_pieces(&[&f[..47], &f[47..48], &f[48..]]);
        let f = frame(1, b"efg"); // short, in pieces
        l.land_pieces(&[&f[..46], &f[46..]]);
        let mut other = frame(1, b"efgh");
        other[12] = 0x08; // another EtherType
        l.land_pieces(&[&other]);
        l.land_pieces(&[&other[..46], &other[46..]]);
        l.land_pieces(&[&f[..20], &f[20..]]); // the header split: refused
        l.land_pieces(&[]);
        assert_eq!((l.count, l.bad), (2, 5));
        let f = frame(1, b"efgh");
        l.land_pieces(&[&f[..46], &f[46..]]);
        assert_eq!(l.count, 3);
        assert_eq!(&l.buf, b"abcdefghij");
    }

    #[test]
    fn modes_parse_by_name() {
        assert_eq!(parse_modes("all").unwrap().len(), ALL);
        assert!(!parse_modes("all").unwrap().contains(&Mode::EtherXdp));
        assert_eq!(parse_modes("ether-xdp").unwrap(), [Mode::EtherXdp]);
        assert_eq!(
            parse_modes("udp-split,ether-ring3").unwrap(),
            [Mode::UdpSplit, Mode::EtherRing3]
        );
        assert!(parse_modes("udp-nope").unwrap_err().contains("udp-split"));
    }
}
