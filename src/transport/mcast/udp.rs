//! UDP/IP multicast: the job's group address and port ([`Group`]) joined with IGMP on one
//! interface; no privilege needed.
//!
//! Two non-blocking sockets per rank:
//! - the *group socket*, bound to the group address and port (so only this group's datagrams
//!   reach it, whatever other sockets of the host joined; `IP_MULTICAST_ALL` off as well),
//!   joined on the chosen interface (`IP_ADD_MEMBERSHIP`, which sends the IGMP report a
//!   snooping switch needs);
//! - the *unicast socket*, bound to the interface's address on a port of the kernel's choice:
//!   group frames leave from it (`IP_MULTICAST_IF` the interface — without it, or a route for
//!   224.0.0.0/4, the kernel has no way to the group —, `IP_MULTICAST_TTL` from the settings,
//!   default 1: the group stays on the local network; `IP_MULTICAST_LOOP` off: the sender does
//!   not get its own frames back), and repairs, NACKs and reports go to and arrive at it.
//!   Every frame of rank r thus comes from r's unicast address, which [`Carrier::is_rank`]
//!   checks.
//!
//! Receive buffers: as large as the kernel allows (a burst of group frames arrives at the
//! speed of the root's link): `SO_RCVBUFFORCE` when privileged, else `SO_RCVBUF` up to
//! `net.core.rmem_max`; the size the kernel gave is read back ([`UdpCarrier::rcvbuf`]).
//!
//! Ranks of one host: with [`UdpConfig::loopback`] (the communicator sets it at ranks that share
//! their host with another rank) the kernel copies a group frame to the host's own members too,
//! the sender's group socket included: a receiver drops frames whose `from` is itself. Without
//! it a rank does not receive the group frames of a root on its own host.
//!
//! Group frames in runs: [`Carrier::send_group`] hands the kernel up to 64 equal-length
//! frames with one `sendmsg(2)` and UDP GSO (`UDP_SEGMENT`), which cuts them into the same
//! datagrams one call per frame would send; a kernel that refuses GSO gets one call per frame.
//!
//! Segment size: a datagram must fit the interface's MTU unfragmented (a lost fragment loses
//! the whole datagram): [`UdpCarrier::max_payload`], MTU − 20 (IP) − 8 (UDP) − the data
//! frame's header (32 bytes).

use super::{Batch, Carrier, Group, Source, To};
use crate::transport::TransportError;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// How to open the carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpConfig {
    /// `IP_MULTICAST_TTL`: 1 keeps the group on the local network; more crosses routers.
    pub ttl: u32,
    /// The receive buffer asked for (bytes).
    pub rcvbuf: usize,
    /// Join the group (off only in tests: a rank that did not join).
    pub join: bool,
    /// `IP_MULTICAST_LOOP`: group frames reach this host's own members (ranks sharing a host).
    pub loopback: bool,
}

impl Default for UdpConfig {
    fn default() -> UdpConfig {
        UdpConfig {
            ttl: 1,
            rcvbuf: 8 << 20,
            join: true,
            loopback: false,
        }
    }
}

/// One rank's UDP multicast carrier.
#[derive(Debug)]
pub struct UdpCarrier {
    group: Group,
    iface: Ipv4Addr,
    grp: UdpSocket,
    uni: UdpSocket,
    local: SocketAddrV4,
    peers: Vec<SocketAddrV4>,
    rcvbuf: usize,
    /// The interface's MTU (1500 when it cannot be read).
    mtu: usize,
    /// `recvmmsg(2)`'s arrays.
    mmsg: Mmsg,
    /// Whether group frames may still leave several to one `sendmsg(2)` with UDP GSO
    /// ([`send_gso`]); off for good once the kernel refused it.
    gso: bool,
}

/// Datagrams one `recvmmsg(2)` takes at most.
const MMSG: usize = 64;

/// The arrays one `recvmmsg(2)` fills, kept from call to call: zeroing them (~5 KB) on every
/// call was a measurable part of a receiving rank's round (docs/multicast.md, "Receivers'
/// CPU"). Only the entries a call passes are written before it.
struct Mmsg {
    names: Box<[libc::sockaddr_in; MMSG]>,
    iovs: Box<[libc::iovec; MMSG]>,
    msgs: Box<[libc::mmsghdr; MMSG]>,
    /// Two iovecs per datagram for [`UdpCarrier::recv_split`].
    split: Box<[[libc::iovec; 2]; MMSG]>,
}

// SAFETY: the raw pointers inside `iovs` and `msgs` are scratch written before every call and
// never followed outside `recv_mmsg` (which sets them to memory it borrows for the call).
unsafe impl Send for Mmsg {}

impl std::fmt::Debug for Mmsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mmsg")
    }
}

impl Mmsg {
    fn new() -> Mmsg {
        // SAFETY: all-zero sockaddr_in, iovec and mmsghdr are valid values (null pointers,
        // zero lengths); every entry a call uses is filled before it.
        unsafe {
            Mmsg {
                names: Box::new(std::mem::zeroed()),
                iovs: Box::new(std::mem::zeroed()),
                msgs: Box::new(std::mem::zeroed()),
                split: Box::new(std::mem::zeroed()),
            }
        }
    }
}

/// `recvmmsg(2)` of up to `n` datagrams into `msgs[..n]` without blocking: how many came
/// (0 when none was waiting or a signal came first).
///
/// # Safety
/// Every name, iovec and buffer the headers `msgs[..n]` point at must be alive, writable for
/// the lengths given and not otherwise borrowed during the call.
unsafe fn recvmmsg_now(fd: RawFd, msgs: &mut [libc::mmsghdr], n: usize) -> io::Result<usize> {
    let n = n.min(msgs.len());
    // SAFETY: `msgs[..n]` are this slice's headers; what they point at is the caller's
    // promise (above). The kernel writes at most the lengths given and sets `msg_len`,
    // `msg_namelen` and `msg_flags`.
    let r = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    Ok((r as usize).min(n))
}

/// Receives up to the batch's free slots (at most [`MMSG`]) from `fd` in one `recvmmsg(2)`
/// without blocking, committing each datagram to its slot in order; how many.
fn recv_mmsg(fd: RawFd, batch: &mut Batch, m: &mut Mmsg) -> io::Result<usize> {
    let slot = batch.slot_len();
    let (region, free) = batch.free_region();
    let want = free.min(MMSG);
    if want == 0 {
        return Ok(0);
    }
    let Mmsg {
        names, iovs, msgs, ..
    } = m;
    for (i, chunk) in region.chunks_exact_mut(slot).take(want).enumerate() {
        iovs[i] = libc::iovec {
            iov_base: chunk.as_mut_ptr() as *mut libc::c_void,
            iov_len: slot,
        };
        let h = &mut msgs[i].msg_hdr;
        h.msg_name = &mut names[i] as *mut libc::sockaddr_in as *mut libc::c_void;
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_iov = &mut iovs[i];
        h.msg_iovlen = 1;
        h.msg_control = std::ptr::null_mut();
        h.msg_controllen = 0;
        h.msg_flags = 0;
    }
    // SAFETY: `msgs[..want]` each point at their own name and one iovec over a distinct
    // `slot`-byte chunk of the batch's free region (`want` chunks fit in it: `free` slots of
    // `slot` bytes), all alive and not otherwise borrowed for the call, and carry no control
    // block; the kernel writes at most the lengths given and sets `msg_len` and `msg_namelen`.
    let got = unsafe { recvmmsg_now(fd, &mut msgs[..], want)? };
    for i in 0..got {
        let source = source_of(&msgs[i].msg_hdr, &names[i]);
        batch.commit(msgs[i].msg_len as usize, Source::Udp(source));
    }
    Ok(got)
}

/// The source a `recvmmsg(2)` wrote into `name` for the datagram of header `h`.
fn source_of(h: &libc::msghdr, name: &libc::sockaddr_in) -> SocketAddrV4 {
    if h.msg_namelen as usize >= std::mem::size_of::<libc::sockaddr_in>()
        && i32::from(name.sin_family) == libc::AF_INET
    {
        SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(name.sin_addr.s_addr)),
            u16::from_be(name.sin_port),
        )
    } else {
        // Not an IPv4 source (cannot happen on an AF_INET socket): no rank's address, so
        // `accept` drops it; its slot is kept so the others stay in order.
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)
    }
}

/// One `recvmmsg(2)` on `fd` without blocking that scatters each datagram: its first
/// `head.len() / n` bytes (at least 1) into its piece of `head`, the rest straight into
/// `bodies[i]` (`n` = `bodies.len()`, at most [`MMSG`] and `head.len()`). `got` receives each datagram's whole length (as
/// the kernel reports it: longer than its two pieces when it was cut, `MSG_TRUNC`) and
/// source; returns how many.
fn recv_split(
    fd: RawFd,
    head: &mut [u8],
    bodies: &mut [&mut [u8]],
    m: &mut Mmsg,
    got: &mut Vec<(usize, Source)>,
) -> io::Result<usize> {
    got.clear();
    let n = bodies.len().min(MMSG);
    if n == 0 {
        return Ok(0);
    }
    // Each datagram's head piece: `h` bytes (at least 1, so `n` is at most `head.len()`).
    let h = (head.len() / n).max(1);
    let n = n.min(head.len() / h);
    if n == 0 {
        return Ok(0);
    }
    for (i, (body, head)) in bodies
        .iter_mut()
        .zip(head.chunks_exact_mut(h))
        .take(n)
        .enumerate()
    {
        m.split[i] = [
            libc::iovec {
                iov_base: head.as_mut_ptr() as *mut libc::c_void,
                iov_len: h,
            },
            libc::iovec {
                iov_base: body.as_mut_ptr() as *mut libc::c_void,
                iov_len: body.len(),
            },
        ];
        let hdr = &mut m.msgs[i].msg_hdr;
        hdr.msg_name = &mut m.names[i] as *mut libc::sockaddr_in as *mut libc::c_void;
        hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        hdr.msg_iov = m.split[i].as_mut_ptr();
        hdr.msg_iovlen = 2;
        hdr.msg_control = std::ptr::null_mut();
        hdr.msg_controllen = 0;
        hdr.msg_flags = 0;
    }
    // SAFETY: `msgs[..n]` each point at their own name and two iovecs: a distinct `h`-byte
    // piece of `head` (`n` pieces fit in it) and one of `bodies` (distinct `&mut` slices), all
    // alive and not otherwise borrowed for the call, with no control block; the kernel writes
    // at most the lengths given and sets `msg_len`, `msg_namelen` and `msg_flags`.
    let r = unsafe { recvmmsg_now(fd, &mut m.msgs[..], n)? };
    for (i, body) in bodies.iter().enumerate().take(r) {
        let cut = m.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let len = m.msgs[i].msg_len as usize;
        let room = h + body.len();
        // A cut datagram reports at least one byte more than its pieces hold.
        let len = if cut { len.max(room + 1) } else { len };
        got.push((len, Source::Udp(source_of(&m.msgs[i].msg_hdr, &m.names[i]))));
    }
    Ok(r)
}

/// `SO_MEMINFO` (asm-generic's number; not in the `libc` crate): the socket's memory counters,
/// `SK_MEMINFO_DROPS` among them.
const SO_MEMINFO: libc::c_int = 55;

/// Datagrams the kernel dropped at socket `fd` (`sk_drops`, what `SO_RXQ_OVFL` would report
/// with every datagram, read here only when asked: the control message per datagram cost a
/// receiving rank 2 % of its CPU).
fn socket_drops(fd: RawFd) -> Option<u32> {
    let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is a live array of `len` bytes that the kernel writes at most `len` of
    // (it sets `len` to what it wrote).
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    let need = (libc::SK_MEMINFO_DROPS as usize + 1) * 4;
    (r == 0 && len as usize >= need).then(|| info[libc::SK_MEMINFO_DROPS as usize])
}

fn setup(what: String, e: io::Error) -> TransportError {
    TransportError::Setup {
        what,
        error: e.to_string(),
    }
}

fn in_addr(ip: Ipv4Addr) -> libc::in_addr {
    libc::in_addr {
        s_addr: u32::from_ne_bytes(ip.octets()),
    }
}

/// Sets a socket option from a plain value.
fn set_opt<T: Copy>(fd: RawFd, level: i32, name: i32, value: T) -> io::Result<()> {
    // SAFETY: `value` is a live, initialized T and the length passed is its size; the kernel
    // only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The name of the interface that holds `ip`.
fn iface_name(ip: Ipv4Addr) -> Option<String> {
    crate::transport::ifaddrs::ipv4_interfaces()
        .ok()?
        .into_iter()
        .find(|i| i.addr == ip)
        .map(|i| i.name)
}

/// The MTU of the interface that holds `ip` (`/sys/class/net/NAME/mtu`).
pub fn iface_mtu(ip: Ipv4Addr) -> Option<usize> {
    let name = iface_name(ip)?;
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The largest receive buffer an unprivileged socket may ask for (`net.core.rmem_max`).
pub fn rmem_max() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Asks for a receive buffer of `bytes` (forced past `rmem_max` when privileged) and returns
/// what the kernel gave.
fn grow_rcvbuf(fd: RawFd, bytes: usize) -> io::Result<usize> {
    let want = bytes.min(i32::MAX as usize / 2) as i32;
    if set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want).is_err() {
        let cap = rmem_max().map_or(want, |m| want.min(m.min(i32::MAX as usize) as i32));
        set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, cap)?;
    }
    Ok(
        crate::transport::raweth::socket::int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?.max(0)
            as usize,
    )
}

/// A non-blocking UDP socket with `SO_REUSEADDR` (ranks of one host share the group's
/// port), bound to `addr`.
fn udp_socket(addr: SocketAddrV4) -> io::Result<UdpSocket> {
    // SAFETY: plain system call with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns; the UdpSocket closes it.
    let sock = unsafe { UdpSocket::from_raw_fd(fd) };
    set_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1i32)?;
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: in_addr(*addr.ip()),
        sin_zero: [0; 8],
    };
    // SAFETY: `sin` is a valid sockaddr_in of the size passed.
    let r = unsafe {
        libc::bind(
            fd,
            &sin as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// Sends `header` and `payload` as one datagram to `to` without blocking; `Ok(false)` when
/// the socket buffer is full.
fn send_two(fd: RawFd, to: SocketAddrV4, header: &[u8], payload: &[u8]) -> io::Result<bool> {
    let mut sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: to.port().to_be(),
        sin_addr: in_addr(*to.ip()),
        sin_zero: [0; 8],
    };
    let mut iov = [
        libc::iovec {
            iov_base: header.as_ptr() as *mut libc::c_void,
            iov_len: header.len(),
        },
        libc::iovec {
            iov_base: payload.as_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        },
    ];
    // SAFETY: an all-zero msghdr is valid (no control data); it is filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut sin as *mut libc::sockaddr_in as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len();
    // SAFETY: `msg` points at `sin` and two iovecs over `header` and `payload`, all alive for
    // the call; sendmsg only reads them.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    sent(r)
}

/// What a non-blocking `sendmsg` that returned `r` did: sent (`true`), found the socket full
/// or was interrupted (`false`: nothing left, try again), or failed.
fn sent(r: isize) -> io::Result<bool> {
    if r >= 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => Ok(false),
        _ => Err(e),
    }
}

/// `UDP_SEGMENT` (linux/udp.h): the control message that gives a send's segment size.
const UDP_SEGMENT: libc::c_int = 103;

/// Segments one UDP GSO send carries at most (the kernel's `UDP_MAX_SEGMENTS`, 64 before
/// Linux 6.9).
pub const GSO_SEGMENTS: usize = 64;

/// Bytes one UDP GSO send carries at most: an IP datagram's 65 535 less the IP and UDP
/// headers.
const GSO_BYTES: usize = 65_535 - 20 - 8;

/// Sends `frames` (each a header and a payload, every one `frames[0]`'s length but the last,
/// which may be shorter; at most [`GSO_SEGMENTS`] and [`GSO_BYTES`] in all) to `to` with one
/// `sendmsg(2)` and UDP GSO: the kernel cuts the bytes every `frames[0]`'s length into
/// datagrams, the same a `send_two` per frame would send. `Ok(false)` when the socket buffer
/// is full (then none left: the kernel takes the whole send or none of it).
fn send_gso(fd: RawFd, to: SocketAddrV4, frames: &[(&[u8], &[u8])]) -> io::Result<bool> {
    let size = frames[0].0.len() + frames[0].1.len();
    let mut sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: to.port().to_be(),
        sin_addr: in_addr(*to.ip()),
        sin_zero: [0; 8],
    };
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2 * GSO_SEGMENTS];
    for (i, (header, payload)) in frames.iter().enumerate() {
        iov[2 * i] = libc::iovec {
            iov_base: header.as_ptr() as *mut libc::c_void,
            iov_len: header.len(),
        };
        iov[2 * i + 1] = libc::iovec {
            iov_base: payload.as_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        };
    }
    // A cmsghdr and a u16, aligned as the kernel reads them.
    let mut control = [0u64; 4];
    // SAFETY: CMSG_SPACE only computes a length.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as libc::c_uint) } as usize;
    debug_assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: an all-zero msghdr is valid; it is filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut sin as *mut libc::sockaddr_in as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = 2 * frames.len();
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space;
    // SAFETY: `msg`'s control buffer is `space` bytes (<= 32, 8-aligned), room for one
    // cmsghdr and its u16, so CMSG_FIRSTHDR is non-null and CMSG_DATA points inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as libc::c_uint) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, size as u16);
    }
    // SAFETY: `msg` points at `sin`, `control` and 2 × frames.len() iovecs over the frames'
    // slices, all alive for the call; sendmsg only reads them.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    sent(r)
}

/// How many of `frames` one GSO send may carry from the first: frames of the first's
/// length, then at most one shorter (non-empty) one, within [`GSO_SEGMENTS`] and
/// [`GSO_BYTES`].
fn gso_run(frames: &[(&[u8], &[u8])]) -> usize {
    let len = |f: &(&[u8], &[u8])| f.0.len() + f.1.len();
    let size = len(&frames[0]);
    let mut n = 0;
    let mut bytes = 0;
    for f in frames.iter().take(GSO_SEGMENTS) {
        let l = len(f);
        if l > size || l == 0 || bytes + l > GSO_BYTES {
            break;
        }
        n += 1;
        bytes += l;
        if l < size {
            break;
        }
    }
    n.max(1)
}

impl UdpCarrier {
    /// Sends `frames` to the group one datagram per `sendmsg(2)`, as [`Carrier::send`] does;
    /// how many left before the socket was full. For tests: the path the GSO sends replace.
    pub fn send_group_each(&mut self, frames: &[(&[u8], &[u8])]) -> io::Result<usize> {
        let to = SocketAddrV4::new(self.group.ip, self.group.port);
        for (i, (header, payload)) in frames.iter().enumerate() {
            if !send_two(self.uni.as_raw_fd(), to, header, payload)? {
                return Ok(i);
            }
        }
        Ok(frames.len())
    }

    /// Whether group frames still leave with UDP GSO (false once the kernel refused it).
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Rank `me`'s carrier for `group` on the interface that holds address `iface`.
    pub fn open(
        group: Group,
        iface: Ipv4Addr,
        config: UdpConfig,
    ) -> Result<UdpCarrier, TransportError> {
        let what = |s: &str| format!("UDP multicast {}:{} on {iface}: {s}", group.ip, group.port);
        let grp = udp_socket(SocketAddrV4::new(group.ip, group.port))
            .map_err(|e| setup(what("bind the group socket"), e))?;
        let g = grp.as_raw_fd();
        set_opt(g, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, 0i32)
            .map_err(|e| setup(what("IP_MULTICAST_ALL"), e))?;
        if config.join {
            let mreq = libc::ip_mreq {
                imr_multiaddr: in_addr(group.ip),
                imr_interface: in_addr(iface),
            };
            set_opt(g, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, mreq)
                .map_err(|e| setup(what("join the group (IP_ADD_MEMBERSHIP)"), e))?;
        }
        let rcvbuf = grow_rcvbuf(g, config.rcvbuf)
            .map_err(|e| setup(what("the group socket's receive buffer"), e))?;
        let uni = udp_socket(SocketAddrV4::new(iface, 0))
            .map_err(|e| setup(what("bind the unicast socket"), e))?;
        let u = uni.as_raw_fd();
        set_opt(u, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, in_addr(iface))
            .map_err(|e| setup(what("IP_MULTICAST_IF"), e))?;
        set_opt(
            u,
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_TTL,
            config.ttl.min(255) as i32,
        )
        .map_err(|e| setup(what("IP_MULTICAST_TTL"), e))?;
        set_opt(
            u,
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_LOOP,
            i32::from(config.loopback),
        )
        .map_err(|e| setup(what("IP_MULTICAST_LOOP"), e))?;
        grow_rcvbuf(u, config.rcvbuf)
            .map_err(|e| setup(what("the unicast socket's receive buffer"), e))?;
        let local = match uni.local_addr() {
            Ok(SocketAddr::V4(a)) => a,
            Ok(other) => {
                return Err(setup(
                    what("the unicast address"),
                    io::Error::other(format!("{other} is not IPv4")),
                ))
            }
            Err(e) => return Err(setup(what("the unicast address"), e)),
        };
        Ok(UdpCarrier {
            group,
            iface,
            grp,
            uni,
            local,
            peers: Vec::new(),
            rcvbuf,
            mtu: iface_mtu(iface).unwrap_or(1500),
            mmsg: Mmsg::new(),
            gso: true,
        })
    }

    /// The most payload bytes a data frame may carry without IP fragmentation: the
    /// interface's MTU less the IP and UDP headers and the data frame's header (at most what
    /// its 16-bit count says).
    pub fn max_payload(&self) -> usize {
        self.mtu
            .saturating_sub(20 + 8 + crate::wire::mcast::DATA_HEADER_LEN)
            .clamp(1, crate::wire::mcast::MAX_PAYLOAD)
    }

    /// This rank's unicast address: what the others need ([`UdpCarrier::set_peers`]).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// Every rank's unicast address, by rank.
    pub fn set_peers(&mut self, peers: Vec<SocketAddrV4>) {
        self.peers = peers;
    }

    pub fn group(&self) -> Group {
        self.group
    }

    /// One `recvmmsg(2)` on the group socket that lands each datagram's payload straight where
    /// the caller wants it (no copy of the carrier's): its first `head.len() / bodies.len()`
    /// bytes (a data frame's header) into its piece of `head`, the rest into `bodies[i]`.
    /// `got` receives each datagram's whole length and source, in order; returns how many.
    /// Nothing received is trusted: the caller checks each header (and that the payload went
    /// where the header says) before using a byte.
    pub fn recv_split(
        &mut self,
        head: &mut [u8],
        bodies: &mut [&mut [u8]],
        got: &mut Vec<(usize, Source)>,
    ) -> io::Result<usize> {
        recv_split(self.grp.as_raw_fd(), head, bodies, &mut self.mmsg, got)
    }
}

impl Carrier for UdpCarrier {
    fn describe(&self) -> String {
        format!(
            "udp:{}:{} on {} (receive buffer {} bytes)",
            self.group.ip, self.group.port, self.iface, self.rcvbuf
        )
    }

    fn send(&mut self, to: To, header: &[u8], payload: &[u8]) -> io::Result<bool> {
        let addr = match to {
            To::Group => SocketAddrV4::new(self.group.ip, self.group.port),
            To::Rank(r) => match self.peers.get(r) {
                Some(a) => *a,
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("rank {r} has no unicast address"),
                    ))
                }
            },
        };
        send_two(self.uni.as_raw_fd(), addr, header, payload)
    }

    /// Runs of equal-length frames (the last of a run may be shorter) leave with one
    /// `sendmsg(2)` each and UDP GSO ([`send_gso`]); a kernel that refuses GSO (EINVAL, EIO,
    /// ENOPROTOOPT, EOPNOTSUPP) is remembered and the frames leave one per call.
    fn send_group(&mut self, frames: &[(&[u8], &[u8])]) -> io::Result<usize> {
        let to = SocketAddrV4::new(self.group.ip, self.group.port);
        let fd = self.uni.as_raw_fd();
        let mut done = 0;
        while done < frames.len() {
            let rest = &frames[done..];
            let n = if self.gso { gso_run(rest) } else { 1 };
            if n == 1 {
                if !send_two(fd, to, rest[0].0, rest[0].1)? {
                    return Ok(done);
                }
                done += 1;
                continue;
            }
            match send_gso(fd, to, &rest[..n]) {
                Ok(true) => done += n,
                Ok(false) => return Ok(done),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                    ) =>
                {
                    tracing::debug!(
                        "multicast {}: the kernel refuses UDP GSO ({e}); one datagram per call",
                        self.describe()
                    );
                    self.gso = false;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<(Source, usize)>> {
        for sock in [&self.grp, &self.uni] {
            match sock.recv_from(buf) {
                Ok((n, SocketAddr::V4(from))) => return Ok(Some((Source::Udp(from), n))),
                Ok((_, SocketAddr::V6(_))) => continue,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// One `recvmmsg(2)` on the group socket, then one on the unicast socket if slots are
    /// left.
    fn recv_batch(&mut self, batch: &mut Batch) -> io::Result<usize> {
        let mut n = recv_mmsg(self.grp.as_raw_fd(), batch, &mut self.mmsg)?;
        if batch.len() < batch.capacity() {
            n += recv_mmsg(self.uni.as_raw_fd(), batch, &mut self.mmsg)?;
        }
        Ok(n)
    }

    fn is_rank(&self, rank: usize, source: &Source) -> bool {
        matches!(source, Source::Udp(a) if self.peers.get(rank) == Some(a))
    }

    fn fds(&self) -> Vec<RawFd> {
        vec![self.grp.as_raw_fd(), self.uni.as_raw_fd()]
    }

    fn rcvbuf(&self) -> Option<usize> {
        Some(self.rcvbuf)
    }

    /// Linux sends every UDP datagram with a checksum over it (this carrier never turns it
    /// off: no `SO_NO_CHECK`) and drops, on receipt, one whose checksum fails.
    fn checksums_payload(&self) -> bool {
        true
    }

    /// Both sockets' `sk_drops` (`SO_MEMINFO`), read now.
    fn drops(&self) -> Option<u64> {
        let g = socket_drops(self.grp.as_raw_fd())?;
        let u = socket_drops(self.uni.as_raw_fd()).unwrap_or(0);
        Some(u64::from(g) + u64::from(u))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_drops_are_read_when_asked() {
        let rx = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        assert_eq!(socket_drops(rx.as_raw_fd()), Some(0));
        // A small receive buffer overflows: the kernel counts what it dropped.
        set_opt(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4096i32).unwrap();
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..200 {
            let _ = tx.send_to(&[7u8; 1000], to);
        }
        assert!(socket_drops(rx.as_raw_fd()).is_some_and(|d| d > 0));
        let mut batch = Batch::new(MMSG, 1100);
        let mut m = Mmsg::new();
        let got = recv_mmsg(rx.as_raw_fd(), &mut batch, &mut m).unwrap();
        assert!(got > 0 && got == batch.len());
        let (bytes, source) = batch.get(0);
        assert_eq!(bytes, &[7u8; 1000][..]);
        assert_eq!(
            source,
            Source::Udp(match tx.local_addr().unwrap() {
                SocketAddr::V4(a) => a,
                SocketAddr::V6(_) => unreachable!(),
            })
        );
    }

    #[test]
    fn a_split_receive_lands_each_payload_in_its_own_place() {
        let rx = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        // Three datagrams: 4-byte head + 5-byte body, a short one, one too long for its body.
        for d in [&b"HHH0abcde"[..], b"HHH1xy", b"HHH2_too_long"] {
            tx.send_to(d, to).unwrap();
        }
        let mut head = [0u8; 12];
        let mut buf = [0u8; 15];
        let mut got = Vec::new();
        let mut m = Mmsg::new();
        let mut bodies: Vec<&mut [u8]> = buf.chunks_mut(5).collect();
        let mut n = 0;
        for _ in 0..100 {
            n = recv_split(rx.as_raw_fd(), &mut head, &mut bodies, &mut m, &mut got).unwrap();
            if n == 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(n, 3);
        let lens: Vec<usize> = got.iter().map(|g| g.0).collect();
        // Nothing more waits.
        assert_eq!(
            recv_split(rx.as_raw_fd(), &mut head, &mut bodies, &mut m, &mut got).unwrap(),
            0
        );
        drop(bodies);
        assert_eq!(&head, b"HHH0HHH1HHH2");
        assert_eq!(&buf[..5], b"abcde");
        assert_eq!(&buf[5..7], b"xy");
        assert_eq!(&buf[10..15], b"_too_");
        // The cut datagram reports more than its pieces hold.
        assert_eq!(&lens[..2], &[9, 6]);
        assert!(lens[2] > 9, "{lens:?}");
    }

    #[test]
    fn a_missing_interface_address_is_a_clear_error() {
        // 192.0.2.1 (TEST-NET-1) is no interface's here.
        let g = Group::of(42);
        let e = UdpCarrier::open(g, Ipv4Addr::new(192, 0, 2, 1), UdpConfig::default())
            .expect_err("no interface holds 192.0.2.1");
        let s = e.to_string();
        assert!(s.contains("192.0.2.1"), "{s}");
    }
}
