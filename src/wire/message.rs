//! The engine message header of the stream links (TCP, shared memory's records, verbs'
//! control messages): a fixed 40-byte header, then (for data) the payload. A typed view in
//! the smoltcp style: [`Header::new_checked`] checks the length, magic, version and kind
//! once, getters read fixed ranges, and [`parse`]/[`emit`] convert the whole header from and
//! to the engine's [`Message`] (plain data of the pure core; nothing here allocates or
//! panics on any input). All integers little-endian.
//!
//! ```text
//! 0  magic "PC"   2 version   3 kind (1 data, 2 credit, 3 done)
//! 4  lane u16     6 lanes u16
//! 8  seq u64
//! 16 root u32 (data) | consumed u32 (credit)
//! 20 index u32    24 len u32    28 segment u32
//! 32 msize u64
//! ```
//!
//! Raw Ethernet carries the same fields in [`frame`](super::frame)'s header, plus the job
//! cookie that a stream gets from its connection hello ([`hello`](super::hello)).

use super::WireError;
use crate::engine::{DataHeader, Message};

/// Bytes of a header.
pub const HEADER: usize = 40;
const MAGIC: [u8; 2] = *b"PC";
const VERSION: u8 = 1;
const DATA: u8 = 1;
const CREDIT: u8 = 2;
const DONE: u8 = 3;

/// A header over `T`'s first [`HEADER`] bytes.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Checks that `buffer` holds a whole header of this version and a known kind.
    pub fn new_checked(buffer: T) -> Result<Header<T>, WireError> {
        let b = buffer.as_ref();
        if b.len() < HEADER {
            return Err(WireError::Truncated {
                need: HEADER,
                got: b.len(),
            });
        }
        if b[0..2] != MAGIC || b[2] != VERSION {
            return Err(WireError::Invalid {
                what: "engine header",
                detail: format!(
                    "magic/version {:02x}{:02x}/{} (expected \"PC\"/{VERSION}): is the peer a \
                     pipecast of the same version?",
                    b[0], b[1], b[2]
                ),
            });
        }
        if !matches!(b[3], DATA | CREDIT | DONE) {
            return Err(WireError::Invalid {
                what: "engine header",
                detail: format!("unknown message kind {}", b[3]),
            });
        }
        Ok(Header { buffer })
    }

    fn u16_at(&self, i: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_le_bytes([b[i], b[i + 1]])
    }

    fn u32_at(&self, i: usize) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }

    fn u64_at(&self, i: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.buffer.as_ref()[i..i + 8]);
        u64::from_le_bytes(w)
    }

    /// 1 data, 2 credit, 3 done.
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[3]
    }
    pub fn lane(&self) -> u16 {
        self.u16_at(4)
    }
    pub fn lanes(&self) -> u16 {
        self.u16_at(6)
    }
    pub fn seq(&self) -> u64 {
        self.u64_at(8)
    }
    /// The root (data) or the consumed count (credit).
    pub fn word(&self) -> u32 {
        self.u32_at(16)
    }
    pub fn index(&self) -> u32 {
        self.u32_at(20)
    }
    /// Payload bytes that follow (data).
    pub fn len(&self) -> u32 {
        self.u32_at(24)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn segment(&self) -> u32 {
        self.u32_at(28)
    }
    pub fn msize(&self) -> u64 {
        self.u64_at(32)
    }

    /// The engine message this header carries.
    pub fn message(&self) -> Message {
        let (seq, lane) = (self.seq(), self.lane());
        match self.kind() {
            DATA => Message::Data(DataHeader {
                seq,
                root: self.word(),
                msize: self.msize(),
                segment: self.segment(),
                lanes: self.lanes(),
                lane,
                index: self.index(),
                len: self.len(),
            }),
            CREDIT => Message::Credit {
                seq,
                lane,
                consumed: self.word(),
            },
            _ => Message::Done { seq, lane },
        }
    }
}

/// The message in `b`'s first [`HEADER`] bytes.
pub fn parse(b: &[u8]) -> Result<Message, WireError> {
    Ok(Header::new_checked(b)?.message())
}

/// `m`'s header.
pub fn emit(m: &Message) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    b[0..2].copy_from_slice(&MAGIC);
    b[2] = VERSION;
    let (kind, seq, lane) = match *m {
        Message::Data(h) => {
            b[6..8].copy_from_slice(&h.lanes.to_le_bytes());
            b[16..20].copy_from_slice(&h.root.to_le_bytes());
            b[20..24].copy_from_slice(&h.index.to_le_bytes());
            b[24..28].copy_from_slice(&h.len.to_le_bytes());
            b[28..32].copy_from_slice(&h.segment.to_le_bytes());
            b[32..40].copy_from_slice(&h.msize.to_le_bytes());
            (DATA, h.seq, h.lane)
        }
        Message::Credit {
            seq,
            lane,
            consumed,
        } => {
            b[16..20].copy_from_slice(&consumed.to_le_bytes());
            (CREDIT, seq, lane)
        }
        Message::Done { seq, lane } => (DONE, seq, lane),
    };
    b[3] = kind;
    b[4..6].copy_from_slice(&lane.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let msgs = [
            Message::Data(DataHeader {
                seq: 1 << 40,
                root: 3,
                msize: 1 << 33,
                segment: 65536,
                lanes: 2,
                lane: 1,
                index: 77,
                len: 1000,
            }),
            Message::Credit {
                seq: 5,
                lane: 9,
                consumed: 12,
            },
            Message::Done { seq: 6, lane: 0 },
        ];
        for m in msgs {
            assert_eq!(parse(&emit(&m)).unwrap(), m);
        }
        let mut bad = emit(&msgs[2]);
        bad[3] = 9;
        assert!(parse(&bad).unwrap_err().to_string().contains("kind 9"));
        bad[0] = b'X';
        assert!(parse(&bad).unwrap_err().to_string().contains("magic"));
        assert!(matches!(
            parse(&bad[..39]),
            Err(WireError::Truncated { need: 40, got: 39 })
        ));
    }

    proptest::proptest! {
        /// Any bytes parse to a message or an error, and a parsed message emits back to the
        /// same fields.
        #[test]
        fn arbitrary_headers_never_panic(bytes in proptest::collection::vec(0u8..=255, 0..48)) {
            let mut b = bytes.clone();
            if b.len() >= 3 {
                b[0..2].copy_from_slice(&MAGIC);
                b[2] = VERSION;
            }
            if let Ok(m) = parse(&b) {
                proptest::prop_assert_eq!(parse(&emit(&m)).unwrap(), m);
            }
            let _ = parse(&bytes);
        }
    }
}
