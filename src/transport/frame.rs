//! The TCP transport's framing of engine messages: a fixed 40-byte header, then (for data)
//! the payload. All integers little-endian.
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
//! The raw Ethernet transport carries the same fields in `wire/`'s pipecast frame header,
//! plus the job cookie that TCP gets from its connection hello.

use super::TransportError;
use crate::engine::{DataHeader, Message};

pub const HEADER: usize = 40;
const MAGIC: [u8; 2] = *b"PC";
const VERSION: u8 = 1;

pub fn encode(m: &Message) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    b[0..2].copy_from_slice(&MAGIC);
    b[2] = VERSION;
    match *m {
        Message::Data(h) => {
            b[3] = 1;
            b[4..6].copy_from_slice(&h.lane.to_le_bytes());
            b[6..8].copy_from_slice(&h.lanes.to_le_bytes());
            b[8..16].copy_from_slice(&h.seq.to_le_bytes());
            b[16..20].copy_from_slice(&h.root.to_le_bytes());
            b[20..24].copy_from_slice(&h.index.to_le_bytes());
            b[24..28].copy_from_slice(&h.len.to_le_bytes());
            b[28..32].copy_from_slice(&h.segment.to_le_bytes());
            b[32..40].copy_from_slice(&h.msize.to_le_bytes());
        }
        Message::Credit {
            seq,
            lane,
            consumed,
        } => {
            b[3] = 2;
            b[4..6].copy_from_slice(&lane.to_le_bytes());
            b[8..16].copy_from_slice(&seq.to_le_bytes());
            b[16..20].copy_from_slice(&consumed.to_le_bytes());
        }
        Message::Done { seq, lane } => {
            b[3] = 3;
            b[4..6].copy_from_slice(&lane.to_le_bytes());
            b[8..16].copy_from_slice(&seq.to_le_bytes());
        }
    }
    b
}

pub fn decode(peer: usize, b: &[u8; HEADER]) -> Result<Message, TransportError> {
    let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    if b[0..2] != MAGIC || b[2] != VERSION {
        return Err(TransportError::BadFrame {
            peer,
            reason: format!(
                "bad magic/version {:02x}{:02x}/{} (expected \"PC\"/{VERSION}): is the peer a pipecast of the same version?",
                b[0], b[1], b[2]
            ),
        });
    }
    let (lane, seq) = (u16_at(4), u64_at(8));
    Ok(match b[3] {
        1 => Message::Data(DataHeader {
            seq,
            root: u32_at(16),
            msize: u64_at(32),
            segment: u32_at(28),
            lanes: u16_at(6),
            lane,
            index: u32_at(20),
            len: u32_at(24),
        }),
        2 => Message::Credit {
            seq,
            lane,
            consumed: u32_at(16),
        },
        3 => Message::Done { seq, lane },
        kind => {
            return Err(TransportError::BadFrame {
                peer,
                reason: format!("unknown message kind {kind}"),
            })
        }
    })
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
            assert_eq!(decode(0, &encode(&m)).unwrap(), m);
        }
        let mut bad = encode(&msgs[2]);
        bad[3] = 9;
        assert!(decode(4, &bad).is_err());
        bad[0] = b'X';
        assert!(decode(4, &bad).unwrap_err().to_string().contains("magic"));
    }

    proptest::proptest! {
        /// Any 40 bytes decode to a message or an error, and a decoded message encodes back
        /// to the same fields.
        #[test]
        fn arbitrary_headers_never_panic(bytes in proptest::collection::vec(0u8..=255, HEADER)) {
            let mut b = [0u8; HEADER];
            b.copy_from_slice(&bytes);
            b[0..2].copy_from_slice(&MAGIC);
            b[2] = VERSION;
            if let Ok(m) = decode(1, &b) {
                proptest::prop_assert_eq!(decode(1, &encode(&m)).unwrap(), m);
            }
            let _ = decode(1, &bytes.clone().try_into().unwrap());
        }
    }
}
