//! Records between two ranks on one host (the shared-memory link): fixed 64-byte records on a
//! Unix stream socket. The bytes of a segment never travel on the socket: a reader copies
//! them straight from the sender's buffer (cross-memory attach, `Record::Segment` carries the
//! address) or from a ring in a shared `memfd` the sender owns (`Record::RingChunk`).
//!
//! Layout: byte 0 the kind, bytes 1..8 zero, then the kind's fields, little-endian, then zeros.
//! Every decode checks the kind, the reserved and trailing bytes and every length; nothing is
//! trusted.

use super::WireError;

/// Every record is this long.
pub const RECORD: usize = 64;
/// An engine message header ([`message::HEADER`](super::message::HEADER)).
pub const HEAD: usize = 40;
/// `PCSH`.
pub const MAGIC: u32 = 0x5043_5348;
/// 2: one staging ring per writer, shared by its readers; `RingFreed` counts chunks.
/// 3: `Goodbye`, an idle pair closed under `PIPECAST_MAX_CONNECTIONS`.
pub const VERSION: u8 = 3;

/// How a reader takes a writer's segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `process_vm_readv` from the writer's buffer: one copy.
    Cma,
    /// From a ring the writer fills: two copies.
    Ring,
}

/// One record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// First record each way: the job cookie, the sender's rank, and 16 bytes at `probe_addr`
    /// in the sender's memory (`probe`) that the reader tries to read by cross-memory attach.
    Hello {
        cookie: u64,
        rank: u32,
        probe_addr: u64,
        probe: [u8; 16],
    },
    /// How the sender of this record will read the receiver's segments.
    Mode(Mode),
    /// The writer's staging ring (its descriptor rides along as `SCM_RIGHTS`), `size` bytes,
    /// shared by all its readers.
    RingFd { size: u64 },
    /// An engine message; for data, its payload is at `addr` in the sender (0 otherwise).
    Message { head: [u8; HEAD], addr: u64 },
    /// `len` bytes of data segment `head`'s payload, from offset `at` in the segment, at
    /// position `pos` of the writer's ring (the ring offset is `pos % size`).
    RingChunk {
        head: [u8; HEAD],
        pos: u64,
        at: u32,
        len: u32,
    },
    /// The reader has copied out `chunks` of the writer's ring chunks in all (each reader
    /// releases the chunks announced to it in the order they were announced).
    RingFreed { chunks: u64 },
    /// The sender closes the pair (idle, or answering the peer's goodbye): after it, it
    /// sends nothing on this stream but `RingFreed`, and shuts its side once it has read the
    /// peer's goodbye too.
    Goodbye,
}

const HELLO: u8 = 1;
const MODE: u8 = 2;
const RING_FD: u8 = 3;
const MESSAGE: u8 = 4;
const RING_CHUNK: u8 = 5;
const RING_FREED: u8 = 6;
const GOODBYE: u8 = 7;

impl Record {
    pub fn encode(&self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        let mut w = Writer { b: &mut b, at: 8 };
        match *self {
            Record::Hello {
                cookie,
                rank,
                probe_addr,
                probe,
            } => {
                w.b[0] = HELLO;
                w.put(&MAGIC.to_le_bytes());
                w.put(&[VERSION]);
                w.put(&cookie.to_le_bytes());
                w.put(&rank.to_le_bytes());
                w.put(&probe_addr.to_le_bytes());
                w.put(&probe);
            }
            Record::Mode(m) => {
                w.b[0] = MODE;
                w.put(&[match m {
                    Mode::Cma => 1,
                    Mode::Ring => 2,
                }]);
            }
            Record::RingFd { size } => {
                w.b[0] = RING_FD;
                w.put(&size.to_le_bytes());
            }
            Record::Message { head, addr } => {
                w.b[0] = MESSAGE;
                w.put(&head);
                w.put(&addr.to_le_bytes());
            }
            Record::RingChunk { head, pos, at, len } => {
                w.b[0] = RING_CHUNK;
                w.put(&head);
                w.put(&pos.to_le_bytes());
                w.put(&at.to_le_bytes());
                w.put(&len.to_le_bytes());
            }
            Record::RingFreed { chunks } => {
                w.b[0] = RING_FREED;
                w.put(&chunks.to_le_bytes());
            }
            Record::Goodbye => w.b[0] = GOODBYE,
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Record, WireError> {
        let bad = |detail: String| WireError::Invalid {
            what: "shared-memory record",
            detail,
        };
        if b.len() != RECORD {
            return Err(bad(format!("{} bytes, expected {RECORD}", b.len())));
        }
        if b[1..8].iter().any(|&x| x != 0) {
            return Err(bad("reserved bytes are not zero".into()));
        }
        let mut r = Reader { b, at: 8 };
        let record = match b[0] {
            HELLO => {
                let magic = r.u32();
                let version = r.take::<1>()[0];
                if magic != MAGIC {
                    return Err(bad(format!("magic {magic:#x}: not a pipecast peer")));
                }
                if version != VERSION {
                    return Err(bad(format!(
                        "version {version}, this build speaks {VERSION}: mixed pipecast builds in one job"
                    )));
                }
                Record::Hello {
                    cookie: r.u64(),
                    rank: r.u32(),
                    probe_addr: r.u64(),
                    probe: r.take::<16>(),
                }
            }
            MODE => Record::Mode(match r.take::<1>()[0] {
                1 => Mode::Cma,
                2 => Mode::Ring,
                m => return Err(bad(format!("mode {m}"))),
            }),
            RING_FD => Record::RingFd { size: r.u64() },
            MESSAGE => Record::Message {
                head: r.take::<HEAD>(),
                addr: r.u64(),
            },
            RING_CHUNK => Record::RingChunk {
                head: r.take::<HEAD>(),
                pos: r.u64(),
                at: r.u32(),
                len: r.u32(),
            },
            RING_FREED => Record::RingFreed { chunks: r.u64() },
            GOODBYE => Record::Goodbye,
            k => return Err(bad(format!("kind {k}"))),
        };
        if b[r.at..].iter().any(|&x| x != 0) {
            return Err(bad(format!("bytes after byte {} are not zero", r.at)));
        }
        Ok(record)
    }
}

struct Writer<'a> {
    b: &'a mut [u8; RECORD],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.b[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
}

/// Reads fields of a record already checked to be `RECORD` long; every kind's fields fit.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.b[self.at..self.at + N]);
        self.at += N;
        out
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all() -> Vec<Record> {
        let head = [7u8; HEAD];
        vec![
            Record::Hello {
                cookie: u64::MAX - 3,
                rank: 9,
                probe_addr: 0x7fff_0000_1000,
                probe: [5; 16],
            },
            Record::Mode(Mode::Cma),
            Record::Mode(Mode::Ring),
            Record::RingFd { size: 8 << 20 },
            Record::Message { head, addr: 42 },
            Record::RingChunk {
                head,
                pos: 1 << 40,
                at: 3,
                len: 4096,
            },
            Record::RingFreed { chunks: 77 },
            Record::Goodbye,
        ]
    }

    #[test]
    fn every_record_round_trips() {
        for r in all() {
            assert_eq!(Record::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn bad_records_are_errors() {
        let mut b = all()[0].encode();
        b[8] ^= 1;
        assert!(Record::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut b = all()[0].encode();
        b[12] = VERSION + 1;
        assert!(Record::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("version"));
        let mut b = all()[1].encode();
        b[8] = 3;
        assert!(Record::decode(&b).is_err());
        let mut b = all()[1].encode();
        b[3] = 1;
        assert!(Record::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("reserved"));
        assert!(Record::decode(&[0u8; 63]).is_err());
        assert!(Record::decode(&[0u8; 64])
            .unwrap_err()
            .to_string()
            .contains("kind 0"));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(r) = Record::decode(&bytes) {
                prop_assert_eq!(&r.encode()[..], &bytes[..]);
            }
        }
    }
}
