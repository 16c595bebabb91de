//! A batch of received frames: [`Carrier::recv_batch`](super::Carrier::recv_batch) fills up to
//! [`Batch::capacity`] slots at once (the UDP carrier with one `recvmmsg(2)` per socket), so
//! a receiving rank pays one system call per batch of datagrams rather than one per datagram.
//!
//! Every slot holds one frame's bytes as they arrived (cut at the slot's length: a longer
//! datagram then fails [`accept`](super::accept)'s bounds check), its length and its source.
//! Nothing in a slot is trusted: the caller checks each with `accept`, as a frame of
//! [`Carrier::recv`](super::Carrier::recv).

use super::Source;

/// Frames received at once, each in a slot of fixed length.
#[derive(Debug)]
pub struct Batch {
    /// `capacity` slots of `slot` bytes each, back to back.
    bytes: Vec<u8>,
    slot: usize,
    /// Per filled slot: its length and source.
    filled: Vec<(usize, Source)>,
}

impl Batch {
    /// A batch of `capacity` slots (at least 1) of `slot` bytes each (at least 1).
    pub fn new(capacity: usize, slot: usize) -> Batch {
        let (capacity, slot) = (capacity.max(1), slot.max(1));
        Batch {
            bytes: vec![0; capacity * slot],
            slot,
            filled: Vec::with_capacity(capacity),
        }
    }

    /// Slots in all.
    pub fn capacity(&self) -> usize {
        self.bytes.len() / self.slot
    }

    /// Bytes per slot.
    pub fn slot_len(&self) -> usize {
        self.slot
    }

    /// Slots filled since the last [`Batch::clear`].
    pub fn len(&self) -> usize {
        self.filled.len()
    }

    pub fn is_empty(&self) -> bool {
        self.filled.is_empty()
    }

    /// Empties the batch (its slots are written again).
    pub fn clear(&mut self) {
        self.filled.clear();
    }

    /// Filled slot `i`: its bytes and source.
    pub fn get(&self, i: usize) -> (&[u8], Source) {
        let (len, source) = self.filled[i];
        let at = i * self.slot;
        (&self.bytes[at..at + len.min(self.slot)], source)
    }

    /// The next free slot, to fill; [`Batch::commit`] records it. `None` when full.
    pub fn next_free(&mut self) -> Option<&mut [u8]> {
        let i = self.filled.len();
        (i < self.capacity()).then(|| &mut self.bytes[i * self.slot..(i + 1) * self.slot])
    }

    /// Records that the slot [`Batch::next_free`] gave holds `len` bytes from `source`.
    pub fn commit(&mut self, len: usize, source: Source) {
        if self.filled.len() < self.capacity() {
            self.filled.push((len.min(self.slot), source));
        }
    }

    /// The free slots' memory from the first free one on (`free` slots of
    /// [`Batch::slot_len`] bytes), for a carrier that fills several at once and then
    /// [`commit`](Batch::commit)s them in order.
    pub fn free_region(&mut self) -> (&mut [u8], usize) {
        let at = self.filled.len() * self.slot;
        let free = self.capacity() - self.filled.len();
        (&mut self.bytes[at..], free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV4;

    #[test]
    fn slots_fill_in_order_and_cut_what_is_too_long() {
        let mut b = Batch::new(2, 8);
        let src = Source::Udp(SocketAddrV4::new([10, 0, 0, 1].into(), 7));
        assert_eq!((b.capacity(), b.len()), (2, 0));
        b.next_free().unwrap()[..3].copy_from_slice(b"abc");
        b.commit(3, src);
        let s = b.next_free().unwrap();
        s.copy_from_slice(b"12345678");
        b.commit(100, src);
        assert!(b.next_free().is_none());
        b.commit(1, src); // full: ignored
        assert_eq!(b.len(), 2);
        assert_eq!(b.get(0), (&b"abc"[..], src));
        assert_eq!(b.get(1).0, b"12345678");
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.free_region().1, 2);
    }
}
