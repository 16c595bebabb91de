//! A receive-only AF_PACKET socket for LLDP frames (EtherType 0x88cc): how a rank without its
//! own lldpd learns the switch and port it is plugged into. One frame per second per port is
//! all it handles, so plain `recvfrom` suffices (DEPS.md: pnet or a small socket of our own).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

const ETH_P_LLDP: u16 = 0x88cc;
const LLDP_GROUP: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];

/// A raw socket receiving LLDP frames on every interface.
#[derive(Debug)]
pub struct LldpSocket {
    fd: OwnedFd,
}

/// A received frame: the bytes and the interface index it came in on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub frame: Vec<u8>,
    pub ifindex: u32,
}

impl LldpSocket {
    /// Opens the socket (needs CAP_NET_RAW) and joins the LLDP group address on each of
    /// `ifindexes` (NICs filter multicast; veths do not).
    pub fn open(ifindexes: &[u32]) -> io::Result<LldpSocket> {
        // SAFETY: plain socket(2) call; the returned descriptor is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_LLDP.to_be()),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh, valid descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        for &ifindex in ifindexes {
            let mut mreq: libc::packet_mreq =
                // SAFETY: packet_mreq is plain old data; all-zero is a valid value.
                unsafe { std::mem::zeroed() };
            mreq.mr_ifindex = ifindex as i32;
            mreq.mr_type = libc::PACKET_MR_MULTICAST as u16;
            mreq.mr_alen = 6;
            mreq.mr_address[..6].copy_from_slice(&LLDP_GROUP);
            // SAFETY: valid descriptor; the option value points to a live packet_mreq of the
            // size passed.
            let rc = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_ADD_MEMBERSHIP,
                    (&mreq as *const libc::packet_mreq).cast(),
                    std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
                )
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(LldpSocket { fd })
    }

    /// Waits up to `timeout` for one frame.
    pub fn recv(&self, timeout: Duration) -> io::Result<Option<Received>> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd, count 1.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if rc == 0 {
                continue;
            }
            let mut buf = vec![0u8; 9216];
            // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: buffer and address pointers are valid for the sizes passed.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) {
                    continue;
                }
                return Err(e);
            }
            // Frames we send ourselves show up as PACKET_OUTGOING: not a neighbour's.
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            buf.truncate(n as usize);
            return Ok(Some(Received {
                frame: buf,
                ifindex: from.sll_ifindex as u32,
            }));
        }
    }
}

/// Ethernet interfaces of this network namespace that are up: (name, ifindex), by name.
/// Read from /sys/class/net (type 1 = Ethernet; loopback excluded).
pub fn ethernet_interfaces() -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        return out;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).unwrap_or_default();
        let is_ether = read("type").trim() == "1";
        let up = u32::from_str_radix(read("flags").trim().trim_start_matches("0x"), 16)
            .is_ok_and(|f| f & 1 == 1);
        if name != "lo" && is_ether && up {
            if let Ok(index) = read("ifindex").trim().parse() {
                out.push((name, index));
            }
        }
    }
    out.sort();
    out
}
