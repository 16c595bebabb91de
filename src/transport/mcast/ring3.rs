//! A TPACKET_V3 receive ring for a raw Ethernet socket (PACKET_MMAP, version 3): the kernel
//! writes frames into blocks of memory shared with us and hands over a whole block at a time
//! (when it is full, or when its retire timeout ran out), so a receiver takes hundreds of
//! frames per wake-up with no system call and no copy but its own. The raw Ethernet link's
//! ring ([`RxRing`](crate::transport::raweth::ring::RxRing)) is version 2, one slot per frame,
//! because a block's timeout would delay its acks; group data has no such hurry, and the
//! floor measurement (docs/multicast.md, "Receivers' CPU: the floor of the kernel's receive
//! paths") compares both.
//!
//! A block starts with a `tpacket_block_desc` (status, frame count, offset of the first
//! frame); each frame with a `tpacket3_hdr` (offset of the next, lengths, offset of the data)
//! and the sender's `sockaddr_ll`. A block whose status has `TP_STATUS_USER` is ours until we
//! write `TP_STATUS_KERNEL` back. Nothing the kernel wrote is trusted: every offset, count
//! and length is checked against the block before a byte of a frame is read, and a block
//! that fails is skipped whole.

use crate::transport::raweth::ring::{
    map_rx_ring, RingRequest, SLL, TP_STATUS_COPY, TP_STATUS_KERNEL, TP_STATUS_USER,
};
use crate::transport::raweth::socket::{Addressed, Mac, RawSocket};
use crate::transport::TransportError;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

const TPACKET_V3: i32 = 2;
/// Offsets in `struct tpacket_block_desc` (version, offset_to_priv, then `tpacket_hdr_v1`).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST: usize = 16;
/// sizeof(struct tpacket_block_desc) with `tpacket_hdr_v1` (48).
const BLOCK_DESC: usize = 48;
/// sizeof(struct tpacket3_hdr), already TPACKET_ALIGNed (48); the `sockaddr_ll` follows.
const HDR3: usize = 48;

/// `struct tpacket_req3`.
#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

// SAFETY: `repr(C)`, seven `u32`s.
unsafe impl RingRequest for TpacketReq3 {}

/// What [`Ring3::drain`] found wrong in blocks the kernel handed over (never expected).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ring3Faults {
    /// Blocks skipped whole: a count or offset past the block.
    pub blocks: u64,
}

/// The mapped ring.
pub struct Ring3 {
    map: *mut u8,
    block_size: usize,
    blocks: usize,
    next: usize,
    faults: Ring3Faults,
}

// SAFETY: the ring is plain shared memory owned by this value; nothing in it is tied to the
// creating thread.
unsafe impl Send for Ring3 {}

impl Ring3 {
    /// A ring of `blocks` blocks of `block_size` bytes (a multiple of the page size; at least
    /// 2 blocks) on `sock`, each block handed over when full or `retire_ms` after its first
    /// frame.
    pub fn new(
        sock: &RawSocket,
        block_size: usize,
        blocks: usize,
        retire_ms: u32,
    ) -> Result<Ring3, TransportError> {
        let err = |e: io::Error| TransportError::Setup {
            what: format!("TPACKET_V3 receive ring on {}", sock.ifname()),
            error: e.to_string(),
        };
        let frame_size = (HDR3 + SLL + 64 + sock.mtu()).next_power_of_two().max(2048);
        let block_size = block_size.max(frame_size).next_power_of_two().max(4096);
        let blocks = blocks.max(2);
        let req = TpacketReq3 {
            block_size: block_size as u32,
            block_nr: blocks as u32,
            frame_size: frame_size as u32,
            frame_nr: (block_size / frame_size * blocks) as u32,
            retire_blk_tov: retire_ms.max(1),
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        let map = map_rx_ring(sock, TPACKET_V3, &req, block_size * blocks).map_err(err)?;
        Ok(Ring3 {
            map,
            block_size,
            blocks,
            next: 0,
            faults: Ring3Faults::default(),
        })
    }

    fn status(&self, block: usize) -> &AtomicU32 {
        // SAFETY: `block < blocks`, so the block's 4-byte aligned `block_status` (offset 8 of a
        // page-aligned block) lies in the mapping; the kernel and we access it atomically
        // (its barriers pair with Acquire/Release).
        unsafe { &*(self.map.add(block * self.block_size + BLOCK_STATUS) as *const AtomicU32) }
    }

    /// Whether a block waits.
    pub fn ready(&self) -> bool {
        self.status(self.next).load(Ordering::Acquire) & TP_STATUS_USER != 0
    }

    /// What was found wrong so far.
    pub fn faults(&self) -> Ring3Faults {
        self.faults
    }

    /// Hands the frames of up to `max_blocks` waiting blocks to `f` (source MAC, addressing,
    /// cut short, bytes after the Ethernet header) and returns the blocks to the kernel;
    /// returns how many frames were handed. Frames this host sent (packet taps) are left out.
    pub fn drain(
        &mut self,
        max_blocks: usize,
        mut f: impl FnMut(Mac, Addressed, bool, &[u8]),
    ) -> usize {
        let mut frames = 0;
        for _ in 0..max_blocks.max(1) {
            let status = self.status(self.next).load(Ordering::Acquire);
            if status & TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the block is ours (TP_STATUS_USER, read with Acquire) until we write
            // TP_STATUS_KERNEL back below, and `block_size` bytes of the mapping.
            let block = unsafe {
                std::slice::from_raw_parts(
                    self.map.add(self.next * self.block_size) as *const u8,
                    self.block_size,
                )
            };
            match frames_of(block, &mut f) {
                Some(n) => frames += n,
                None => self.faults.blocks += 1,
            }
            self.status(self.next)
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.next = (self.next + 1) % self.blocks;
        }
        frames
    }
}

fn u32_at(b: &[u8], i: usize) -> Option<usize> {
    Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?) as usize)
}

fn u16_at(b: &[u8], i: usize) -> Option<usize> {
    Some(u16::from_ne_bytes(b.get(i..i + 2)?.try_into().ok()?) as usize)
}

/// The frames of one block handed to `f`, every offset and length checked against the block
/// first; `None` (and nothing more handed) at the first that does not fit.
fn frames_of(block: &[u8], f: &mut impl FnMut(Mac, Addressed, bool, &[u8])) -> Option<usize> {
    let count = u32_at(block, BLOCK_NUM_PKTS)?;
    let mut at = u32_at(block, BLOCK_FIRST)?;
    let mut handed = 0;
    for i in 0..count {
        if at < BLOCK_DESC || at + HDR3 + SLL > block.len() {
            return None;
        }
        let hdr = &block[at..at + HDR3 + SLL];
        let (next, snaplen, len, status) = (
            u32_at(hdr, 0)?,
            u32_at(hdr, 12)?,
            u32_at(hdr, 16)?,
            u32_at(hdr, 20)? as u32,
        );
        let net = at + u16_at(hdr, 26)?;
        let end = net.checked_add(snaplen)?;
        if net < at + HDR3 + SLL || end > block.len() {
            return None;
        }
        let sll = &hdr[HDR3..HDR3 + SLL];
        let pkttype = sll[10];
        if pkttype != libc::PACKET_OUTGOING {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&sll[12..18]);
            let to = if pkttype == libc::PACKET_OTHERHOST {
                Addressed::OtherHost
            } else {
                Addressed::Us
            };
            let cut = status & TP_STATUS_COPY != 0 || snaplen < len;
            f(mac, to, cut, &block[net..end]);
            handed += 1;
        }
        if i + 1 < count {
            // The next frame lies further on in the block (checked at the loop's top).
            if next == 0 {
                return None;
            }
            at = at.checked_add(next)?;
        }
    }
    Some(handed)
}

impl Drop for Ring3 {
    fn drop(&mut self) {
        // SAFETY: `map` is the mapping of `block_size * blocks` bytes made in `new`,
        // unmapped once.
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.block_size * self.blocks);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block as the kernel lays it out: descriptor, then frames of `payloads` from `mac`.
    fn block(payloads: &[&[u8]], mac: Mac) -> Vec<u8> {
        let mut b = vec![0u8; 8192];
        b[BLOCK_NUM_PKTS..BLOCK_NUM_PKTS + 4]
            .copy_from_slice(&(payloads.len() as u32).to_ne_bytes());
        b[BLOCK_FIRST..BLOCK_FIRST + 4].copy_from_slice(&(BLOCK_DESC as u32).to_ne_bytes());
        let mut at = BLOCK_DESC;
        for (i, p) in payloads.iter().enumerate() {
            let net = HDR3 + SLL + 2; // as the kernel aligns it
            let size = (net + p.len()).next_multiple_of(16);
            let next = if i + 1 < payloads.len() { size } else { 0 };
            b[at..at + 4].copy_from_slice(&(next as u32).to_ne_bytes());
            b[at + 12..at + 16].copy_from_slice(&(p.len() as u32).to_ne_bytes());
            b[at + 16..at + 20].copy_from_slice(&(p.len() as u32).to_ne_bytes());
            b[at + 26..at + 28].copy_from_slice(&(net as u16).to_ne_bytes());
            b[at + HDR3 + 10] = libc::PACKET_MULTICAST;
            b[at + HDR3 + 12..at + HDR3 + 18].copy_from_slice(&mac);
            b[at + net..at + net + p.len()].copy_from_slice(p);
            at += size;
        }
        b
    }

    fn collect(b: &[u8]) -> Option<Vec<(Mac, Vec<u8>)>> {
        let mut got = Vec::new();
        frames_of(b, &mut |mac, _, cut, bytes| {
            assert!(!cut);
            got.push((mac, bytes.to_vec()));
        })?;
        Some(got)
    }

    #[test]
    fn a_block_yields_its_frames_in_order() {
        let mac = [2, 0, 0, 0, 0, 7];
        let b = block(&[b"first", b"", b"third frame"], mac);
        let got = collect(&b).unwrap();
        assert_eq!(
            got,
            vec![
                (mac, b"first".to_vec()),
                (mac, vec![]),
                (mac, b"third frame".to_vec())
            ]
        );
    }

    #[test]
    fn offsets_and_lengths_past_the_block_are_refused() {
        let mac = [2, 0, 0, 0, 0, 7];
        let good = block(&[b"first", b"second"], mac);
        // A count larger than the frames there: the walk runs off the chain.
        let mut b = good.clone();
        b[BLOCK_NUM_PKTS..BLOCK_NUM_PKTS + 4].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(collect(&b), None);
        // A first frame past the block.
        let mut b = good.clone();
        b[BLOCK_FIRST..BLOCK_FIRST + 4].copy_from_slice(&(8190u32).to_ne_bytes());
        assert_eq!(collect(&b), None);
        // A snap length past the block.
        let mut b = good.clone();
        b[BLOCK_DESC + 12..BLOCK_DESC + 16].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(collect(&b), None);
        // Data that starts inside the frame's header.
        let mut b = good.clone();
        b[BLOCK_DESC + 26..BLOCK_DESC + 28].copy_from_slice(&4u16.to_ne_bytes());
        assert_eq!(collect(&b), None);
        // A next offset that points back (0) while frames remain.
        let mut b = good;
        b[BLOCK_DESC..BLOCK_DESC + 4].copy_from_slice(&0u32.to_ne_bytes());
        assert_eq!(collect(&b), None);
    }
}
