//! The multicast frame: what pipecast's multicast carriers put in a UDP datagram (to the job's
//! group or a rank's unicast address) or after the Ethernet header of a raw frame of
//! EtherType 0x88B6 (to the job's group MAC or a rank's MAC). One format for both carriers:
//! the broadcast's segments to the group, and the reliability protocol's repairs, NACKs,
//! acknowledgements, syncs and aborts (`engine::multicast`), and the setup probe.
//!
//! A typed view in the smoltcp style, as [`super::frame`]: [`Frame::new_checked`] checks the
//! lengths, version and kind once, getters read fixed ranges and never panic after it,
//! [`Repr`] parses and emits the whole header. Nothing allocates.
//!
//! All integers little-endian. Fixed 64-byte header, then `count` payload bytes for data:
//!
//! ```text
//! 0  version u8 (1)     1  kind u8 (1 data, 2 nack, 3 ack, 4 sync, 5 probe, 6 abort)
//! 2  flags u16          (bit 0: a repair; bit 1: an ack that asks for an answer;
//!                        bit 2: the checksum covers the header only, see below)
//! 4  from u32           (the sending rank)
//! 8  job cookie u64     16 broadcast seq u64     24 message size u64
//! 32 segment size u32   36 index u32 (data: the segment; nack: the first one missing)
//! 40 count u32          (data: payload bytes; nack: segments missing from `index` on)
//! 44 root u32
//! 48 value u64          (ack: segments 0..value held by the sender's whole subtree;
//!                        sync: segments the root sent; abort: the rank that is gone;
//!                        probe: a nonce)
//! 56 to u32             (the receiving rank; u32::MAX: the group)
//! 60 checksum u32       (CRC32C of bytes 0..60, then the payload)
//! ```
//!
//! A frame of another job (its cookie; the group is derived from the cookie, so two jobs
//! share one only on a hash collision) is dropped by the receiver, never read further. The
//! checksum is checked before any field beyond the lengths is trusted: a veth pair has no FCS,
//! and UDP's checksum is optional on IPv4.
//!
//! **Header-only checksum** ([`flags::HEADER_SUM`]): a data frame may leave its payload out
//! of the CRC when the carrier checksums it already: the UDP carrier, whose datagrams Linux
//! always sends with a UDP checksum over the whole datagram and whose receivers' kernels drop
//! one that fails it. The payload's CRC was a tenth of a receiving rank's CPU (more than the
//! copy it guards; docs/multicast.md, "Receivers' CPU"). The raw Ethernet carrier never sets
//! it (a veth pair verifies no FCS), and a receiver whose carrier does not checksum drops a
//! frame that carries it (`transport::mcast::accept_with`).

use super::WireError;

/// Header version this build writes and accepts.
pub const VERSION: u8 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 64;
/// The `to` of a frame sent to the whole group.
pub const GROUP: u32 = u32::MAX;
/// Bytes of the header that the checksum covers.
const COVERED: usize = 60;

/// Bits of the `flags` field.
pub mod flags {
    /// A data frame sent again, to one rank or the group.
    pub const REPAIR: u16 = 1;
    /// An acknowledgement that asks its receiver to answer (a keepalive).
    pub const PING: u16 = 2;
    /// The checksum covers the header only: the carrier's own checksum covers the payload.
    pub const HEADER_SUM: u16 = 4;
}

mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
    pub const FROM: Range<usize> = 4..8;
    pub const COOKIE: Range<usize> = 8..16;
    pub const BSEQ: Range<usize> = 16..24;
    pub const MSIZE: Range<usize> = 24..32;
    pub const SEGMENT: Range<usize> = 32..36;
    pub const INDEX: Range<usize> = 36..40;
    pub const COUNT: Range<usize> = 40..44;
    pub const ROOT: Range<usize> = 44..48;
    pub const VALUE: Range<usize> = 48..56;
    pub const TO: Range<usize> = 56..60;
    pub const CHECKSUM: Range<usize> = 60..64;
}

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Data = 1,
    Nack = 2,
    Ack = 3,
    Sync = 4,
    Probe = 5,
    Abort = 6,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Data,
            2 => Kind::Nack,
            3 => Kind::Ack,
            4 => Kind::Sync,
            5 => Kind::Probe,
            6 => Kind::Abort,
            _ => return None,
        })
    }
}

/// A typed view of a multicast frame over any bytes.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

fn u32_at(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], r: std::ops::Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[r]);
    u64::from_le_bytes(a)
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Checks that `buffer` holds a whole header of this version and kind, and, for data, at
    /// least the `count` payload bytes it announces (more is Ethernet padding, ignored).
    pub fn new_checked(buffer: T) -> Result<Frame<T>, WireError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                got: b.len(),
            });
        }
        if b[field::VERSION] != VERSION {
            return Err(WireError::BadVersion {
                got: b[field::VERSION],
                want: VERSION,
            });
        }
        let Some(kind) = Kind::from_u8(b[field::KIND]) else {
            return Err(WireError::Invalid {
                what: "multicast frame kind",
                detail: format!("{} is none of 1..=6", b[field::KIND]),
            });
        };
        if kind == Kind::Data {
            let need = HEADER_LEN as u64 + u64::from(u32_at(b, field::COUNT));
            if (b.len() as u64) < need {
                return Err(WireError::Truncated {
                    need: need.min(usize::MAX as u64) as usize,
                    got: b.len(),
                });
            }
        }
        Ok(Frame { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn kind(&self) -> Kind {
        Kind::from_u8(self.b()[field::KIND]).unwrap_or(Kind::Probe)
    }
    pub fn flags(&self) -> u16 {
        u16::from_le_bytes([
            self.b()[field::FLAGS.start],
            self.b()[field::FLAGS.start + 1],
        ])
    }
    pub fn from(&self) -> u32 {
        u32_at(self.b(), field::FROM)
    }
    pub fn cookie(&self) -> u64 {
        u64_at(self.b(), field::COOKIE)
    }
    pub fn to(&self) -> u32 {
        u32_at(self.b(), field::TO)
    }

    /// The data payload (empty for other kinds).
    pub fn payload(&self) -> &[u8] {
        if self.kind() != Kind::Data {
            return &[];
        }
        let n = u32_at(self.b(), field::COUNT) as usize;
        &self.b()[HEADER_LEN..HEADER_LEN + n]
    }

    /// Whether the checksum matches the header and payload (the header alone when the frame
    /// says so: [`Frame::header_sum`]).
    pub fn checksum_ok(&self) -> bool {
        let payload = if self.header_sum() {
            &[]
        } else {
            self.payload()
        };
        u32_at(self.b(), field::CHECKSUM) == checksum(&self.b()[..HEADER_LEN], payload)
    }

    /// Whether the checksum leaves the payload to the carrier ([`flags::HEADER_SUM`]).
    pub fn header_sum(&self) -> bool {
        self.flags() & flags::HEADER_SUM != 0
    }
}

/// The CRC32C of a frame: its header's first 60 bytes, then its payload.
pub fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    let sum = crc32c::crc32c(&header[..COVERED.min(header.len())]);
    crc32c::crc32c_append(sum, payload)
}

/// The parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub kind: Kind,
    pub flags: u16,
    pub from: u32,
    pub cookie: u64,
    pub bseq: u64,
    pub msize: u64,
    pub segment: u32,
    pub index: u32,
    pub count: u32,
    pub root: u32,
    pub value: u64,
    pub to: u32,
}

impl Default for Repr {
    fn default() -> Repr {
        Repr {
            kind: Kind::Probe,
            flags: 0,
            from: 0,
            cookie: 0,
            bseq: 0,
            msize: 0,
            segment: 0,
            index: 0,
            count: 0,
            root: 0,
            value: 0,
            to: GROUP,
        }
    }
}

impl Repr {
    /// The header of a checked frame (its checksum is the caller's to check first).
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Repr {
        let b = frame.b();
        Repr {
            kind: frame.kind(),
            flags: frame.flags(),
            from: frame.from(),
            cookie: frame.cookie(),
            bseq: u64_at(b, field::BSEQ),
            msize: u64_at(b, field::MSIZE),
            segment: u32_at(b, field::SEGMENT),
            index: u32_at(b, field::INDEX),
            count: u32_at(b, field::COUNT),
            root: u32_at(b, field::ROOT),
            value: u64_at(b, field::VALUE),
            to: frame.to(),
        }
    }

    /// Writes the header for `payload` (a data frame's `count` must be its length) with its
    /// checksum into `out`, which must hold [`HEADER_LEN`] bytes.
    pub fn emit(&self, out: &mut [u8], payload: &[u8]) -> Result<(), WireError> {
        if out.len() < HEADER_LEN {
            return Err(WireError::BufferTooSmall {
                need: HEADER_LEN,
                got: out.len(),
            });
        }
        let o = &mut out[..HEADER_LEN];
        o[field::VERSION] = VERSION;
        o[field::KIND] = self.kind as u8;
        o[field::FLAGS].copy_from_slice(&self.flags.to_le_bytes());
        o[field::FROM].copy_from_slice(&self.from.to_le_bytes());
        o[field::COOKIE].copy_from_slice(&self.cookie.to_le_bytes());
        o[field::BSEQ].copy_from_slice(&self.bseq.to_le_bytes());
        o[field::MSIZE].copy_from_slice(&self.msize.to_le_bytes());
        o[field::SEGMENT].copy_from_slice(&self.segment.to_le_bytes());
        o[field::INDEX].copy_from_slice(&self.index.to_le_bytes());
        o[field::COUNT].copy_from_slice(&self.count.to_le_bytes());
        o[field::ROOT].copy_from_slice(&self.root.to_le_bytes());
        o[field::VALUE].copy_from_slice(&self.value.to_le_bytes());
        o[field::TO].copy_from_slice(&self.to.to_le_bytes());
        let payload = if self.kind == Kind::Data && self.flags & flags::HEADER_SUM == 0 {
            payload
        } else {
            &[]
        };
        let sum = checksum(o, payload);
        o[field::CHECKSUM].copy_from_slice(&sum.to_le_bytes());
        Ok(())
    }

    /// The header as bytes.
    pub fn to_bytes(&self, payload: &[u8]) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.emit(&mut b, payload)
            .expect("the array holds a header");
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(payload: &[u8]) -> Vec<u8> {
        let repr = Repr {
            kind: Kind::Data,
            flags: flags::REPAIR,
            from: 3,
            cookie: 0xfeed,
            bseq: 9,
            msize: 100,
            segment: 40,
            index: 2,
            count: payload.len() as u32,
            root: 1,
            value: 0,
            to: 5,
        };
        let mut b = repr.to_bytes(payload).to_vec();
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn round_trip_and_checksum() {
        let b = data(b"twenty bytes of data");
        let f = Frame::new_checked(&b[..]).unwrap();
        assert!(f.checksum_ok());
        let r = Repr::parse(&f);
        assert_eq!(
            (r.kind, r.from, r.to, r.index, r.count),
            (Kind::Data, 3, 5, 2, 20)
        );
        assert_eq!(f.payload(), b"twenty bytes of data");
        each_byte_flipped(&b, |i, f| assert!(!f.checksum_ok(), "byte {i}"));
    }

    /// Flips one bit of every byte of `b` but the checksum's own (60..64) in turn: a frame
    /// that still parses goes to `check`; one that does not must have had a length or the
    /// version changed.
    fn each_byte_flipped(b: &[u8], check: impl Fn(usize, Frame<&[u8]>)) {
        for i in (0..b.len()).filter(|i| !(60..64).contains(i)) {
            let mut c = b.to_vec();
            c[i] ^= 0x10;
            match Frame::new_checked(&c[..]) {
                Ok(f) => check(i, f),
                Err(_) => assert!(i < 2 || (40..44).contains(&i), "byte {i}"),
            }
        }
    }

    #[test]
    fn a_header_only_checksum_covers_the_header_and_says_so() {
        let payload = b"twenty bytes of data";
        let mut b = data(payload);
        let mut r = Repr::parse(&Frame::new_checked(&b[..]).unwrap());
        assert!(!Frame::new_checked(&b[..]).unwrap().header_sum());
        r.flags |= flags::HEADER_SUM;
        b[..HEADER_LEN].copy_from_slice(&r.to_bytes(payload));
        let f = Frame::new_checked(&b[..]).unwrap();
        assert!(f.header_sum() && f.checksum_ok());
        assert_eq!(Repr::parse(&f), r);
        assert_eq!(f.payload(), payload);
        // Every header bit is still covered; the payload's are not (the carrier's).
        each_byte_flipped(&b, |i, f| {
            assert_eq!(f.checksum_ok(), i >= HEADER_LEN, "byte {i}")
        });
        // The flag itself is covered: clearing it breaks the checksum.
        let mut c = b.clone();
        c[2] &= !(flags::HEADER_SUM as u8);
        assert!(!Frame::new_checked(&c[..]).unwrap().checksum_ok());
    }

    #[test]
    fn short_or_strange_frames_are_errors() {
        let b = data(b"abc");
        for n in 0..b.len() {
            assert!(Frame::new_checked(&b[..n]).is_err(), "{n} bytes");
        }
        let mut v = b.clone();
        v[0] = 2;
        assert!(matches!(
            Frame::new_checked(&v[..]),
            Err(WireError::BadVersion { got: 2, want: 1 })
        ));
        let mut k = b.clone();
        k[1] = 9;
        assert!(Frame::new_checked(&k[..]).is_err());
        let mut huge = b;
        huge[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Frame::new_checked(&huge[..]),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn control_frames_have_no_payload() {
        let r = Repr {
            kind: Kind::Nack,
            count: 1000,
            ..Repr::default()
        };
        let b = r.to_bytes(b"ignored");
        let f = Frame::new_checked(&b[..]).unwrap();
        assert!(f.payload().is_empty());
        assert!(f.checksum_ok());
        assert_eq!(Repr::parse(&f), r);
    }
}
