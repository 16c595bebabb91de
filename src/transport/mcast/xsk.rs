//! An AF_XDP socket receiving on one queue of one interface: the first piece of a receive
//! path where the NIC places frames in user memory (docs/multicast.md, "Receivers' CPU: an
//! AF_XDP receive path"). Receive only; frames are sent through the raw Ethernet carrier.
//!
//! - **UMEM**: an anonymous mapping of `frames` chunks of `chunk` bytes (aligned mode: a
//!   chunk's base is a multiple of `chunk`), registered with `XDP_UMEM_REG` (the kernel pins
//!   it: RLIMIT_MEMLOCK, unless CAP_IPC_LOCK).
//! - **Rings**, each mapped from the socket: the fill ring (chunks we give the kernel to
//!   write frames into), the RX ring (descriptors of frames written: address, length), and
//!   the completion ring (the kernel requires one; it stays empty without sending). A ring is
//!   a producer index, a consumer index and a power-of-two array of entries; the producer
//!   writes entries, then publishes its index with release ordering; the consumer loads the
//!   producer's index with acquire ordering, reads the entries, then publishes its own index
//!   with release ordering ([`Cursor`] is the index arithmetic alone).
//! - **Bind** to the queue with no mode flag: the kernel takes zero-copy where the driver
//!   supports it and copy mode otherwise ([`BindMode::Auto`]; `XDP_OPTIONS` says which);
//!   [`BindMode::ZeroCopy`] and [`BindMode::Copy`] force one.
//! - **The XDP program** ([`super::xdp_prog`]) redirects the carrier's frames to the socket
//!   and passes every other frame; it is attached through a BPF link, detached on drop.
//!
//! Every RX descriptor's address and length are checked against the UMEM (and its chunk)
//! before a byte of the frame is read; a descriptor that fails is counted ([`Xsk::bad`]) and
//! skipped.

use super::xdp_prog::{Attach, AttachMode, XdpFilter};
use crate::transport::TransportError;
use crate::wire::frame::Mac;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Room the kernel leaves before a frame in its chunk (`XDP_PACKET_HEADROOM`).
const XDP_PACKET_HEADROOM: usize = 256;
/// Chunks one frame may span (multi-buffer); a frame in more is refused.
pub const MAX_PIECES: usize = 8;

/// How to bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// Zero-copy where the driver can, else copy mode (no flag: the kernel decides).
    Auto,
    /// `XDP_ZEROCOPY`: fail where the driver cannot.
    ZeroCopy,
    /// `XDP_COPY`.
    Copy,
}

/// What to open.
#[derive(Debug, Clone)]
pub struct XskConfig {
    /// The interface's receive queue.
    pub queue: u32,
    /// UMEM chunks (a power of two); the fill and RX rings have as many entries.
    pub frames: u32,
    /// Bytes per chunk (a power of two, ≥ 2048); `None`: the MTU's frame and the kernel's
    /// headroom, rounded up.
    pub chunk: Option<u32>,
    pub bind: BindMode,
    pub attach: AttachMode,
    /// The frames redirected: of this EtherType, to one of these MACs (every MAC when
    /// empty).
    pub ethertype: u16,
    pub macs: Vec<Mac>,
}

impl XskConfig {
    /// The raw Ethernet carrier's frames to `macs`.
    pub fn carrier(macs: Vec<Mac>) -> XskConfig {
        XskConfig {
            queue: 0,
            frames: 4096,
            chunk: None,
            bind: BindMode::Auto,
            attach: AttachMode::Auto,
            ethertype: super::ether::ETHERTYPE,
            macs,
        }
    }
}

/// The chunk size for frames of an interface of `mtu`: the Ethernet frame (with a VLAN tag)
/// after the kernel's headroom, as a power of two of at least 2048 and at most a page (the
/// kernel's limit; larger frames span chunks: [`needs_pieces`]).
pub fn chunk_for(mtu: usize) -> usize {
    (XDP_PACKET_HEADROOM + mtu + 18)
        .next_power_of_two()
        .clamp(2048, page_size())
}

/// Whether a frame of an interface of `mtu` may need more than one chunk of `chunk` bytes.
pub fn needs_pieces(mtu: usize, chunk: usize) -> bool {
    XDP_PACKET_HEADROOM + mtu + 18 > chunk
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(4096)
}

/// The index arithmetic of one ring of `size` (a power of two) entries: indices run freely
/// over `u32` and wrap; an entry is at `index & (size - 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    size: u32,
    /// Producer side: our next index to produce. Consumer side: the producer's index last
    /// seen.
    prod: u32,
    /// Consumer side: our next index to consume. Producer side: the consumer's index last
    /// seen.
    cons: u32,
}

impl Cursor {
    pub fn new(size: u32) -> Cursor {
        assert!(size.is_power_of_two(), "ring sizes are powers of two");
        Cursor {
            size,
            prod: 0,
            cons: 0,
        }
    }

    /// The entry of `index`.
    pub fn slot(&self, index: u32) -> usize {
        (index & (self.size - 1)) as usize
    }

    /// Consumer side: entries waiting now that the producer's index is `producer`. An index
    /// more than a ring ahead of ours (never from a sound kernel) counts as none.
    pub fn ready(&mut self, producer: u32) -> u32 {
        let n = producer.wrapping_sub(self.cons);
        if n > self.size {
            return 0;
        }
        self.prod = producer;
        n
    }

    /// Consumer side: the next index to read.
    pub fn next_to_consume(&self) -> u32 {
        self.cons
    }

    /// Consumer side: `n` entries read; the index to publish.
    pub fn consumed(&mut self, n: u32) -> u32 {
        self.cons = self.cons.wrapping_add(n);
        self.cons
    }

    /// Producer side: entries free now that the consumer's index is `consumer`. A consumer
    /// ahead of us, or a ring more than full (never from a sound kernel), counts as none.
    pub fn free(&mut self, consumer: u32) -> u32 {
        let used = self.prod.wrapping_sub(consumer);
        if used > self.size {
            return 0;
        }
        self.cons = consumer;
        self.size - used
    }

    /// Producer side: the next index to write.
    pub fn next_to_produce(&self) -> u32 {
        self.prod
    }

    /// Producer side: `n` entries written; the index to publish.
    pub fn produced(&mut self, n: u32) -> u32 {
        self.prod = self.prod.wrapping_add(n);
        self.prod
    }
}

/// Where a received frame is in the UMEM: its byte range and its chunk's base (to give back
/// to the fill ring). `None` when the descriptor points outside the UMEM, or its frame
/// crosses its chunk's end (aligned mode: a frame lies within one chunk).
pub fn frame_span(
    addr: u64,
    len: u32,
    umem_len: usize,
    chunk: usize,
) -> Option<(std::ops::Range<usize>, u64)> {
    let addr = usize::try_from(addr).ok()?;
    if addr >= umem_len || chunk == 0 {
        return None;
    }
    let base = addr - addr % chunk;
    let end = addr.checked_add(len as usize)?;
    if end > base + chunk || end > umem_len {
        return None;
    }
    Some((addr..end, base as u64))
}

/// Counters the kernel keeps for the socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty: u64,
}

/// A mapped ring.
struct Ring {
    map: *mut u8,
    len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    desc: *mut u8,
    cursor: Cursor,
}

impl Ring {
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: `producer` points into the live mapping at the kernel's offset, 4-aligned;
        // the kernel and we touch it only atomically.
        unsafe { &*self.producer }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { &*self.consumer }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map_ring`, unmapped once.
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.len);
        }
    }
}

/// An interface's index, MTU and MAC (in this thread's network namespace), asked through
/// an unprivileged UDP socket.
pub fn interface(ifname: &str) -> Result<(u32, usize, Mac), TransportError> {
    let what = || format!("AF_XDP socket on interface {ifname:?}");
    let bad = |e: String| TransportError::Setup {
        what: what(),
        error: e,
    };
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(bad(format!(
            "interface names have fewer than {} bytes",
            libc::IFNAMSIZ
        )));
    }
    let name = CString::new(ifname).map_err(|_| bad("interface name contains a NUL".into()))?;
    // SAFETY: `name` is a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(bad(format!(
            "no interface named {ifname:?} here (see `ip link`)"
        )));
    }
    // SAFETY: plain system call with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(bad(io::Error::last_os_error().to_string()));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is valid; the name (shorter than IFNAMSIZ) is copied in.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU writes an int into the ifreq we own.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(bad(io::Error::last_os_error().to_string()));
    }
    // SAFETY: after SIOCGIFMTU the union holds `ifru_mtu`.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu }.max(0) as usize;
    // SAFETY: SIOCGIFHWADDR writes one sockaddr into the ifreq we own.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } < 0 {
        return Err(bad(io::Error::last_os_error().to_string()));
    }
    // SAFETY: after SIOCGIFHWADDR the union holds `ifru_hwaddr`.
    let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok((ifindex, mtu, mac))
}

/// An AF_XDP socket bound to one queue, its UMEM, rings and XDP program.
pub struct Xsk {
    // Dropped in this order: the program (detached), the rings, the socket, the UMEM.
    filter: Option<XdpFilter>,
    fill: Ring,
    rx: Ring,
    /// Mapped because the kernel requires a completion ring; empty without sending.
    _completion: Ring,
    fd: OwnedFd,
    umem: Umem,
    chunk: usize,
    zero_copy: bool,
    multi_buffer: bool,
    ifname: String,
    mtu: usize,
    mac: Mac,
    bad: u64,
}

// SAFETY: the mappings are plain memory owned by this value (the kernel's side is tied to
// the socket, not to a thread); nothing in them is tied to the creating thread.
unsafe impl Send for Xsk {}

/// The error of step `what` of opening an AF_XDP socket.
fn xsk_error(ifname: &str, what: &str, e: io::Error) -> TransportError {
    let hint = match e.raw_os_error() {
        Some(libc::EAFNOSUPPORT) => {
            ": this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS is off)"
        }
        Some(libc::EPERM) | Some(libc::EACCES) => ": AF_XDP sockets need CAP_NET_RAW (run as root)",
        Some(libc::ENOMEM) | Some(libc::ENOBUFS) => {
            ": the UMEM is pinned and counts against RLIMIT_MEMLOCK (`ulimit -l`; \
             CAP_IPC_LOCK lifts it)"
        }
        Some(libc::EOPNOTSUPP) => ": the driver cannot do this (zero-copy needs driver support)",
        Some(libc::EBUSY) => ": another AF_XDP socket has this queue",
        _ => "",
    };
    TransportError::Setup {
        what: format!("AF_XDP socket on {ifname}: {what}"),
        error: format!("{e}{hint}"),
    }
}

impl Xsk {
    /// Opens an AF_XDP socket on `ifname` (in this thread's network namespace) for `cfg`:
    /// UMEM, rings, bind, and the XDP program that redirects the chosen frames to it. The
    /// fill ring is filled with every chunk. Needs CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN.
    pub fn open(ifname: &str, cfg: &XskConfig) -> Result<Xsk, TransportError> {
        let (ifindex, mtu, mac) = interface(ifname)?;
        let err = |what: &str, e: io::Error| xsk_error(ifname, what, e);
        let frames = cfg.frames;
        if !frames.is_power_of_two() || frames < 2 {
            return Err(err(
                "configuration",
                io::Error::new(io::ErrorKind::InvalidInput, "frames is a power of two ≥ 2"),
            ));
        }
        let chunk = cfg.chunk.map_or_else(|| chunk_for(mtu), |c| c as usize);
        if !chunk.is_power_of_two() || chunk < 2048 {
            return Err(err(
                "configuration",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "chunk is a power of two ≥ 2048",
                ),
            ));
        }
        // SAFETY: plain system call with constant arguments; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(err("socket", io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let umem_len = frames as usize * chunk;
        // SAFETY: an anonymous private mapping; the result is checked; unmapped in drop.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(err("map the UMEM", io::Error::last_os_error()));
        }
        // Unmapped by its drop, after the socket's (the last field of `Xsk`).
        let umem = Umem {
            map: umem as *mut u8,
            len: umem_len,
        };
        let reg = libc::xdp_umem_reg {
            addr: umem.map as u64,
            len: umem_len as u64,
            chunk_size: chunk as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg).map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) && chunk > page_size() {
                let e = io::Error::other(format!(
                    "{e}: chunks of {chunk} bytes are more than this kernel allows (a page)"
                ));
                err("register the UMEM", e)
            } else {
                err("register the UMEM", e)
            }
        })?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
        ] {
            setsockopt(&fd, opt, &frames).map_err(|e| err("size a ring", e))?;
        }
        // SAFETY: an all-zero xdp_mmap_offsets is valid; the kernel fills it.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `off`, which we own.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                &mut off as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 {
            return Err(err("ring offsets", io::Error::last_os_error()));
        }
        if len as usize != std::mem::size_of::<libc::xdp_mmap_offsets>() {
            return Err(err(
                "ring offsets",
                io::Error::other("a kernel older than 5.4 (ring offsets without flags)"),
            ));
        }
        let fill = map_ring(
            &fd,
            &off.fr,
            frames,
            8,
            libc::XDP_UMEM_PGOFF_FILL_RING as i64,
        )
        .map_err(|e| err("map the fill ring", e))?;
        let completion = map_ring(
            &fd,
            &off.cr,
            frames,
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64,
        )
        .map_err(|e| err("map the completion ring", e))?;
        let rx = map_ring(
            &fd,
            &off.rx,
            frames,
            std::mem::size_of::<libc::xdp_desc>(),
            libc::XDP_PGOFF_RX_RING,
        )
        .map_err(|e| err("map the RX ring", e))?;
        let mut xsk = Xsk {
            filter: None,
            fill,
            rx,
            _completion: completion,
            fd,
            umem,
            chunk,
            zero_copy: false,
            multi_buffer: false,
            ifname: ifname.to_string(),
            mtu,
            mac,
            bad: 0,
        };
        // Every chunk to the kernel before the socket is bound.
        let bases: Vec<u64> = (0..frames as u64).map(|i| i * chunk as u64).collect();
        let posted = xsk.post_fill(&bases);
        debug_assert_eq!(posted, bases.len());
        let mode = match cfg.bind {
            BindMode::Auto => 0,
            BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
            BindMode::Copy => libc::XDP_COPY,
        };
        xsk.multi_buffer = needs_pieces(mtu, chunk);
        let flags = if xsk.multi_buffer {
            mode | libc::XDP_USE_SG
        } else {
            mode
        };
        let sxdp = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: cfg.queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `sxdp` is a valid sockaddr_xdp of the size passed.
        let r = unsafe {
            libc::bind(
                xsk.fd.as_raw_fd(),
                &sxdp as *const libc::sockaddr_xdp as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as u32,
            )
        };
        if r < 0 {
            return Err(err(
                &format!("bind to queue {} ({:?})", cfg.queue, cfg.bind),
                io::Error::last_os_error(),
            ));
        }
        let mut opts = libc::xdp_options { flags: 0 };
        let mut len = std::mem::size_of::<libc::xdp_options>() as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `opts`, which we own.
        let r = unsafe {
            libc::getsockopt(
                xsk.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_OPTIONS,
                &mut opts as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        xsk.zero_copy = r == 0 && opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0;
        xsk.filter = Some(XdpFilter::attach(
            ifindex,
            cfg.queue,
            xsk.fd.as_raw_fd(),
            cfg.ethertype,
            &cfg.macs,
            cfg.attach,
        )?);
        Ok(xsk)
    }

    /// Gives chunks (their bases) to the kernel through the fill ring; how many fit.
    fn post_fill(&mut self, bases: &[u64]) -> usize {
        let consumer = self.fill.consumer().load(Ordering::Acquire);
        let n = (self.fill.cursor.free(consumer) as usize).min(bases.len());
        let start = self.fill.cursor.next_to_produce();
        for (i, &base) in bases[..n].iter().enumerate() {
            let slot = self.fill.cursor.slot(start.wrapping_add(i as u32));
            // SAFETY: the slot is within the ring's entries (`slot < frames`, the mapping
            // holds `frames` u64 entries at `desc`), and it is ours: free, not yet published.
            unsafe { (self.fill.desc as *mut u64).add(slot).write(base) };
        }
        let publish = self.fill.cursor.produced(n as u32);
        self.fill.producer().store(publish, Ordering::Release);
        n
    }

    /// Hands up to `max` received frames to `f`, then gives their chunks back to the
    /// kernel; returns how many frames were taken (refused ones included: [`Xsk::bad`]).
    /// A frame is given whole, from its Ethernet header, as it lies in the UMEM: one piece,
    /// or, for a frame larger than a chunk (multi-buffer, [`Xsk::multi_buffer`]), a piece
    /// per chunk in order (at most [`MAX_PIECES`]).
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(&[&[u8]])) -> usize {
        let producer = self.rx.producer().load(Ordering::Acquire);
        let ready = self.rx.cursor.ready(producer) as usize;
        if ready == 0 {
            return 0;
        }
        let start = self.rx.cursor.next_to_consume();
        let (ring, cursor) = (self.rx.desc as *const libc::xdp_desc, self.rx.cursor);
        let desc = move |i: usize| -> libc::xdp_desc {
            let slot = cursor.slot(start.wrapping_add(i as u32));
            // SAFETY: the slot is within the RX ring's entries, published by the kernel
            // (below `producer`, loaded with acquire ordering) and not yet released by us.
            unsafe { ring.add(slot).read() }
        };
        // Whole frames only: a frame's last descriptor is the one without XDP_PKT_CONTD.
        let (mut frames, mut taken) = (0, 0);
        let mut pieces: [(usize, usize); MAX_PIECES] = [(0, 0); MAX_PIECES];
        // A frame has at most 18 descriptors (the kernel's MAX_SKB_FRAGS + 1): flushed with
        // room for one more frame left.
        let mut bases = [0u64; 128];
        // Chunks to give back: `bases[..k]`, of which `bases[frame_k..k]` are the current
        // frame's.
        let (mut k, mut frame_k, mut npieces, mut broken) = (0, 0, 0, false);
        let mut i = 0;
        while i < ready && frames < max {
            let d = desc(i);
            i += 1;
            let more = d.options & libc::XDP_PKT_CONTD != 0;
            match frame_span(d.addr, d.len, self.umem.len, self.chunk) {
                Some((range, base)) => {
                    if npieces < MAX_PIECES {
                        pieces[npieces] = (range.start, range.end);
                        npieces += 1;
                    } else {
                        broken = true;
                    }
                    if k < bases.len() {
                        bases[k] = base;
                        k += 1;
                    }
                }
                // Outside the UMEM: nothing to read, no chunk to give back.
                None => broken = true,
            }
            if !more {
                if broken || d.options & !libc::XDP_PKT_CONTD != 0 {
                    self.bad += 1;
                } else {
                    let mut parts: [&[u8]; MAX_PIECES] = [&[]; MAX_PIECES];
                    for (p, &(a, b)) in parts.iter_mut().zip(&pieces[..npieces]) {
                        // SAFETY: `a..b` lies within the UMEM (checked by `frame_span`), in a
                        // chunk the kernel handed us with this descriptor and will not write
                        // until we give it back through the fill ring.
                        *p = unsafe { std::slice::from_raw_parts(self.umem.map.add(a), b - a) };
                    }
                    f(&parts[..npieces]);
                }
                frames += 1;
                taken = i;
                (npieces, broken) = (0, false);
                if k + 32 > bases.len() {
                    let posted = self.post_fill(&bases[..k]);
                    debug_assert_eq!(posted, k);
                    k = 0;
                }
                frame_k = k;
            }
        }
        // A frame whose last descriptor is not published yet is left for the next call;
        // its chunks are not given back yet.
        let publish = self.rx.cursor.consumed(taken as u32);
        self.rx.consumer().store(publish, Ordering::Release);
        let k = frame_k;
        if k > 0 {
            let posted = self.post_fill(&bases[..k]);
            debug_assert_eq!(posted, k);
        }
        frames
    }

    /// Whether frames larger than a chunk arrive in pieces (bound with `XDP_USE_SG`).
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// Whether the kernel bound the socket in zero-copy mode (the NIC writes frames into
    /// the UMEM) rather than copy mode (the kernel copies each frame in).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// How the XDP program was attached.
    pub fn attach_mode(&self) -> Attach {
        self.filter.as_ref().map_or(Attach::Generic, |f| f.mode())
    }

    /// The socket, for `poll` (readable: the RX ring holds frames).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The interface's MTU and MAC.
    pub fn mtu(&self) -> usize {
        self.mtu
    }
    pub fn mac(&self) -> Mac {
        self.mac
    }
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
    /// Bytes per UMEM chunk.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Descriptors refused: outside the UMEM or across a chunk's end.
    pub fn bad(&self) -> u64 {
        self.bad
    }

    /// The kernel's counters for this socket.
    pub fn stats(&self) -> io::Result<XskStats> {
        // SAFETY: an all-zero xdp_statistics is valid; the kernel fills it.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `s`, which we own.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                &mut s as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs,
        })
    }
}

impl Drop for Xsk {
    fn drop(&mut self) {
        // The program first (its link closed: detached); then the fields in their order:
        // the rings, the socket, the UMEM the socket had registered.
        self.filter.take();
    }
}

/// The UMEM mapping, unmapped on drop.
struct Umem {
    map: *mut u8,
    len: usize,
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the UMEM mapping made in `open`, unmapped once, after the socket that
        // registered it was closed (or never bound).
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.len);
        }
    }
}

/// `setsockopt(SOL_XDP, opt, value)`.
fn setsockopt<T>(fd: &OwnedFd, opt: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live `T` of the size passed, read by the kernel only.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            value as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Maps ring `off` (of `entries` entries of `entry` bytes) at page offset `pgoff`.
fn map_ring(
    fd: &OwnedFd,
    off: &libc::xdp_ring_offset,
    entries: u32,
    entry: usize,
    pgoff: i64,
) -> io::Result<Ring> {
    let len = off.desc as usize + entries as usize * entry;
    // SAFETY: maps the ring the kernel made for this socket; the result is checked, and
    // `Ring`'s drop unmaps it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            pgoff,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let map = map as *mut u8;
    let within = |o: u64, n: usize| (o as usize).checked_add(n).is_some_and(|e| e <= len);
    if !within(off.producer, 4)
        || !within(off.consumer, 4)
        || off.producer % 4 != 0
        || off.consumer % 4 != 0
    {
        // SAFETY: the mapping just made, unmapped once.
        unsafe { libc::munmap(map as *mut libc::c_void, len) };
        return Err(io::Error::other(
            "the kernel's ring offsets lie outside the ring",
        ));
    }
    // SAFETY (the three `add`s): every offset is within the mapping (checked above; `desc`
    // by the length's construction).
    Ok(Ring {
        map,
        len,
        producer: unsafe { map.add(off.producer as usize) } as *const AtomicU32,
        consumer: unsafe { map.add(off.consumer as usize) } as *const AtomicU32,
        desc: unsafe { map.add(off.desc as usize) },
        cursor: Cursor::new(entries),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_counts_across_the_wrap_of_its_indices() {
        let mut c = Cursor::new(8);
        // Consumer side near u32::MAX: the producer wrapped past zero.
        c.cons = u32::MAX - 2;
        assert_eq!(c.ready(u32::MAX - 2), 0);
        assert_eq!(c.ready(2), 5);
        assert_eq!(c.slot(c.next_to_consume()), ((u32::MAX - 2) & 7) as usize);
        assert_eq!(c.consumed(5), 2);
        assert_eq!(c.ready(2), 0);
        // A producer a ring and more ahead is not believed.
        assert_eq!(c.ready(2 + 9), 0);
        assert_eq!(c.ready(2 + 8), 8);
        // Producer side: free entries against the consumer's index, across the wrap.
        let mut p = Cursor::new(4);
        p.prod = u32::MAX;
        assert_eq!(p.free(u32::MAX), 4);
        assert_eq!(p.produced(3), 2);
        assert_eq!(p.free(u32::MAX), 1);
        assert_eq!(p.free(1), 3);
        // A consumer ahead of the producer, or a ring over-full: nothing free.
        assert_eq!(p.free(3), 0);
        assert_eq!(p.free(2u32.wrapping_sub(5)), 0);
        assert_eq!(p.slot(p.next_to_produce()), 2);
    }

    #[test]
    fn descriptors_are_checked_against_the_umem_and_their_chunk() {
        let (umem, chunk) = (4 * 2048, 2048);
        assert_eq!(frame_span(256, 1514, umem, chunk), Some((256..1770, 0)));
        assert_eq!(
            frame_span(2048 + 256, 1792, umem, chunk),
            Some((2304..4096, 2048))
        );
        assert_eq!(
            frame_span(3 * 2048 + 256, 0, umem, chunk),
            Some((6400..6400, 6144))
        );
        // Across its chunk's end, past the UMEM, at its end, far beyond it.
        assert_eq!(frame_span(256, 1793, umem, chunk), None);
        assert_eq!(frame_span(3 * 2048 + 256, 1793, umem, chunk), None);
        assert_eq!(frame_span(umem as u64, 1, umem, chunk), None);
        assert_eq!(frame_span(u64::MAX - 4, 100, umem, chunk), None);
        assert_eq!(frame_span(1 << 48 | 256, 60, umem, chunk), None);
        assert_eq!(frame_span(256, u32::MAX, umem, chunk), None);
    }

    #[test]
    fn chunks_hold_a_frame_of_the_mtu_after_the_headroom() {
        assert_eq!(chunk_for(1500), 2048);
        assert_eq!(chunk_for(1774), 2048);
        assert_eq!(chunk_for(1775), 4096);
        assert_eq!(chunk_for(9000), 4096);
        assert!(!needs_pieces(1500, 2048) && !needs_pieces(3822, 4096));
        assert!(needs_pieces(3823, 4096) && needs_pieces(9000, 4096));
        assert_eq!(chunk_for(68), 2048);
    }
}
