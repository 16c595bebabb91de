//! An `AF_PACKET` datagram socket for one EtherType on one interface, with batched
//! `sendmmsg`/`recvmmsg` (DEPS.md: 266k frames/s with a 4 MiB receive buffer, no loss; the
//! default buffer loses most frames at line rate). The kernel writes the Ethernet header
//! (`SOCK_DGRAM`); frames go to a MAC address, and only our EtherType arrives.
//!
//! Needs `CAP_NET_RAW`; without it opening fails with an error that says so.
//!
//! Each socket takes only its rank's frames: [`RawSocket::set_rank_filter`] attaches
//! [`super::filter`]'s program.

use crate::transport::TransportError;
use std::ffi::CString;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Local experimental EtherType (IEEE 802 "local experimental 1").
pub const ETHERTYPE: u16 = 0x88B5;
/// Receive buffer asked for (DEPS.md: ≥ 4 MiB keeps line-rate bursts).
pub const RCVBUF: usize = 4 << 20;

pub use crate::wire::frame::Mac;

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn mac_to_string(mac: &Mac) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<Mac> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in mac.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Whether this process has `CAP_NET_RAW` in its effective set (bit 13 of `CapEff` in
/// `/proc/self/status`); `false` when that cannot be read.
pub fn has_cap_net_raw() -> bool {
    const CAP_NET_RAW: u32 = 13;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps >> CAP_NET_RAW & 1 == 1)
}

/// The interface for raw Ethernet when none is named: the one holding `ip` (the address
/// that reaches the rendezvous) unless that is loopback, else the first non-loopback
/// interface with an address. `None` when there is none.
pub fn default_interface(ip: Option<std::net::IpAddr>) -> Option<String> {
    let all = crate::transport::ifaddrs::ipv4_interfaces().ok()?;
    all.iter()
        .find(|i| !i.loopback && ip == Some(std::net::IpAddr::V4(i.addr)))
        .or_else(|| all.iter().find(|i| !i.loopback))
        .map(|i| i.name.clone())
}

/// The non-loopback interface holding address `ip` (a rail's NIC, found by the address its
/// TCP side listens on), if any.
pub fn interface_with(ip: std::net::Ipv4Addr) -> Option<String> {
    let all = crate::transport::ifaddrs::ipv4_interfaces().ok()?;
    all.into_iter()
        .find(|i| !i.loopback && i.addr == ip)
        .map(|i| i.name)
}

/// One packet socket bound to an interface and [`ETHERTYPE`].
#[derive(Debug)]
pub struct RawSocket {
    fd: OwnedFd,
    ifindex: i32,
    ethertype: u16,
    mac: Mac,
    mtu: usize,
    ifname: String,
}

fn setup(what: String, e: io::Error) -> TransportError {
    let error = if e.raw_os_error() == Some(libc::EPERM) {
        format!("{e}: raw Ethernet needs the CAP_NET_RAW capability (run as root or `setcap cap_net_raw+ep` the binary)")
    } else {
        e.to_string()
    };
    TransportError::Setup { what, error }
}

impl RawSocket {
    /// Opens a non-blocking packet socket on interface `ifname` in this thread's network
    /// namespace.
    pub fn open(ifname: &str) -> Result<RawSocket, TransportError> {
        Self::open_with(ifname, ETHERTYPE)
    }

    /// [`RawSocket::open`] for frames of `ethertype` (the multicast carrier's is 0x88B6).
    pub fn open_with(ifname: &str, ethertype: u16) -> Result<RawSocket, TransportError> {
        let what = || format!("raw Ethernet socket on interface {ifname:?}");
        let name = CString::new(ifname).map_err(|_| TransportError::Setup {
            what: what(),
            error: "interface name contains a NUL byte".into(),
        })?;
        if ifname.len() >= libc::IFNAMSIZ {
            return Err(TransportError::Setup {
                what: what(),
                error: format!("interface names have fewer than {} bytes", libc::IFNAMSIZ),
            });
        }
        let proto = i32::from(ethertype.to_be());
        // SAFETY: plain system call with constant arguments; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto,
            )
        };
        if fd < 0 {
            return Err(setup(what(), io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `name` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(TransportError::Setup {
                what: what(),
                error: format!("no interface named {ifname:?} here (see `ip link`)"),
            });
        }
        // SAFETY: an all-zero ifreq is valid; the name is copied in below (shorter than
        // IFNAMSIZ, checked above, so it stays NUL-terminated).
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
            *d = *s as libc::c_char;
        }
        // SAFETY: SIOCGIFHWADDR writes one sockaddr into the ifreq we own.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } < 0 {
            return Err(setup(what(), io::Error::last_os_error()));
        }
        // SAFETY: after SIOCGIFHWADDR the union holds `ifru_hwaddr`.
        let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
        let mut mac = [0u8; 6];
        for (d, s) in mac.iter_mut().zip(hw.sa_data.iter()) {
            *d = *s as u8;
        }
        // SAFETY: SIOCGIFMTU writes an int into the ifreq we own.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
            return Err(setup(what(), io::Error::last_os_error()));
        }
        // SAFETY: after SIOCGIFMTU the union holds `ifru_mtu`.
        let mtu = unsafe { req.ifr_ifru.ifru_mtu }.max(0) as usize;
        // SAFETY: an all-zero sockaddr_ll is valid; we fill family, protocol and index.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(setup(what(), io::Error::last_os_error()));
        }
        let sock = RawSocket {
            fd,
            ifindex,
            ethertype,
            mac,
            mtu,
            ifname: ifname.to_string(),
        };
        // Root may exceed rmem_max (SO_RCVBUFFORCE); others get what rmem_max allows.
        if sock.set_int(libc::SO_RCVBUFFORCE, RCVBUF as i32).is_err() {
            sock.set_int(libc::SO_RCVBUF, RCVBUF as i32).ok();
        }
        Ok(sock)
    }

    /// Moves the calling thread into network namespace `netns` (a name under /var/run/netns
    /// or a path); sockets it opens afterwards live there. Needs CAP_SYS_ADMIN.
    pub fn enter_netns(netns: &str) -> Result<(), TransportError> {
        let path = if netns.contains('/') {
            netns.to_string()
        } else {
            format!("/var/run/netns/{netns}")
        };
        let what = || format!("enter network namespace {path}");
        let file = std::fs::File::open(&path).map_err(|e| setup(what(), e))?;
        // SAFETY: setns on an open namespace file; it changes only this thread's network
        // namespace.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
            return Err(setup(what(), io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Opens the socket inside network namespace `netns` (a name under /var/run/netns or a
    /// path), from a short-lived thread: the socket stays in that namespace, the calling
    /// thread does not move. Needs CAP_SYS_ADMIN as well.
    pub fn open_in_netns(netns: &str, ifname: &str) -> Result<RawSocket, TransportError> {
        let (netns_owned, ifname) = (netns.to_string(), ifname.to_string());
        std::thread::spawn(move || -> Result<RawSocket, TransportError> {
            RawSocket::enter_netns(&netns_owned)?;
            RawSocket::open(&ifname)
        })
        .join()
        .map_err(|_| TransportError::Setup {
            what: format!("open a socket in network namespace {netns}"),
            error: "the helper thread panicked".into(),
        })?
    }

    /// Frames the kernel dropped on this socket since the last call because its receive
    /// buffer (or ring) was full (`PACKET_STATISTICS`, which resets on read).
    pub fn take_kernel_drops(&self) -> io::Result<u64> {
        let mut stats = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `stats` is a live tpacket_stats and `len` holds its size; the kernel
        // writes at most `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut stats as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(stats.tp_drops))
    }

    /// Sets an `SOL_SOCKET` integer option (e.g. `SO_SNDBUF`).
    pub fn set_int(&self, option: i32, value: i32) -> io::Result<()> {
        // SAFETY: `value` is a live int of the size passed.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                &value as *const i32 as *const libc::c_void,
                std::mem::size_of::<i32>() as u32,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Sets an `SOL_PACKET` option from raw bytes (ring setup).
    pub(crate) fn set_packet_opt(&self, option: i32, value: &[u8]) -> io::Result<()> {
        // SAFETY: `value` is a live byte slice of the length passed.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                option,
                value.as_ptr() as *const libc::c_void,
                value.len() as u32,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Receives frames sent to the group MAC address `group` as well
    /// (`PACKET_ADD_MEMBERSHIP`, `PACKET_MR_MULTICAST`: the interface then accepts that
    /// address, as a NIC that filters multicast must be told; a bridge or veth floods such
    /// frames anyway).
    pub fn add_membership(&self, group: &Mac) -> io::Result<()> {
        let mut mreq = libc::packet_mreq {
            mr_ifindex: self.ifindex,
            mr_type: libc::PACKET_MR_MULTICAST as u16,
            mr_alen: 6,
            mr_address: [0; 8],
        };
        mreq.mr_address[..6].copy_from_slice(group);
        // SAFETY: `mreq` is a live packet_mreq of the size passed; the kernel only reads it.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mreq as *const libc::packet_mreq as *const libc::c_void,
                std::mem::size_of::<libc::packet_mreq>() as u32,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Accepts only frames for rank `rank` from now on ([`super::filter::rank_filter`];
    /// attaching again replaces the filter).
    pub fn set_rank_filter(&self, rank: u32) -> io::Result<()> {
        let mut program = super::filter::rank_filter(rank);
        let prog = libc::sock_fprog {
            len: program.len() as u16,
            filter: program.as_mut_ptr(),
        };
        // SAFETY: `prog` points at `program.len()` live instructions for the call; the kernel
        // copies (and checks) the program before it returns.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                &prog as *const libc::sock_fprog as *const libc::c_void,
                std::mem::size_of::<libc::sock_fprog>() as u32,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Reads an `SOL_SOCKET` integer option.
    pub fn get_int(&self, option: i32) -> io::Result<i32> {
        int_option(self.fd.as_raw_fd(), libc::SOL_SOCKET, option)
    }

    pub fn mac(&self) -> Mac {
        self.mac
    }
    pub fn mtu(&self) -> usize {
        self.mtu
    }
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    fn dest(&self, mac: &Mac) -> libc::sockaddr_ll {
        // SAFETY: an all-zero sockaddr_ll is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = self.ethertype.to_be();
        sll.sll_ifindex = self.ifindex;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(mac);
        sll
    }

    /// Sends frames (each a destination and the slices of its Ethernet payload) with one
    /// `sendmmsg`; returns how many went out (fewer when the send buffer is full).
    pub fn send_batch(&self, frames: &[(Mac, [IoSlice<'_>; 2])]) -> io::Result<usize> {
        if frames.is_empty() {
            return Ok(0);
        }
        let mut dests: Vec<libc::sockaddr_ll> = frames.iter().map(|f| self.dest(&f.0)).collect();
        let mut msgs: Vec<libc::mmsghdr> = frames
            .iter()
            .zip(dests.iter_mut())
            .map(|(f, d)| {
                // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = d as *mut libc::sockaddr_ll as *mut libc::c_void;
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                // IoSlice is ABI-compatible with iovec on Unix; sendmmsg only reads them.
                m.msg_hdr.msg_iov = f.1.as_ptr() as *mut libc::iovec;
                m.msg_hdr.msg_iovlen = 2;
                m
            })
            .collect();
        // SAFETY: `msgs` holds `msgs.len()` headers whose names and iovecs borrow `dests`
        // and `frames`, both alive for the call.
        let n = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as u32,
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Receives up to `batch.capacity()` frames without blocking; returns how many.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let cap = batch.bufs.len();
        let mut iovs: Vec<libc::iovec> = batch
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = (0..cap)
            .map(|i| {
                // SAFETY: an all-zero mmsghdr is valid.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = &mut batch.from[i] as *mut libc::sockaddr_ll as *mut _;
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                m.msg_hdr.msg_iov = &mut iovs[i];
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: each header points at one live buffer of its stated length and one live
        // sockaddr_ll, all owned by `batch`/`iovs` for the duration of the call.
        let n = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                cap as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        for (i, m) in msgs.iter().take(n).enumerate() {
            // A frame longer than the buffer is truncated: MSG_TRUNC in msg_flags. Its true
            // length is then larger than the buffer; keep the buffer's length and let the
            // frame check reject it.
            batch.lens[i] = (m.msg_len as usize).min(batch.bufs[i].len());
            batch.truncated[i] = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        }
        batch.n = n;
        Ok(n)
    }

    /// Waits up to `ms` for the socket to become readable (or writable, if asked).
    pub fn poll(&self, writable: bool, ms: i32, wake: Option<RawFd>) -> io::Result<(bool, bool)> {
        let wait = std::time::Duration::from_millis(ms.max(0) as u64);
        let ready = poll_fds(&[(self.raw_fd(), writable)], wait, wake)?;
        Ok(ready[0])
    }
}

/// Waits up to `ms` for any of `socks` (a socket's or [`Port`](super::port::Port)'s
/// descriptor) to become readable (or writable, for those asked with `true`), or for `wake`;
/// returns (readable, writable) for each, in order.
pub fn poll_fds(
    socks: &[(RawFd, bool)],
    wait: std::time::Duration,
    wake: Option<RawFd>,
) -> io::Result<Vec<(bool, bool)>> {
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|&(fd, writable)| libc::pollfd {
            fd,
            events: libc::POLLIN | if writable { libc::POLLOUT } else { 0 },
            revents: 0,
        })
        .collect();
    fds.push(libc::pollfd {
        fd: wake.unwrap_or(-1),
        events: libc::POLLIN,
        revents: 0,
    });
    // The caller's descriptors are open for the call (a closed one would only report
    // POLLNVAL) and the wake descriptor (if any) outlives it (the progress thread owns it).
    // Interrupted: nothing ready (every revents stays 0).
    crate::transport::poll::poll(&mut fds, wait)?;
    Ok(fds[..socks.len()]
        .iter()
        .map(|f| {
            (
                f.revents & (libc::POLLIN | libc::POLLERR) != 0,
                f.revents & libc::POLLOUT != 0,
            )
        })
        .collect())
}

/// Buffers for one `recvmmsg`.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    from: Vec<libc::sockaddr_ll>,
    n: usize,
}

/// How a received frame was addressed (`sll_pkttype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressed {
    /// To this interface's MAC (or broadcast/multicast).
    Us,
    /// To another host (a bridge flooding unknown unicast; veth does not filter): not ours.
    OtherHost,
}

impl RecvBatch {
    /// `count` frames of up to `frame` bytes each.
    pub fn new(count: usize, frame: usize) -> RecvBatch {
        RecvBatch {
            bufs: vec![vec![0; frame]; count.max(1)],
            lens: vec![0; count.max(1)],
            truncated: vec![false; count.max(1)],
            // SAFETY: an all-zero sockaddr_ll is valid.
            from: vec![unsafe { std::mem::zeroed() }; count.max(1)],
            n: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// Frames of the last receive: (source MAC, addressing, was it cut short, bytes).
    /// Frames we sent ourselves (seen by packet taps) are left out.
    pub fn frames(&self) -> impl Iterator<Item = (Mac, Addressed, bool, &[u8])> {
        (0..self.n).filter_map(move |i| {
            let f = &self.from[i];
            if f.sll_pkttype == libc::PACKET_OUTGOING {
                return None;
            }
            let to = if f.sll_pkttype == libc::PACKET_OTHERHOST {
                Addressed::OtherHost
            } else {
                Addressed::Us
            };
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&f.sll_addr[..6]);
            Some((mac, to, self.truncated[i], &self.bufs[i][..self.lens[i]]))
        })
    }
}

/// Reads the integer socket option `level`/`name` of `fd` (also the multicast carriers').
pub(crate) fn int_option(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut value = 0i32;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live and sized for an int; the kernel writes at most
    // `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut value as *mut i32 as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_text_round_trip() {
        let mac = [0x02, 0, 0xab, 0x10, 0xff, 7];
        assert_eq!(mac_to_string(&mac), "02:00:ab:10:ff:07");
        assert_eq!(parse_mac("02:00:ab:10:ff:07"), Some(mac));
        assert_eq!(parse_mac("02:00:ab:10:ff"), None);
        assert_eq!(parse_mac("02:00:ab:10:ff:07:01"), None);
        assert_eq!(parse_mac("zz:00:ab:10:ff:07"), None);
    }

    #[test]
    fn a_missing_interface_is_a_clear_error() {
        match RawSocket::open("pcrw-nosuch0") {
            Err(e) => {
                let s = e.to_string();
                assert!(s.contains("pcrw-nosuch0"), "{s}");
                assert!(
                    s.contains("no interface") || s.contains("CAP_NET_RAW"),
                    "{s}"
                );
            }
            Ok(_) => panic!("opened a socket on an interface that does not exist"),
        }
    }
}
