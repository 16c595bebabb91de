//! The pipecast frame header: what the raw Ethernet transport puts after the Ethernet header
//! (EtherType 0x88B5). A typed view over bytes in the smoltcp style: [`Frame::new_checked`]
//! validates lengths and version once, getters read fixed ranges, setters exist when the
//! buffer is mutable, and [`Repr`] parses/emits the whole header. Nothing here panics on any
//! input after `new_checked`, and nothing allocates.
//!
//! All integers little-endian. Fixed 100-byte header, then `len` payload bytes:
//!
//! ```text
//! 0  version u8 (3)     1  kind u8 (1 data, 2 ack, 3 credit, 4 done, 5 nop)
//! 2  flags u16          4  lane u16           6  lanes u16
//! 8  job cookie u64     16 communicator u32   20 root u32
//! 24 broadcast seq u64  32 message size u64
//! 40 segment size u32   44 segment index u32  48 byte offset in segment u32
//! 52 segment length u32 56 payload length u16 58 reserved u16
//! 60 credit u32         (frames the sender of this frame will accept beyond `ack`)
//! 64 per-peer seq u64   (0: not sequenced, e.g. a pure ack)
//! 72 cumulative ack u64 (every per-peer seq below it has arrived)
//! 80 selective ack u64  (bit i: seq ack+1+i has arrived)
//! 88 from u32           (the sending rank)
//! 92 to u32             (the receiving rank)
//! 96 checksum u32       (CRC32C of both MACs, bytes 0..96 and the payload)
//! ```
//!
//! **Ranks (version 3).** Several ranks of one host share its NIC, hence its MAC address, so
//! the MACs alone name neither the rank a frame is for nor the rank that sent it. Version 3
//! carries both (`from`, `to`), covered by the checksum. A receiver accepts a frame only when
//! its source MAC is the MAC of the rank it claims to come from, and drops (and counts) one
//! whose `to` is another rank; the raw Ethernet socket's classic BPF filter reads `to` at its
//! fixed offset 92 so that the kernel copies a frame only into the socket of the rank it is
//! for. The header grew by these 8 bytes (92 → 100), so a 1500-byte MTU carries 1400 bytes of
//! payload per frame instead of 1408.
//!
//! **Checksum (version 2).** Ethernet's FCS is checked by the receiving NIC, but a frame can
//! be corrupted after that check or before the sender's NIC computed it (host memory, a
//! switch's buffers that recompute the FCS when they forward), and a veth pair carries no FCS
//! at all. So the header ends with a CRC32C (Castagnoli, as iSCSI, SCTP and ext4 use; the
//! SSE4.2 `crc32` instruction computes it) over a 12-byte pseudo-header of the Ethernet
//! addresses (destination MAC, then source MAC, as TCP's checksum covers the IP addresses),
//! the header's first 96 bytes and the payload. A receiver checks it
//! ([`Frame::checksum_ok`]) before it trusts any field beyond the lengths and version. The
//! addresses are covered because a frame whose source MAC was corrupted into another peer's
//! would otherwise pass as that peer's, and its sequence number would acknowledge a frame the
//! peer never sent. Ethernet padding after the payload is not covered. Version 1 had no
//! checksum and an 88-byte header, version 2 no ranks and a 92-byte header: no two versions
//! ever accept each other's frames.
//!
//! Control messages of the engine: `credit` carries `consumed` in `offset`; `done` carries
//! nothing but lane and broadcast. `nop` fills a sequence number whose content was abandoned.
//!
//! Flags ([`flags`]): `RETRANSMIT` on a frame sent again under its old per-peer seq, with
//! its copy number (2 for the first retransmission, modulo 256) in the high byte of `flags`;
//! `REPAIRED` on an ack whose `per-peer seq` field then names a retransmitted frame that
//! arrived as new (its first copy never did) and whose high byte repeats that copy's number.
//! It tells the sender that the frames it sent before that copy and that are still
//! unacknowledged are lost too.

use super::WireError;

/// Bits of the `flags` field.
pub mod flags {
    /// This frame was sent before under the same per-peer sequence number.
    pub const RETRANSMIT: u16 = 1;
    /// (ack) `peer_seq` is a retransmitted frame that arrived as new.
    pub const REPAIRED: u16 = 2;
    /// The copy number's place: the high byte.
    pub const COPY_SHIFT: u16 = 8;
}

/// Header version this build writes and accepts (3: with the checksum and the ranks).
pub const VERSION: u8 = 3;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 100;
/// Bytes of the header that the checksum covers (all before the checksum field).
const COVERED: usize = 96;
/// Where the `to` rank (u32, little-endian) sits in the header: what a socket filter reads.
pub const TO_OFFSET: usize = 92;

mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
    pub const LANE: Range<usize> = 4..6;
    pub const LANES: Range<usize> = 6..8;
    pub const COOKIE: Range<usize> = 8..16;
    pub const COMM: Range<usize> = 16..20;
    pub const ROOT: Range<usize> = 20..24;
    pub const BSEQ: Range<usize> = 24..32;
    pub const MSIZE: Range<usize> = 32..40;
    pub const SEGMENT: Range<usize> = 40..44;
    pub const INDEX: Range<usize> = 44..48;
    pub const OFFSET: Range<usize> = 48..52;
    pub const SEG_LEN: Range<usize> = 52..56;
    pub const LEN: Range<usize> = 56..58;
    pub const CREDIT: Range<usize> = 60..64;
    pub const PSEQ: Range<usize> = 64..72;
    pub const ACK: Range<usize> = 72..80;
    pub const SACK: Range<usize> = 80..88;
    pub const FROM: Range<usize> = 88..92;
    pub const TO: Range<usize> = super::TO_OFFSET..super::TO_OFFSET + 4;
    pub const CHECKSUM: Range<usize> = 96..100;
}

/// An Ethernet address.
pub type Mac = [u8; 6];

/// The CRC32C of a frame sent from MAC `from` to MAC `to`: the two addresses, its header's
/// first 96 bytes, then its payload.
pub fn checksum(to: &Mac, from: &Mac, header: &[u8], payload: &[u8]) -> u32 {
    let head = &header[..COVERED.min(header.len())];
    let mut sum = crc32c::crc32c(to);
    sum = crc32c::crc32c_append(sum, from);
    sum = crc32c::crc32c_append(sum, head);
    crc32c::crc32c_append(sum, payload)
}

/// What a frame carries. Unknown values are kept, not rejected (the transport drops them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Data,
    Ack,
    Credit,
    Done,
    Nop,
    Unknown(u8),
}

impl From<u8> for Kind {
    fn from(v: u8) -> Kind {
        match v {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Credit,
            4 => Kind::Done,
            5 => Kind::Nop,
            other => Kind::Unknown(other),
        }
    }
}

impl From<Kind> for u8 {
    fn from(k: Kind) -> u8 {
        match k {
            Kind::Data => 1,
            Kind::Ack => 2,
            Kind::Credit => 3,
            Kind::Done => 4,
            Kind::Nop => 5,
            Kind::Unknown(v) => v,
        }
    }
}

/// A pipecast frame header over a byte buffer (the Ethernet payload).
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

macro_rules! getter {
    ($name:ident, $ty:ty, $field:expr) => {
        pub fn $name(&self) -> $ty {
            let b = &self.buffer.as_ref()[$field];
            let mut a = [0u8; std::mem::size_of::<$ty>()];
            a.copy_from_slice(b);
            <$ty>::from_le_bytes(a)
        }
    };
}

macro_rules! setter {
    ($name:ident, $ty:ty, $field:expr) => {
        pub fn $name(&mut self, v: $ty) {
            self.buffer.as_mut()[$field].copy_from_slice(&v.to_le_bytes());
        }
    };
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checks (getters may then panic): use [`Frame::new_checked`]
    /// for anything received.
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole header of a known version and the
    /// payload the header announces, and that a data frame's payload lies within its segment.
    pub fn new_checked(buffer: T) -> Result<Frame<T>, WireError> {
        let frame = Frame { buffer };
        frame.check()?;
        Ok(frame)
    }

    fn check(&self) -> Result<(), WireError> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                got,
            });
        }
        if self.version() != VERSION {
            return Err(WireError::BadVersion {
                got: self.version(),
                want: VERSION,
            });
        }
        let need = HEADER_LEN + usize::from(self.payload_len());
        if got < need {
            return Err(WireError::Truncated { need, got });
        }
        if self.kind() == Kind::Data {
            let end = u64::from(self.offset()) + u64::from(self.payload_len());
            if end > u64::from(self.segment_len()) {
                return Err(WireError::BadLength {
                    what: "data frame payload",
                    detail: format!(
                        "offset {} + length {} exceeds the segment length {}",
                        self.offset(),
                        self.payload_len(),
                        self.segment_len()
                    ),
                });
            }
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    pub fn kind(&self) -> Kind {
        Kind::from(self.buffer.as_ref()[field::KIND])
    }
    getter!(flags, u16, field::FLAGS);
    getter!(lane, u16, field::LANE);
    getter!(lanes, u16, field::LANES);
    getter!(cookie, u64, field::COOKIE);
    getter!(comm, u32, field::COMM);
    getter!(root, u32, field::ROOT);
    getter!(bcast_seq, u64, field::BSEQ);
    getter!(msize, u64, field::MSIZE);
    getter!(segment, u32, field::SEGMENT);
    getter!(index, u32, field::INDEX);
    getter!(offset, u32, field::OFFSET);
    getter!(segment_len, u32, field::SEG_LEN);
    getter!(payload_len, u16, field::LEN);
    getter!(credit, u32, field::CREDIT);
    getter!(peer_seq, u64, field::PSEQ);
    getter!(ack, u64, field::ACK);
    getter!(sack, u64, field::SACK);
    getter!(from, u32, field::FROM);
    getter!(to, u32, field::TO);
    getter!(checksum, u32, field::CHECKSUM);

    /// Whether the checksum field matches the addresses, header and payload of a frame that
    /// arrived from `from` at `to` (call after [`Frame::new_checked`]; a frame that fails
    /// must be dropped unread).
    pub fn checksum_ok(&self, to: &Mac, from: &Mac) -> bool {
        self.buffer.as_ref().len() >= HEADER_LEN
            && self.checksum() == checksum(to, from, self.buffer.as_ref(), self.payload())
    }

    /// The payload bytes (after `new_checked`, exactly `payload_len` of them).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(b.len());
        &b[HEADER_LEN.min(end)..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    pub fn set_kind(&mut self, k: Kind) {
        self.buffer.as_mut()[field::KIND] = k.into();
    }
    setter!(set_flags, u16, field::FLAGS);
    setter!(set_lane, u16, field::LANE);
    setter!(set_lanes, u16, field::LANES);
    setter!(set_cookie, u64, field::COOKIE);
    setter!(set_comm, u32, field::COMM);
    setter!(set_root, u32, field::ROOT);
    setter!(set_bcast_seq, u64, field::BSEQ);
    setter!(set_msize, u64, field::MSIZE);
    setter!(set_segment, u32, field::SEGMENT);
    setter!(set_index, u32, field::INDEX);
    setter!(set_offset, u32, field::OFFSET);
    setter!(set_segment_len, u32, field::SEG_LEN);
    setter!(set_payload_len, u16, field::LEN);
    setter!(set_credit, u32, field::CREDIT);
    setter!(set_peer_seq, u64, field::PSEQ);
    setter!(set_ack, u64, field::ACK);
    setter!(set_sack, u64, field::SACK);
    setter!(set_from, u32, field::FROM);
    setter!(set_to, u32, field::TO);
    setter!(set_checksum, u32, field::CHECKSUM);

    /// Writes the checksum of the header and payload now in the buffer, for a frame from
    /// `from` to `to`.
    pub fn seal(&mut self, to: &Mac, from: &Mac) {
        let sum = checksum(to, from, self.buffer.as_ref(), self.payload());
        self.set_checksum(sum);
    }

    /// The payload bytes, mutable (`payload_len` of them, as far as the buffer reaches).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.payload_len());
        let b = self.buffer.as_mut();
        let end = (HEADER_LEN + len).min(b.len());
        &mut b[HEADER_LEN.min(end)..end]
    }
}

/// A parsed header: every field as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    pub kind: u8,
    pub flags: u16,
    pub lane: u16,
    pub lanes: u16,
    pub cookie: u64,
    pub comm: u32,
    pub root: u32,
    pub bcast_seq: u64,
    pub msize: u64,
    pub segment: u32,
    pub index: u32,
    pub offset: u32,
    pub segment_len: u32,
    pub payload_len: u16,
    pub credit: u32,
    pub peer_seq: u64,
    pub ack: u64,
    pub sack: u64,
    /// The sending rank.
    pub from: u32,
    /// The receiving rank.
    pub to: u32,
}

impl Repr {
    pub fn kind(&self) -> Kind {
        Kind::from(self.kind)
    }

    /// Reads a checked frame's header.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Repr, WireError> {
        frame.check()?;
        Ok(Repr {
            kind: frame.kind().into(),
            flags: frame.flags(),
            lane: frame.lane(),
            lanes: frame.lanes(),
            cookie: frame.cookie(),
            comm: frame.comm(),
            root: frame.root(),
            bcast_seq: frame.bcast_seq(),
            msize: frame.msize(),
            segment: frame.segment(),
            index: frame.index(),
            offset: frame.offset(),
            segment_len: frame.segment_len(),
            payload_len: frame.payload_len(),
            credit: frame.credit(),
            peer_seq: frame.peer_seq(),
            ack: frame.ack(),
            sack: frame.sack(),
            from: frame.from(),
            to: frame.to(),
        })
    }

    /// Bytes a frame with this header needs (header and payload).
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len)
    }

    /// Writes the header (not the payload) into `frame`, whose buffer must hold at least
    /// [`HEADER_LEN`] bytes. The checksum is left zero: write the payload, then
    /// [`Frame::seal`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_version(VERSION);
        frame.set_kind(Kind::from(self.kind));
        frame.set_flags(self.flags);
        frame.set_lane(self.lane);
        frame.set_lanes(self.lanes);
        frame.set_cookie(self.cookie);
        frame.set_comm(self.comm);
        frame.set_root(self.root);
        frame.set_bcast_seq(self.bcast_seq);
        frame.set_msize(self.msize);
        frame.set_segment(self.segment);
        frame.set_index(self.index);
        frame.set_offset(self.offset);
        frame.set_segment_len(self.segment_len);
        frame.set_payload_len(self.payload_len);
        frame.buffer.as_mut()[58..60].fill(0);
        frame.set_credit(self.credit);
        frame.set_peer_seq(self.peer_seq);
        frame.set_ack(self.ack);
        frame.set_sack(self.sack);
        frame.set_from(self.from);
        frame.set_to(self.to);
        frame.set_checksum(0);
    }

    /// The header as bytes, sealed with the checksum of a frame from `from` to `to` with this
    /// header and `payload` (which follows it on the wire; it must be `payload_len` bytes
    /// long).
    pub fn to_bytes(&self, to: &Mac, from: &Mac, payload: &[u8]) -> [u8; HEADER_LEN] {
        let mut b = self.to_bytes_unsealed();
        let sum = checksum(to, from, &b, payload);
        b[field::CHECKSUM].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The header as bytes with a zero checksum.
    pub fn to_bytes_unsealed(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.emit(&mut Frame::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TO: Mac = [2, 0, 0, 0, 0, 1];
    const FROM: Mac = [2, 0, 0, 0, 0, 2];

    fn data(len: u16) -> Repr {
        Repr {
            kind: Kind::Data.into(),
            lane: 1,
            lanes: 2,
            cookie: 0xdead_beef_0123_4567,
            comm: 7,
            root: 3,
            bcast_seq: 1 << 40,
            msize: 1 << 33,
            segment: 65536,
            index: 77,
            offset: 1412,
            segment_len: 65536,
            payload_len: len,
            credit: 4096,
            peer_seq: 99,
            ack: 12,
            sack: 0b1011,
            from: 5,
            to: 0x0102_0304,
            ..Repr::default()
        }
    }

    #[test]
    fn emit_then_parse() {
        let r = data(5);
        let mut buf = vec![0u8; r.buffer_len()];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        r.emit(&mut f);
        f.payload_mut().copy_from_slice(b"hello");
        assert!(
            !f.checksum_ok(&TO, &FROM),
            "emit leaves the checksum to seal"
        );
        f.seal(&TO, &FROM);
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert!(f.checksum_ok(&TO, &FROM));
        // From another MAC, or to another, it does not pass.
        assert!(!f.checksum_ok(&TO, &[2, 0, 0, 0, 0, 3]));
        assert!(!f.checksum_ok(&FROM, &TO));
        assert_eq!(Repr::parse(&f).unwrap(), r);
        assert_eq!((f.from(), f.to()), (5, 0x0102_0304));
        // The socket filter reads `to` at its fixed offset, little-endian.
        assert_eq!(buf[TO_OFFSET..TO_OFFSET + 4], 0x0102_0304u32.to_le_bytes());
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(f.payload(), b"hello");
        assert_eq!(f.kind(), Kind::Data);
        // to_bytes seals the header for the payload that follows it.
        let mut b = r.to_bytes(&TO, &FROM, b"hello").to_vec();
        b.extend_from_slice(b"hello");
        assert_eq!(b, buf);
    }

    /// The checksum is CRC32C (Castagnoli): its standard check value, and a known frame.
    #[test]
    fn the_checksum_is_crc32c() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(
            checksum(b"123456", b"789abc", b"", b""),
            crc32c::crc32c(b"123456789abc")
        );
        assert_eq!(
            checksum(b"123456", b"789abc", b"de", b"f"),
            crc32c::crc32c(b"123456789abcdef")
        );
        // Only the first 96 header bytes count (not the checksum field itself), the ranks
        // included.
        let mut h = [0u8; HEADER_LEN];
        let a = checksum(&TO, &FROM, &h, b"x");
        h[98] = 1;
        assert_eq!(checksum(&TO, &FROM, &h, b"x"), a);
        h[TO_OFFSET] = 1;
        assert_ne!(checksum(&TO, &FROM, &h, b"x"), a);
    }

    /// Ethernet pads short frames: bytes after the payload are not covered.
    #[test]
    fn padding_after_the_payload_is_ignored() {
        let r = Repr {
            kind: Kind::Ack.into(),
            ..Repr::default()
        };
        let mut b = r.to_bytes(&TO, &FROM, &[]).to_vec();
        b.extend_from_slice(&[0xaa; 7]);
        assert!(Frame::new_checked(&b[..]).unwrap().checksum_ok(&TO, &FROM));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            Frame::new_checked(&[1u8; 10][..]).unwrap_err(),
            WireError::Truncated {
                need: HEADER_LEN,
                got: 10
            }
        );
        let mut b = data(100).to_bytes_unsealed().to_vec();
        assert_eq!(
            Frame::new_checked(&b[..]).unwrap_err(),
            WireError::Truncated {
                need: HEADER_LEN + 100,
                got: HEADER_LEN
            }
        );
        b[0] = 9;
        assert!(matches!(
            Frame::new_checked(&b[..]),
            Err(WireError::BadVersion { got: 9, want: 3 })
        ));
        // A version 2 frame (92-byte header, no ranks) is never taken for a version 3 one.
        b[0] = 2;
        assert!(matches!(
            Frame::new_checked(&b[..]),
            Err(WireError::BadVersion { got: 2, want: 3 })
        ));
        let mut r = data(100);
        r.offset = 65500;
        let mut b = r.to_bytes_unsealed().to_vec();
        b.resize(r.buffer_len(), 0);
        let e = Frame::new_checked(&b[..]).unwrap_err();
        assert!(e.to_string().contains("exceeds the segment length"), "{e}");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(f) = Frame::new_checked(&bytes[..]) {
                let r = Repr::parse(&f).unwrap();
                prop_assert_eq!(f.payload().len(), usize::from(r.payload_len));
                prop_assert!(r.buffer_len() <= bytes.len());
            }
        }

        /// Any one changed byte of the header or payload, or of the checksum, is caught.
        #[test]
        fn a_corrupted_byte_is_caught(len in 0u16..1600, at: prop::sample::Index, flip in 1u8..=255,
                                      fill: u8) {
            let mut r = data(len);
            r.offset = 0;
            let payload = vec![fill; usize::from(len)];
            let mut b = r.to_bytes(&TO, &FROM, &payload).to_vec();
            b.extend_from_slice(&payload);
            prop_assert!(Frame::new_checked(&b[..]).unwrap().checksum_ok(&TO, &FROM));
            let i = at.index(b.len());
            b[i] ^= flip;
            let caught = match Frame::new_checked(&b[..]) {
                Ok(f) => !f.checksum_ok(&TO, &FROM),
                Err(_) => true,
            };
            prop_assert!(caught, "byte {} ^ {:#x} not caught", i, flip);
        }

        #[test]
        fn round_trip(kind in 1u8..8, flags: u16, lane: u16, lanes: u16, cookie: u64, comm: u32,
                      root: u32, bcast_seq: u64, msize: u64, segment: u32, index: u32,
                      seg_len in 0u32..100_000, off in 0u32..100_000, len in 0u16..2000,
                      credit: u32, peer_seq: u64, ack: u64, sack: u64, from: u32, to: u32) {
            let (offset, payload_len) = if kind == 1 {
                let off = off.min(seg_len);
                (off, len.min((seg_len - off).min(u32::from(u16::MAX)) as u16))
            } else {
                (off, len)
            };
            let r = Repr { kind, flags, lane, lanes, cookie, comm, root, bcast_seq, msize,
                segment, index, offset, segment_len: seg_len, payload_len, credit, peer_seq,
                ack, sack, from, to };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut Frame::new_unchecked(&mut buf[..]));
            let f = Frame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&f).unwrap(), r);
        }
    }
}
