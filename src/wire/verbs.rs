//! What the verbs link says besides the data it writes: small inline SENDs (at most
//! [`LEN`] bytes), and the 32-bit immediate that names a written segment.
//!
//! ```text
//! 0 kind u8: 1 engine message, 2 buffer advert, 3 ring release, 4 heartbeat
//! engine:    1..41 the engine message in its 40-byte header (`message`; credit, done)
//! advert:    1 mode (0 user buffer, 1 ring)  2..10 seq  10..18 address  18..22 rkey  22..30 length
//!            30..34 root  34..42 message size  42..46 segment size  46..48 lanes  48 token
//! release:   1..9 ring pieces this rank has copied out of its ring, cumulative
//! ```
//!
//! Immediate: bits 31..24 the broadcast's token, bits 23..0 the segment's number in the
//! broadcast, lanes one after another. The token is the child's: it picks a free one when it
//! registers the broadcast's buffer and names it in its advert, and the parent writes it in
//! every immediate to that child (a broadcast's number, communicator and sequence, does not
//! fit in 8 bits, and two communicators' broadcasts may be in flight with the same low byte).

use super::{message, WireError};
use crate::engine::Message;

/// Bytes of the longest control message.
pub const LEN: usize = 49;
/// Bytes of an engine message.
const ENGINE_LEN: usize = 1 + message::HEADER;
/// Bytes of an advert.
const ADVERT_LEN: usize = 49;

/// What a broadcast is, as every rank must agree (an advert carries the child's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub root: u32,
    pub msize: u64,
    pub segment: u32,
    pub lanes: u16,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "root {}, {} bytes in {}-byte segments over {} lanes",
            self.root, self.msize, self.segment, self.lanes
        )
    }
}

/// Segments one broadcast may have on this link: the immediate's 24 bits.
pub const MAX_SEGMENTS: u32 = 1 << 24;

/// Where a child wants a broadcast's segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Straight into its registered user buffer: `addr` is the buffer's first byte.
    Buffer { addr: u64, rkey: u32, len: u64 },
    /// Into its per-peer ring (its user buffer could not be registered).
    Ring,
}

/// One control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// A credit or done of the engine.
    Engine(Message),
    /// "Write broadcast `seq`'s segments there, naming it `token` in the immediates; it has
    /// this shape here."
    Advert {
        seq: u64,
        token: u8,
        shape: Shape,
        target: Target,
    },
    /// "I copied this many of your pieces out of my ring" (cumulative).
    Release { copied: u64 },
    /// Nothing: a sign of life while nothing else goes to the peer.
    Heartbeat,
}

impl Control {
    /// Writes the message into `b`; returns its length.
    pub fn emit(&self, b: &mut [u8; LEN]) -> usize {
        b.fill(0);
        match *self {
            Control::Engine(m) => {
                b[0] = 1;
                b[1..ENGINE_LEN].copy_from_slice(&message::emit(&m));
                ENGINE_LEN
            }
            Control::Advert {
                seq,
                token,
                shape,
                target,
            } => {
                b[0] = 2;
                b[2..10].copy_from_slice(&seq.to_le_bytes());
                b[48] = token;
                b[30..34].copy_from_slice(&shape.root.to_le_bytes());
                b[34..42].copy_from_slice(&shape.msize.to_le_bytes());
                b[42..46].copy_from_slice(&shape.segment.to_le_bytes());
                b[46..48].copy_from_slice(&shape.lanes.to_le_bytes());
                if let Target::Buffer { addr, rkey, len } = target {
                    b[10..18].copy_from_slice(&addr.to_le_bytes());
                    b[18..22].copy_from_slice(&rkey.to_le_bytes());
                    b[22..30].copy_from_slice(&len.to_le_bytes());
                } else {
                    b[1] = 1;
                }
                ADVERT_LEN
            }
            Control::Release { copied } => {
                b[0] = 3;
                b[1..9].copy_from_slice(&copied.to_le_bytes());
                9
            }
            Control::Heartbeat => {
                b[0] = 4;
                1
            }
        }
    }

    /// Reads a control message.
    pub fn parse(b: &[u8]) -> Result<Control, WireError> {
        let bad = |detail: String| WireError::Invalid {
            what: "verbs control message",
            detail,
        };
        let need = match b.first() {
            Some(1) => ENGINE_LEN,
            Some(2) => ADVERT_LEN,
            Some(3) => 9,
            Some(4) => 1,
            Some(k) => return Err(bad(format!("unknown verbs control message kind {k}"))),
            None => return Err(bad("empty verbs control message".into())),
        };
        if b.len() < need {
            return Err(bad(format!(
                "verbs control message of kind {} has {} bytes, needs {need}",
                b[0],
                b.len()
            )));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(match b[0] {
            1 => match message::parse(&b[1..ENGINE_LEN])? {
                Message::Data(_) => {
                    return Err(bad(
                        "a data header in a verbs control message: data travels as RDMA writes"
                            .into(),
                    ))
                }
                m => Control::Engine(m),
            },
            2 => Control::Advert {
                seq: u64_at(2),
                token: b[48],
                shape: Shape {
                    root: u32_at(30),
                    msize: u64_at(34),
                    segment: u32_at(42),
                    lanes: u16::from_le_bytes([b[46], b[47]]),
                },
                target: match b[1] {
                    0 => Target::Buffer {
                        addr: u64_at(10),
                        rkey: u32_at(18),
                        len: u64_at(22),
                    },
                    1 => Target::Ring,
                    m => return Err(bad(format!("unknown advert mode {m}"))),
                },
            },
            3 => Control::Release { copied: u64_at(1) },
            _ => Control::Heartbeat,
        })
    }
}

/// The immediate of segment number `segment` of the broadcast whose token is `token`.
pub fn imm(token: u8, segment: u32) -> u32 {
    debug_assert!(segment < MAX_SEGMENTS);
    (u32::from(token) << 24) | (segment & (MAX_SEGMENTS - 1))
}

/// (token, segment number) of an immediate.
pub fn split_imm(imm: u32) -> (u8, u32) {
    ((imm >> 24) as u8, imm & (MAX_SEGMENTS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip_and_garbage_is_an_error() {
        let all = [
            Control::Engine(Message::Credit {
                seq: 9,
                lane: 1,
                consumed: 77,
            }),
            Control::Engine(Message::Done { seq: 3, lane: 0 }),
            Control::Advert {
                seq: 1 << 40,
                token: 255,
                shape: Shape {
                    root: 3,
                    msize: 1 << 35,
                    segment: 65536,
                    lanes: 2,
                },
                target: Target::Buffer {
                    addr: 0x7f00_dead_beef,
                    rkey: 0x1234_5678,
                    len: 1 << 33,
                },
            },
            Control::Advert {
                seq: 2,
                token: 0,
                shape: Shape {
                    root: 0,
                    msize: 0,
                    segment: 1,
                    lanes: 1,
                },
                target: Target::Ring,
            },
            Control::Release { copied: 12345 },
            Control::Heartbeat,
        ];
        for c in all {
            let mut b = [0u8; LEN];
            let n = c.emit(&mut b);
            assert_eq!(Control::parse(&b[..n]).unwrap(), c);
            assert!(Control::parse(&b[..n - 1]).is_err() || n == 1);
        }
        for bad in [&[][..], &[0], &[9, 1, 2], &[2, 7, 0, 0]] {
            assert!(Control::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn immediates_name_token_and_segment() {
        assert_eq!(split_imm(imm(0xab, 0x12_3456)), (0xab, 0x12_3456));
        assert_eq!(split_imm(imm(0, 0)), (0, 0));
    }
}
