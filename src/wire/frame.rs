//! The pipecast raw-Ethernet frame header (EtherType 0x88b5, after the Ethernet header).
//!
//! One frame carries one piece of one segment of one broadcast, or an acknowledgement /
//! credit going back up the tree. The pipelined broadcast of seed 000 §4 and seed 003 §4
//! (`../shared/seeds/003_f72e5e0868946953.txt`) splits a message into segments that flow down
//! the tree; over raw Ethernet the receiver must also tell its parent what arrived (the
//! medium drops frames under contention, LAB.md) and how much more it can take.
//!
//! ```text
//!  0  version u8 (1)     1  kind u8           2  flags u16
//!  4  job cookie u32                          8  communicator u32
//! 12  broadcast sequence u32                 16  lane u16          18  reserved u16 (0)
//! 20  segment u32                            24  offset u64 (byte offset in the message)
//! 32  length u32 (payload bytes after the header)
//! 36  ack u32 (segments below this one arrived)  40  credit u32 (segments the sender may add)
//! 44  payload
//! ```
//! All fields big-endian. Frames shorter than 60 bytes are padded on the wire, hence `length`.

use super::WireError;

/// Header version this code reads and writes.
pub const VERSION: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 44;

mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
    pub const COOKIE: Range<usize> = 4..8;
    pub const COMMUNICATOR: Range<usize> = 8..12;
    pub const SEQUENCE: Range<usize> = 12..16;
    pub const LANE: Range<usize> = 16..18;
    pub const RESERVED: Range<usize> = 18..20;
    pub const SEGMENT: Range<usize> = 20..24;
    pub const OFFSET: Range<usize> = 24..32;
    pub const LENGTH: Range<usize> = 32..36;
    pub const ACK: Range<usize> = 36..40;
    pub const CREDIT: Range<usize> = 40..44;
}

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Kind {
    /// Segment data flowing down a tree.
    #[default]
    Data,
    /// Cumulative acknowledgement (and credit) flowing back up.
    Ack,
    /// Negative acknowledgement: `segment` is missing, please resend.
    Nack,
    /// Bootstrap / liveness.
    Hello,
    Unknown(u8),
}

impl From<u8> for Kind {
    fn from(v: u8) -> Kind {
        match v {
            0 => Kind::Data,
            1 => Kind::Ack,
            2 => Kind::Nack,
            3 => Kind::Hello,
            other => Kind::Unknown(other),
        }
    }
}

impl From<Kind> for u8 {
    fn from(k: Kind) -> u8 {
        match k {
            Kind::Data => 0,
            Kind::Ack => 1,
            Kind::Nack => 2,
            Kind::Hello => 3,
            Kind::Unknown(v) => v,
        }
    }
}

/// Flag bits.
pub mod flags {
    /// The last segment of the message.
    pub const LAST: u16 = 1 << 0;
    /// A retransmission.
    pub const RETRANSMIT: u16 = 1 << 1;
    /// The sender wants an acknowledgement now.
    pub const ACK_REQUESTED: u16 = 1 << 2;
}

/// A view of a pipecast frame (header and payload) over a byte buffer.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Checks the header length, the version and that `length` payload bytes are present.
    pub fn new_checked(buffer: T) -> Result<Frame<T>, WireError> {
        let got = buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                got,
            });
        }
        let frame = Frame { buffer };
        if frame.version() != VERSION {
            return Err(WireError::BadVersion {
                got: frame.version(),
                supported: VERSION,
            });
        }
        let need = HEADER_LEN + frame.length() as usize;
        if got < need {
            return Err(WireError::Truncated { need, got });
        }
        Ok(frame)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn u16_at(&self, r: std::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }
    fn u32_at(&self, r: std::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[r];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    pub fn kind(&self) -> Kind {
        Kind::from(self.buffer.as_ref()[field::KIND])
    }
    pub fn flags(&self) -> u16 {
        self.u16_at(field::FLAGS)
    }
    pub fn cookie(&self) -> u32 {
        self.u32_at(field::COOKIE)
    }
    pub fn communicator(&self) -> u32 {
        self.u32_at(field::COMMUNICATOR)
    }
    pub fn sequence(&self) -> u32 {
        self.u32_at(field::SEQUENCE)
    }
    pub fn lane(&self) -> u16 {
        self.u16_at(field::LANE)
    }
    pub fn segment(&self) -> u32 {
        self.u32_at(field::SEGMENT)
    }
    pub fn offset(&self) -> u64 {
        let b = &self.buffer.as_ref()[field::OFFSET];
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        u64::from_be_bytes(a)
    }
    pub fn length(&self) -> u32 {
        self.u32_at(field::LENGTH)
    }
    pub fn ack(&self) -> u32 {
        self.u32_at(field::ACK)
    }
    pub fn credit(&self) -> u32 {
        self.u32_at(field::CREDIT)
    }
    /// The payload: `length` bytes after the header (padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.length() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    fn set_u16(&mut self, r: std::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }
    fn set_u32(&mut self, r: std::ops::Range<usize>, v: u32) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    pub fn set_kind(&mut self, k: Kind) {
        self.buffer.as_mut()[field::KIND] = k.into();
    }
    pub fn set_flags(&mut self, v: u16) {
        self.set_u16(field::FLAGS, v);
    }
    pub fn set_cookie(&mut self, v: u32) {
        self.set_u32(field::COOKIE, v);
    }
    pub fn set_communicator(&mut self, v: u32) {
        self.set_u32(field::COMMUNICATOR, v);
    }
    pub fn set_sequence(&mut self, v: u32) {
        self.set_u32(field::SEQUENCE, v);
    }
    pub fn set_lane(&mut self, v: u16) {
        self.set_u16(field::LANE, v);
        self.set_u16(field::RESERVED, 0);
    }
    pub fn set_segment(&mut self, v: u32) {
        self.set_u32(field::SEGMENT, v);
    }
    pub fn set_offset(&mut self, v: u64) {
        self.buffer.as_mut()[field::OFFSET].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_length(&mut self, v: u32) {
        self.set_u32(field::LENGTH, v);
    }
    pub fn set_ack(&mut self, v: u32) {
        self.set_u32(field::ACK, v);
    }
    pub fn set_credit(&mut self, v: u32) {
        self.set_u32(field::CREDIT, v);
    }
    /// The payload area: everything after the header (fill `length` bytes of it).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    pub kind: Kind,
    pub flags: u16,
    pub cookie: u32,
    pub communicator: u32,
    pub sequence: u32,
    pub lane: u16,
    pub segment: u32,
    pub offset: u64,
    pub length: u32,
    pub ack: u32,
    pub credit: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Repr {
        Repr {
            kind: frame.kind(),
            flags: frame.flags(),
            cookie: frame.cookie(),
            communicator: frame.communicator(),
            sequence: frame.sequence(),
            lane: frame.lane(),
            segment: frame.segment(),
            offset: frame.offset(),
            length: frame.length(),
            ack: frame.ack(),
            credit: frame.credit(),
        }
    }

    /// Header plus payload.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.length as usize
    }

    /// Writes the header into a buffer of at least `buffer_len()` bytes (the payload is the
    /// caller's).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        frame: &mut Frame<T>,
    ) -> Result<(), WireError> {
        let got = frame.buffer.as_ref().len();
        if got < self.buffer_len() {
            return Err(WireError::BufferTooSmall {
                need: self.buffer_len(),
                got,
            });
        }
        frame.set_version(VERSION);
        frame.set_kind(self.kind);
        frame.set_flags(self.flags);
        frame.set_cookie(self.cookie);
        frame.set_communicator(self.communicator);
        frame.set_sequence(self.sequence);
        frame.set_lane(self.lane);
        frame.set_segment(self.segment);
        frame.set_offset(self.offset);
        frame.set_length(self.length);
        frame.set_ack(self.ack);
        frame.set_credit(self.credit);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Repr {
        Repr {
            kind: Kind::Data,
            flags: flags::LAST | flags::RETRANSMIT,
            cookie: 0xdead_beef,
            communicator: 7,
            sequence: 42,
            lane: 1,
            segment: 300,
            offset: 300 * 8192,
            length: 5,
            ack: 0,
            credit: 16,
        }
    }

    #[test]
    fn emit_then_parse_round_trips() {
        let repr = sample();
        let mut buf = [0u8; 60];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        repr.emit(&mut f).unwrap();
        f.payload_mut()[..5].copy_from_slice(b"hello");
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&f), repr);
        assert_eq!(f.payload(), b"hello", "padding is not payload");
        // Field positions are the documented ones.
        assert_eq!(&buf[..4], &[1, 0, 0, 3]);
        assert_eq!(&buf[4..8], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&buf[32..36], &[0, 0, 0, 5]);
    }

    #[test]
    fn malformed_frames_are_errors() {
        assert_eq!(
            Frame::new_checked(&[1u8; 10][..]).unwrap_err(),
            WireError::Truncated { need: 44, got: 10 }
        );
        let mut buf = [0u8; 50];
        sample()
            .emit(&mut Frame::new_unchecked(&mut buf[..]))
            .unwrap();
        buf[0] = 2;
        assert_eq!(
            Frame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadVersion {
                got: 2,
                supported: 1
            }
        );
        buf[0] = 1;
        buf[32..36].copy_from_slice(&100u32.to_be_bytes());
        assert_eq!(
            Frame::new_checked(&buf[..]).unwrap_err(),
            WireError::Truncated { need: 144, got: 50 }
        );
        let mut small = [0u8; 45];
        assert!(matches!(
            sample().emit(&mut Frame::new_unchecked(&mut small[..])),
            Err(WireError::BufferTooSmall { need: 49, got: 45 })
        ));
    }

    #[test]
    fn unknown_kinds_are_kept() {
        let mut buf = [0u8; 44];
        Repr {
            kind: Kind::Unknown(200),
            ..Repr::default()
        }
        .emit(&mut Frame::new_unchecked(&mut buf[..]))
        .unwrap();
        assert_eq!(
            Frame::new_checked(&buf[..]).unwrap().kind(),
            Kind::Unknown(200)
        );
    }
}
