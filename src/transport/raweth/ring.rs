//! A PACKET_MMAP receive ring (TPACKET_V2) for a [`RawSocket`]: the kernel writes frames
//! straight into memory shared with us, so receiving costs no system call per batch (DEPS.md:
//! 440k frames/s with rings versus 266k with `recvmmsg`). V2 rather than V3: V3 hands over
//! whole blocks, which adds up to its block-retire timeout of latency to every ack.
//!
//! Each slot starts with a `tpacket2_hdr` (status, lengths, offsets), then the sender's
//! `sockaddr_ll`, then the frame at `tp_net`. A slot whose status has `TP_STATUS_USER` is
//! ours until we write `TP_STATUS_KERNEL` back. Every offset and length the kernel writes is
//! checked against the slot before the frame is read.

use super::socket::{Addressed, Mac, RawSocket};
use crate::transport::TransportError;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

const TPACKET_V2: i32 = 1;
pub(crate) const TP_STATUS_KERNEL: u32 = 0;
pub(crate) const TP_STATUS_USER: u32 = 1;
/// `tp_status` bit: the frame was longer than the slot (`tp_snaplen < tp_len`).
pub(crate) const TP_STATUS_COPY: u32 = 1 << 1;
/// sizeof(struct tpacket2_hdr), already a multiple of TPACKET_ALIGNMENT (16).
const HDR2: usize = 32;
/// sizeof(struct sockaddr_ll).
pub(crate) const SLL: usize = 20;

/// `struct tpacket_req` (used for TPACKET_V1/V2 rings).
#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// Asks the kernel for a receive ring of `version` (`TPACKET_V2`, `TPACKET_V3`) on `sock`,
/// described by `req` (its `struct tpacket_req` or `tpacket_req3`), and maps its `len` bytes.
/// The mapping belongs to the caller, who unmaps it (`munmap(map, len)`).
pub(crate) fn map_rx_ring<R: RingRequest>(
    sock: &RawSocket,
    version: i32,
    req: &R,
    len: usize,
) -> io::Result<*mut u8> {
    sock.set_packet_opt(libc::PACKET_VERSION, &version.to_ne_bytes())?;
    // SAFETY: `R` is a live `repr(C)` struct of `u32`s only (`RingRequest`), so it has no
    // padding and every byte is initialised; viewing it as bytes for the call.
    let req_bytes = unsafe {
        std::slice::from_raw_parts(req as *const R as *const u8, std::mem::size_of::<R>())
    };
    sock.set_packet_opt(libc::PACKET_RX_RING, req_bytes)?;
    // SAFETY: maps the ring the kernel just allocated for this socket; the result is
    // checked, and the caller unmaps it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            sock.raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(map as *mut u8)
}

/// A ring's request to the kernel (`struct tpacket_req`, `struct tpacket_req3`).
///
/// # Safety
/// Implement it only for a `#[repr(C)]` struct whose fields are all `u32`.
pub(crate) unsafe trait RingRequest {}

// SAFETY: `repr(C)`, four `u32`s.
unsafe impl RingRequest for TpacketReq {}

/// The mapped ring.
pub struct RxRing {
    map: *mut u8,
    len: usize,
    block_size: usize,
    frame_size: usize,
    per_block: usize,
    frames: usize,
    next: usize,
}

// SAFETY: the ring is plain shared memory owned by this value; nothing in it is tied to the
// creating thread.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Sets up a ring of about `bytes` on `sock`, with slots that hold a frame of the
    /// socket's MTU.
    pub fn new(sock: &RawSocket, bytes: usize) -> Result<RxRing, TransportError> {
        let what = || format!("PACKET_MMAP receive ring on {}", sock.ifname());
        let err = |e: io::Error| TransportError::Setup {
            what: what(),
            error: e.to_string(),
        };
        let frame_size = (HDR2 + SLL + 64 + sock.mtu()).next_power_of_two().max(2048);
        let block_size = frame_size.max(64 << 10);
        let block_nr = (bytes / block_size).max(2);
        let req = TpacketReq {
            block_size: block_size as u32,
            block_nr: block_nr as u32,
            frame_size: frame_size as u32,
            frame_nr: (block_size / frame_size * block_nr) as u32,
        };
        let len = block_size * block_nr;
        let map = map_rx_ring(sock, TPACKET_V2, &req, len).map_err(err)?;
        Ok(RxRing {
            map,
            len,
            block_size,
            frame_size,
            per_block: block_size / frame_size,
            frames: req.frame_nr as usize,
            next: 0,
        })
    }

    fn slot(&self, i: usize) -> *mut u8 {
        let off = (i / self.per_block) * self.block_size + (i % self.per_block) * self.frame_size;
        debug_assert!(off + self.frame_size <= self.len);
        // SAFETY: `off + frame_size <= len` by construction of the geometry.
        unsafe { self.map.add(off) }
    }

    fn status(&self, slot: *mut u8) -> &AtomicU32 {
        // SAFETY: the slot starts with the 4-byte aligned u32 tp_status, which the kernel
        // and we access atomically (the kernel's smp barriers pair with Acquire/Release).
        unsafe { &*(slot as *const AtomicU32) }
    }

    /// Frames the ring holds.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Whether a frame is waiting.
    pub fn ready(&self) -> bool {
        self.status(self.slot(self.next)).load(Ordering::Acquire) & TP_STATUS_USER != 0
    }

    /// Hands up to `max` waiting frames to `f` (source MAC, addressing, cut short, bytes)
    /// and returns them to the kernel; returns how many were taken.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(Mac, Addressed, bool, &[u8])) -> usize {
        let mut n = 0;
        while n < max {
            let slot = self.slot(self.next);
            let status = self.status(slot).load(Ordering::Acquire);
            if status & TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the slot is ours (TP_STATUS_USER) and `frame_size` bytes long.
            let bytes = unsafe { std::slice::from_raw_parts(slot as *const u8, self.frame_size) };
            let u16_at = |i: usize| u16::from_ne_bytes([bytes[i], bytes[i + 1]]) as usize;
            let u32_at = |i: usize| {
                u32::from_ne_bytes(bytes[i..i + 4].try_into().expect("4 bytes")) as usize
            };
            let (len, snaplen, net) = (u32_at(4), u32_at(8), u16_at(14));
            let sll = &bytes[HDR2..HDR2 + SLL];
            let pkttype = sll[10];
            if pkttype != libc::PACKET_OUTGOING && net <= self.frame_size {
                let end = net.saturating_add(snaplen).min(self.frame_size);
                let mut mac = [0u8; 6];
                mac.copy_from_slice(&sll[12..18]);
                let to = if pkttype == libc::PACKET_OTHERHOST {
                    Addressed::OtherHost
                } else {
                    Addressed::Us
                };
                let cut = status & TP_STATUS_COPY != 0 || snaplen < len;
                f(mac, to, cut, &bytes[net..end]);
            }
            self.status(slot).store(TP_STATUS_KERNEL, Ordering::Release);
            self.next = (self.next + 1) % self.frames;
            n += 1;
        }
        n
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: `map`/`len` are the mapping made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.len);
        }
    }
}
