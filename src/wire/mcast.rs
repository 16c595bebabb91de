//! The multicast frame: what pipecast's multicast carriers put in a UDP datagram (to the job's
//! group or a rank's unicast address) or after the Ethernet header of a raw frame of
//! EtherType 0x88B6 (to the job's group MAC or a rank's MAC). One format for both carriers:
//! the broadcast's segments to the group, and the reliability protocol's repairs, NACKs,
//! acknowledgements, syncs and aborts (`engine::multicast`), and the setup probe.
//!
//! A typed view in the smoltcp style, as [`super::frame`]: [`Frame::new_checked`] checks the
//! lengths, version and kind once, getters read fixed ranges and never panic after it,
//! [`Header`] parses and emits the whole header. Nothing allocates.
//!
//! All integers little-endian. Version 2. Two layouts, told apart by the kind (byte 1):
//! data frames — nearly all of a broadcast's bytes — have a compact 32-byte header, every
//! other kind the 64-byte control header. Bytes 0..8 (version, kind, flags, from) are the
//! same in both.
//!
//! Data (kind 1), 32 bytes, then `count` payload bytes ([`Data`]):
//!
//! ```text
//! 0  version u8 (2)     1  kind u8 (1 data)
//! 2  flags u16          (bit 0: a repair; bit 2: the checksum covers the header only)
//! 4  from u32           (the sending rank: the root, or a parent repairing)
//! 8  cookie tag u32     (the job's cookie folded: low ^ high 32 bits, `cookie_tag`)
//! 12 broadcast seq u64  (whole: a frame of one broadcast never lands in another)
//! 20 index u32          (the segment)
//! 24 count u16          (payload bytes)
//! 26 check u16          (the broadcast's root, message and segment size folded:
//!                        `ident_check`; a receiver that disagrees sees it)
//! 28 checksum u32       (CRC32C of bytes 0..28, then the payload)
//! ```
//!
//! Control (kinds 2 nack, 3 ack, 4 sync, 5 probe, 6 abort), 64 bytes, no payload ([`Repr`]):
//!
//! ```text
//! 0  version u8 (2)     1  kind u8
//! 2  flags u16          (bit 1: an ack that asks for an answer)
//! 4  from u32           (the sending rank)
//! 8  job cookie u64     16 broadcast seq u64     24 message size u64
//! 32 segment size u32   36 index u32 (nack: the first segment missing)
//! 40 count u32          (nack: segments missing from `index` on)
//! 44 root u32
//! 48 value u64          (ack: segments 0..value held by the sender's whole subtree;
//!                        sync: segments the root sent; abort: the rank that is gone;
//!                        probe: a nonce)
//! 56 to u32             (the receiving rank; u32::MAX: the group)
//! 60 checksum u32       (CRC32C of bytes 0..60)
//! ```
//!
//! **Why data frames carry less** (issue 32): a 64-byte header on every 1408-byte segment
//! alone held multicast to ~1.030 × T(m) on a 1500-byte MTU (payload per wire byte against
//! TCP's); 32 bytes put that floor at ~1.007 and give each segment 32 more bytes. A data frame
//! leaves out what every receiver knows from the broadcast it posted before it places a byte:
//! the message and segment size and the root (checked through the 16-bit `check`: ranks that
//! disagree fail with a mismatch, and the root's sync and every report, control frames,
//! carry the whole values), the receiving rank (a data frame's bytes are the same for every
//! rank; the carrier addresses a repair) and the full cookie (a 32-bit tag; the group is
//! derived from the whole cookie already, so two jobs share one only on a hash collision and
//! then also need equal tags). Frames of a broadcast not posted yet are kept whole and placed
//! only once it is posted (`comm::multicast`). A version-1 frame (64-byte data headers) is
//! refused as `BadVersion`, and a version-1 receiver refuses these: an old and a new build
//! never mix silently.
//!
//! A frame of another job (its cookie, or tag) is dropped by the receiver, never read
//! further. The checksum is checked before any field beyond the lengths is trusted: a veth
//! pair has no FCS, and UDP's checksum is optional on IPv4.
//!
//! **Header-only checksum** ([`flags::HEADER_SUM`]): a data frame may leave its payload out
//! of the CRC when the carrier checksums it already: the UDP carrier, whose datagrams Linux
//! always sends with a UDP checksum over the whole datagram and whose receivers' kernels drop
//! one that fails it. The payload's CRC was a tenth of a receiving rank's CPU (more than the
//! copy it guards; docs/multicast.md, "Receivers' CPU"). The raw Ethernet carrier checksums
//! only where the interface's NIC checks every frame's FCS and drops one that fails
//! (`transport::mcast::fcs`; never a veth pair, which verifies no FCS); a rank sends such
//! frames only where every rank's carrier checksums (`comm::multicast_setup`), and a
//! receiver whose carrier does not drops a frame that carries it
//! (`transport::mcast::accept_with`).

use super::WireError;

/// Header version this build writes and accepts.
pub const VERSION: u8 = 2;
/// Bytes of a control frame's header (every kind but data).
pub const HEADER_LEN: usize = 64;
/// Bytes of a data frame's header.
pub const DATA_HEADER_LEN: usize = 32;
/// The largest payload a data frame carries (its `count` is a `u16`).
pub const MAX_PAYLOAD: usize = u16::MAX as usize;
/// The `to` of a frame sent to the whole group.
pub const GROUP: u32 = u32::MAX;
/// Bytes of a control header that the checksum covers.
const COVERED: usize = 60;
/// Bytes of a data header that the checksum covers.
const DATA_COVERED: usize = 28;

/// Bits of the `flags` field.
pub mod flags {
    /// A data frame sent again, to one rank or the group.
    pub const REPAIR: u16 = 1;
    /// An acknowledgement that asks its receiver to answer (a keepalive).
    pub const PING: u16 = 2;
    /// The checksum covers the header only: the carrier's own checksum covers the payload.
    pub const HEADER_SUM: u16 = 4;
}

/// Both layouts.
mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
    pub const FROM: Range<usize> = 4..8;
}

/// The control header.
mod control {
    use std::ops::Range;
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

/// The data header.
mod data {
    use std::ops::Range;
    pub const TAG: Range<usize> = 8..12;
    pub const BSEQ: Range<usize> = 12..20;
    pub const INDEX: Range<usize> = 20..24;
    pub const COUNT: Range<usize> = 24..26;
    pub const CHECK: Range<usize> = 26..28;
    pub const CHECKSUM: Range<usize> = 28..32;
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

    /// Bytes of this kind's header.
    pub fn header_len(self) -> usize {
        if self == Kind::Data {
            DATA_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
}

/// The job's cookie as a data frame carries it: its two halves folded into 32 bits.
pub fn cookie_tag(cookie: u64) -> u32 {
    (cookie ^ (cookie >> 32)) as u32
}

/// What a data frame carries of its broadcast's root, message size and segment size (which
/// every receiver knows from the broadcast it posted): a CRC32C of the three, folded to 16
/// bits.
pub fn ident_check(root: u32, msize: u64, segment: u32) -> u16 {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&root.to_le_bytes());
    b[4..12].copy_from_slice(&msize.to_le_bytes());
    b[12..].copy_from_slice(&segment.to_le_bytes());
    let c = crc32c::crc32c(&b);
    (c ^ (c >> 16)) as u16
}

/// A typed view of a multicast frame over any bytes.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

fn u16_at(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[r]);
    u16::from_le_bytes(a)
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
        if b.len() < 2 {
            return Err(WireError::Truncated {
                need: DATA_HEADER_LEN,
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
        let header = kind.header_len();
        if b.len() < header {
            return Err(WireError::Truncated {
                need: header,
                got: b.len(),
            });
        }
        if kind == Kind::Data {
            let need = DATA_HEADER_LEN + usize::from(u16_at(b, data::COUNT));
            if b.len() < need {
                return Err(WireError::Truncated { need, got: b.len() });
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
        u16_at(self.b(), field::FLAGS)
    }
    pub fn from(&self) -> u32 {
        u32_at(self.b(), field::FROM)
    }
    /// Bytes of its header (by its kind).
    pub fn header_len(&self) -> usize {
        self.kind().header_len()
    }

    /// The data payload (empty for other kinds).
    pub fn payload(&self) -> &[u8] {
        if self.kind() != Kind::Data {
            return &[];
        }
        let n = usize::from(u16_at(self.b(), data::COUNT));
        &self.b()[DATA_HEADER_LEN..DATA_HEADER_LEN + n]
    }

    /// Whether the checksum matches the header and payload (the header alone when the frame
    /// says so: [`Frame::header_sum`]).
    pub fn checksum_ok(&self) -> bool {
        let b = self.b();
        if self.kind() != Kind::Data {
            return u32_at(b, control::CHECKSUM) == checksum(&b[..COVERED], &[]);
        }
        let payload = if self.header_sum() {
            &[]
        } else {
            self.payload()
        };
        u32_at(b, data::CHECKSUM) == checksum(&b[..DATA_COVERED], payload)
    }

    /// A data frame whose checksum covers its payload: the CRC32C of its header's covered
    /// bytes (to go on over the payload: `crc32c::crc32c_append`) and the checksum it carries,
    /// for a receiver that computes the payload's part while it copies it
    /// (`transport::mcast::landing`). `None` for every other frame.
    pub fn payload_sum(&self) -> Option<(u32, u32)> {
        if self.kind() != Kind::Data || self.header_sum() {
            return None;
        }
        let b = self.b();
        Some((
            crc32c::crc32c(&b[..DATA_COVERED]),
            u32_at(b, data::CHECKSUM),
        ))
    }

    /// Whether the checksum leaves the payload to the carrier ([`flags::HEADER_SUM`]).
    pub fn header_sum(&self) -> bool {
        self.kind() == Kind::Data && self.flags() & flags::HEADER_SUM != 0
    }
}

/// The CRC32C of a frame: the covered part of its header, then its payload.
fn checksum(covered: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(covered), payload)
}

/// A data frame's header (the 32-byte layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Data {
    /// [`flags::REPAIR`], [`flags::HEADER_SUM`].
    pub flags: u16,
    pub from: u32,
    /// [`cookie_tag`] of the job's cookie.
    pub tag: u32,
    pub bseq: u64,
    pub index: u32,
    /// Payload bytes.
    pub count: u16,
    /// [`ident_check`] of the broadcast's root and sizes.
    pub check: u16,
}

impl Data {
    /// The header of a checked data frame (`None`: another kind).
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Option<Data> {
        let b = frame.b();
        (frame.kind() == Kind::Data).then(|| Data {
            flags: frame.flags(),
            from: frame.from(),
            tag: u32_at(b, data::TAG),
            bseq: u64_at(b, data::BSEQ),
            index: u32_at(b, data::INDEX),
            count: u16_at(b, data::COUNT),
            check: u16_at(b, data::CHECK),
        })
    }

    /// Writes the header for `payload` (whose length must be `count`) with its checksum
    /// into `out`, which must hold [`DATA_HEADER_LEN`] bytes.
    pub fn emit(&self, out: &mut [u8], payload: &[u8]) -> Result<(), WireError> {
        if out.len() < DATA_HEADER_LEN {
            return Err(WireError::BufferTooSmall {
                need: DATA_HEADER_LEN,
                got: out.len(),
            });
        }
        if payload.len() != usize::from(self.count) {
            return Err(WireError::BadLength {
                what: "multicast data payload",
                detail: format!("{} bytes for a count of {}", payload.len(), self.count),
            });
        }
        let o = &mut out[..DATA_HEADER_LEN];
        o[field::VERSION] = VERSION;
        o[field::KIND] = Kind::Data as u8;
        o[field::FLAGS].copy_from_slice(&self.flags.to_le_bytes());
        o[field::FROM].copy_from_slice(&self.from.to_le_bytes());
        o[data::TAG].copy_from_slice(&self.tag.to_le_bytes());
        o[data::BSEQ].copy_from_slice(&self.bseq.to_le_bytes());
        o[data::INDEX].copy_from_slice(&self.index.to_le_bytes());
        o[data::COUNT].copy_from_slice(&self.count.to_le_bytes());
        o[data::CHECK].copy_from_slice(&self.check.to_le_bytes());
        let summed = if self.flags & flags::HEADER_SUM == 0 {
            payload
        } else {
            &[]
        };
        let sum = checksum(&o[..DATA_COVERED], summed);
        o[data::CHECKSUM].copy_from_slice(&sum.to_le_bytes());
        Ok(())
    }
}

/// A control frame's header (the 64-byte layout; any kind but data).
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
    /// The header of a checked control frame (`None`: a data frame, see [`Data`]). Its
    /// checksum is the caller's to check first.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Option<Repr> {
        let b = frame.b();
        (frame.kind() != Kind::Data).then(|| Repr {
            kind: frame.kind(),
            flags: frame.flags(),
            from: frame.from(),
            cookie: u64_at(b, control::COOKIE),
            bseq: u64_at(b, control::BSEQ),
            msize: u64_at(b, control::MSIZE),
            segment: u32_at(b, control::SEGMENT),
            index: u32_at(b, control::INDEX),
            count: u32_at(b, control::COUNT),
            root: u32_at(b, control::ROOT),
            value: u64_at(b, control::VALUE),
            to: u32_at(b, control::TO),
        })
    }

    /// Writes the header with its checksum into `out`, which must hold [`HEADER_LEN`] bytes.
    /// A data frame's header is a [`Data`]: `kind` data is an error here.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), WireError> {
        if self.kind == Kind::Data {
            return Err(WireError::Invalid {
                what: "multicast control frame",
                detail: "kind data has the 32-byte data header".into(),
            });
        }
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
        o[control::COOKIE].copy_from_slice(&self.cookie.to_le_bytes());
        o[control::BSEQ].copy_from_slice(&self.bseq.to_le_bytes());
        o[control::MSIZE].copy_from_slice(&self.msize.to_le_bytes());
        o[control::SEGMENT].copy_from_slice(&self.segment.to_le_bytes());
        o[control::INDEX].copy_from_slice(&self.index.to_le_bytes());
        o[control::COUNT].copy_from_slice(&self.count.to_le_bytes());
        o[control::ROOT].copy_from_slice(&self.root.to_le_bytes());
        o[control::VALUE].copy_from_slice(&self.value.to_le_bytes());
        o[control::TO].copy_from_slice(&self.to.to_le_bytes());
        let sum = checksum(&o[..COVERED], &[]);
        o[control::CHECKSUM].copy_from_slice(&sum.to_le_bytes());
        Ok(())
    }
}

/// Any frame's header: a data frame's or a control frame's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    Data(Data),
    Control(Repr),
}

impl Header {
    /// The header of a checked frame (its checksum is the caller's to check first).
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Header {
        match Data::parse(frame) {
            Some(d) => Header::Data(d),
            None => Header::Control(Repr::parse(frame).unwrap_or_default()),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Header::Data(_) => Kind::Data,
            Header::Control(r) => r.kind,
        }
    }
    pub fn flags(&self) -> u16 {
        match self {
            Header::Data(d) => d.flags,
            Header::Control(r) => r.flags,
        }
    }
    pub fn from(&self) -> u32 {
        match self {
            Header::Data(d) => d.from,
            Header::Control(r) => r.from,
        }
    }
    pub fn bseq(&self) -> u64 {
        match self {
            Header::Data(d) => d.bseq,
            Header::Control(r) => r.bseq,
        }
    }
    /// Whether it is of the job with `cookie` (a data frame: its tag).
    pub fn of_job(&self, cookie: u64) -> bool {
        match self {
            Header::Data(d) => d.tag == cookie_tag(cookie),
            Header::Control(r) => r.cookie == cookie,
        }
    }
    /// The rank it names as its receiver (`GROUP`: all); `None` for a data frame, whose
    /// bytes are the same for every rank.
    pub fn to(&self) -> Option<u32> {
        match self {
            Header::Data(_) => None,
            Header::Control(r) => Some(r.to),
        }
    }
    /// Bytes of the header.
    pub fn header_len(&self) -> usize {
        self.kind().header_len()
    }

    /// Writes the header for `payload` (a data frame's; control frames have none) with its
    /// checksum into `out`; its length.
    pub fn emit(&self, out: &mut [u8], payload: &[u8]) -> Result<usize, WireError> {
        match self {
            Header::Data(d) => d.emit(out, payload).map(|()| DATA_HEADER_LEN),
            Header::Control(r) => r.emit(out).map(|()| HEADER_LEN),
        }
    }

    /// The header as bytes.
    pub fn to_bytes(&self, payload: &[u8]) -> Result<HeaderBytes, WireError> {
        let mut b = HeaderBytes {
            buf: [0u8; HEADER_LEN],
            len: 0,
        };
        b.len = self.emit(&mut b.buf, payload)?;
        Ok(b)
    }
}

/// An emitted header ([`Header::to_bytes`]): as many bytes as its layout has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderBytes {
    buf: [u8; HEADER_LEN],
    len: usize,
}

impl std::ops::Deref for HeaderBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl AsRef<[u8]> for HeaderBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_repr(payload: &[u8]) -> Data {
        Data {
            flags: flags::REPAIR,
            from: 3,
            tag: cookie_tag(0xfeed),
            bseq: 9,
            index: 2,
            count: payload.len() as u16,
            check: ident_check(1, 100, 40),
        }
    }

    fn data(payload: &[u8]) -> Vec<u8> {
        let h = Header::Data(data_repr(payload)).to_bytes(payload).unwrap();
        assert_eq!(h.len(), DATA_HEADER_LEN);
        [&h[..], payload].concat()
    }

    fn control() -> Repr {
        Repr {
            kind: Kind::Sync,
            flags: flags::PING,
            from: 3,
            cookie: 0xfeed_0000_beef,
            bseq: 9,
            msize: 100,
            segment: 40,
            index: 2,
            count: 7,
            root: 1,
            value: 3,
            to: 5,
        }
    }

    #[test]
    fn round_trip_and_checksum() {
        let b = data(b"twenty bytes of data");
        let f = Frame::new_checked(&b[..]).unwrap();
        assert!(f.checksum_ok());
        assert_eq!(f.header_len(), DATA_HEADER_LEN);
        assert_eq!(
            Header::parse(&f),
            Header::Data(data_repr(b"twenty bytes of data"))
        );
        assert_eq!(f.payload(), b"twenty bytes of data");
        each_byte_flipped(&b, 28..32, |i, f| assert!(!f.checksum_ok(), "byte {i}"));
        let c = control();
        let b = Header::Control(c).to_bytes(&[]).unwrap();
        assert_eq!(b.len(), HEADER_LEN);
        let f = Frame::new_checked(&b[..]).unwrap();
        assert!(f.checksum_ok());
        assert_eq!(Header::parse(&f), Header::Control(c));
        each_byte_flipped(&b, 60..64, |i, f| assert!(!f.checksum_ok(), "byte {i}"));
    }

    /// Flips one bit of every byte of `b` but the checksum's own (`sum`) in turn: a frame
    /// that still parses goes to `check`; one that does not must have had its version, kind
    /// or a data frame's count changed.
    fn each_byte_flipped(
        b: &[u8],
        sum: std::ops::Range<usize>,
        check: impl Fn(usize, Frame<&[u8]>),
    ) {
        for i in (0..b.len()).filter(|i| !sum.contains(i)) {
            let mut c = b.to_vec();
            c[i] ^= 0x10;
            match Frame::new_checked(&c[..]) {
                Ok(f) => check(i, f),
                Err(_) => assert!(i < 2 || (24..26).contains(&i), "byte {i}"),
            }
        }
    }

    #[test]
    fn a_header_only_checksum_covers_the_header_and_says_so() {
        let payload = b"twenty bytes of data";
        let mut b = data(payload);
        assert!(!Frame::new_checked(&b[..]).unwrap().header_sum());
        let mut r = data_repr(payload);
        r.flags |= flags::HEADER_SUM;
        b[..DATA_HEADER_LEN].copy_from_slice(&Header::Data(r).to_bytes(payload).unwrap());
        let f = Frame::new_checked(&b[..]).unwrap();
        assert!(f.header_sum() && f.checksum_ok());
        assert_eq!(Header::parse(&f), Header::Data(r));
        assert_eq!(f.payload(), payload);
        // Every header bit is still covered; the payload's are not (the carrier's).
        each_byte_flipped(&b, 28..32, |i, f| {
            assert_eq!(f.checksum_ok(), i >= DATA_HEADER_LEN, "byte {i}")
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
        let c = Header::Control(control()).to_bytes(&[]).unwrap();
        for n in 0..c.len() {
            assert!(Frame::new_checked(&c[..n]).is_err(), "{n} bytes");
        }
        // Version 1 (64-byte data headers) and anything else: refused by name.
        for version in [0, 1, 3] {
            let mut v = b.clone();
            v[0] = version;
            assert!(matches!(
                Frame::new_checked(&v[..]),
                Err(WireError::BadVersion { got, want: 2 }) if got == version
            ));
        }
        let mut k = b.clone();
        k[1] = 9;
        assert!(Frame::new_checked(&k[..]).is_err());
        let mut huge = b.clone();
        huge[24..26].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(
            Frame::new_checked(&huge[..]),
            Err(WireError::Truncated { .. })
        ));
        // A data frame's kind on a control frame's bytes: its count is read where the
        // control layout keeps its bytes, and checked.
        let mut as_data = c.to_vec();
        as_data[1] = Kind::Data as u8;
        if let Ok(f) = Frame::new_checked(&as_data[..]) {
            assert!(f.payload().len() <= as_data.len() - DATA_HEADER_LEN);
            assert!(!f.checksum_ok());
        }
        // Padding after a data frame's payload (Ethernet's minimum) is ignored.
        let mut padded = b.clone();
        padded.resize(60, 0);
        let f = Frame::new_checked(&padded[..]).unwrap();
        assert!(f.checksum_ok());
        assert_eq!(f.payload(), b"abc");
    }

    #[test]
    fn emitting_refuses_what_the_layouts_cannot_say() {
        let mut out = [0u8; HEADER_LEN];
        let r = Repr {
            kind: Kind::Data,
            ..Repr::default()
        };
        assert!(r.emit(&mut out).is_err());
        let d = data_repr(b"abc");
        assert!(d.emit(&mut out, b"abcd").is_err());
        assert!(d.emit(&mut out[..DATA_HEADER_LEN - 1], b"abc").is_err());
        assert!(control().emit(&mut out[..HEADER_LEN - 1]).is_err());
    }

    #[test]
    fn control_frames_have_no_payload() {
        let r = Repr {
            kind: Kind::Nack,
            count: 1000,
            ..Repr::default()
        };
        let b = Header::Control(r).to_bytes(&[]).unwrap();
        let f = Frame::new_checked(&b[..]).unwrap();
        assert!(f.payload().is_empty());
        assert!(f.checksum_ok());
        assert_eq!(Header::parse(&f), Header::Control(r));
    }

    #[test]
    fn the_tag_and_the_check_tell_neighbours_apart() {
        assert_ne!(cookie_tag(1), cookie_tag(2));
        assert_ne!(cookie_tag(1), cookie_tag(1 << 33));
        let a = ident_check(0, 1 << 20, 1440);
        for other in [
            ident_check(1, 1 << 20, 1440),
            ident_check(0, (1 << 20) + 1, 1440),
            ident_check(0, 1 << 20, 1468),
        ] {
            assert_ne!(a, other);
        }
    }
}
