//! The bootstrap blob: what every rank tells every other through the host's allgather when a
//! communicator is created. Typed and versioned, with a status, so that a rank whose local
//! setup failed still takes part and every rank takes the same decision (DESIGN.md,
//! "Agreement": no rank ever falls back to the MPI's broadcast alone).
//!
//! All integers little-endian. Fixed 56-byte head, then three strings:
//!
//! ```text
//! 0  magic "PCB"   3 version u8 (1; 2 when a verbs section follows)
//! 4  status u8 (0 ready, 1 failed)   5 code u8 (error class of a failure)   6 flags u16 (bit 0: has MAC)
//! 8  job cookie u64 (rank 0's is the job's)
//! 16 TCP port u16  18 address family u8 (4 or 6)  19 reserved u8
//! 20 address: 16 bytes (IPv4 in the first 4)
//! 36 raw Ethernet MAC: 6 bytes   42 reserved u16
//! 44 host length u16   46 settings length u16   48 reason length u16
//! 50 verbs section length u32 (version 2; 0 in version 1)   54 reserved u16
//! 56 host bytes, settings bytes, reason bytes (UTF-8), then the verbs section:
//!
//! 0  port u8   1 GID index u8   2 LID u16   4 GID: 16 bytes   20 path MTU u8 (enum ibv_mtu)
//! 21 reserved: 3 bytes   24 ring address u64   32 ring rkey u32   36 ring slot bytes u32
//! 40 ring slots u32   44 queue pairs u32 (n)   48 n queue pair numbers u32 (one per rank)
//! ```
//!
//! A blob without a verbs section is written as version 1, byte for byte what earlier
//! versions write, so ranks that do not use verbs still understand each other; a reader
//! takes both versions.
//!
//! `settings` is the text of every setting that must be equal at every rank (tree, segment,
//! transport, window, digests of the profile and topology); `reason` says why a failed rank
//! failed.

use super::WireError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const VERSION: u8 = 2;
/// The version of a blob without a verbs section.
pub const VERSION_PLAIN: u8 = 1;
/// Bytes of the verbs section before its queue pair numbers.
pub const VERBS_HEAD: usize = 48;
const MAGIC: [u8; 3] = *b"PCB";
/// Bytes of the fixed head.
pub const HEAD_LEN: usize = 56;
/// Longest string field.
pub const MAX_TEXT: usize = 4096;

/// A rank's state at the agreement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ready,
    /// Local setup failed; `code` classifies it (see `Repr::code`).
    Failed,
}

/// A parsed blob; strings borrow from the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr<'a> {
    pub status: Status,
    /// Error class of a failure (the C API's result code), 0 when ready.
    pub code: u8,
    pub cookie: u64,
    /// Where the rank's TCP link listens.
    pub addr: SocketAddr,
    /// The rank's raw Ethernet MAC, when it opened a raw socket.
    pub mac: Option<[u8; 6]>,
    pub host: &'a str,
    pub settings: &'a str,
    pub reason: &'a str,
    /// The rank's RDMA verbs endpoint, when it opened one.
    pub verbs: Option<VerbsAddr>,
}

/// Where a rank's RDMA port, queue pairs and fallback ring are (the verbs section).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerbsAddr {
    pub port: u8,
    /// The GID table index (RoCE v2: the entry of the wanted address and version).
    pub gid_index: u8,
    pub lid: u16,
    pub gid: [u8; 16],
    /// Active path MTU, `enum ibv_mtu` (1: 256 bytes … 5: 4096).
    pub mtu: u8,
    /// This rank's registered ring: peer p writes its pieces into block p of `ring_slots`
    /// slots of `ring_slot` bytes from `ring_addr`, under key `ring_rkey`.
    pub ring_addr: u64,
    pub ring_rkey: u32,
    pub ring_slot: u32,
    pub ring_slots: u32,
    /// `qpns[p]`: the number of this rank's queue pair to rank p (its own entry unused).
    pub qpns: Vec<u32>,
}

impl VerbsAddr {
    /// Bytes of the section.
    pub fn buffer_len(&self) -> usize {
        VERBS_HEAD + 4 * self.qpns.len()
    }

    fn emit(&self, b: &mut [u8]) {
        b[0] = self.port;
        b[1] = self.gid_index;
        b[2..4].copy_from_slice(&self.lid.to_le_bytes());
        b[4..20].copy_from_slice(&self.gid);
        b[20] = self.mtu;
        b[24..32].copy_from_slice(&self.ring_addr.to_le_bytes());
        b[32..36].copy_from_slice(&self.ring_rkey.to_le_bytes());
        b[36..40].copy_from_slice(&self.ring_slot.to_le_bytes());
        b[40..44].copy_from_slice(&self.ring_slots.to_le_bytes());
        b[44..48].copy_from_slice(&(self.qpns.len() as u32).to_le_bytes());
        for (i, q) in self.qpns.iter().enumerate() {
            b[VERBS_HEAD + 4 * i..VERBS_HEAD + 4 * i + 4].copy_from_slice(&q.to_le_bytes());
        }
    }

    fn parse(b: &[u8]) -> Result<VerbsAddr, WireError> {
        let bad = |detail: String| WireError::BadLength {
            what: "bootstrap blob's verbs section",
            detail,
        };
        if b.len() < VERBS_HEAD {
            return Err(bad(format!(
                "{} bytes, at least {VERBS_HEAD} needed",
                b.len()
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let n = u32_at(44) as usize;
        if b.len() != VERBS_HEAD + 4 * n {
            return Err(bad(format!(
                "{} bytes for {n} queue pairs ({} expected)",
                b.len(),
                VERBS_HEAD + 4 * n
            )));
        }
        Ok(VerbsAddr {
            port: b[0],
            gid_index: b[1],
            lid: u16_at(b, 2),
            gid: b[4..20].try_into().expect("16 bytes"),
            mtu: b[20],
            ring_addr: u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")),
            ring_rkey: u32_at(32),
            ring_slot: u32_at(36),
            ring_slots: u32_at(40),
            qpns: (0..n).map(|i| u32_at(VERBS_HEAD + 4 * i)).collect(),
        })
    }
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

impl<'a> Repr<'a> {
    /// Parses a blob, checking magic, version, lengths and UTF-8.
    pub fn parse(b: &'a [u8]) -> Result<Repr<'a>, WireError> {
        if b.len() < HEAD_LEN {
            return Err(WireError::Truncated {
                need: HEAD_LEN,
                got: b.len(),
            });
        }
        if b[0..3] != MAGIC {
            return Err(WireError::BadLength {
                what: "bootstrap blob",
                detail: "no \"PCB\" magic: is every rank running pipecast?".into(),
            });
        }
        if b[3] != VERSION && b[3] != VERSION_PLAIN {
            return Err(WireError::BadVersion {
                got: b[3],
                want: VERSION,
            });
        }
        let status = match b[4] {
            0 => Status::Ready,
            1 => Status::Failed,
            s => {
                return Err(WireError::BadLength {
                    what: "bootstrap blob",
                    detail: format!("unknown status {s}"),
                })
            }
        };
        let flags = u16_at(b, 6);
        let cookie = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        let port = u16_at(b, 16);
        let ip = match b[18] {
            4 => IpAddr::V4(Ipv4Addr::new(b[20], b[21], b[22], b[23])),
            6 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[20..36]);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            f => {
                return Err(WireError::BadLength {
                    what: "bootstrap blob",
                    detail: format!("unknown address family {f}"),
                })
            }
        };
        let mac = (flags & 1 != 0).then(|| b[36..42].try_into().expect("6 bytes"));
        let lens = [u16_at(b, 44), u16_at(b, 46), u16_at(b, 48)].map(usize::from);
        let verbs_len = if b[3] == VERSION {
            u32::from_le_bytes(b[50..54].try_into().expect("4 bytes")) as usize
        } else {
            0
        };
        let need = HEAD_LEN + lens.iter().sum::<usize>() + verbs_len;
        if b.len() != need {
            return Err(WireError::BadLength {
                what: "bootstrap blob",
                detail: format!("{} bytes, but its lengths say {need}", b.len()),
            });
        }
        let mut at = HEAD_LEN;
        let mut text = |len: usize, what: &'static str| {
            let s = std::str::from_utf8(&b[at..at + len]).map_err(|_| WireError::BadLength {
                what: "bootstrap blob",
                detail: format!("{what} is not UTF-8"),
            });
            at += len;
            s
        };
        Ok(Repr {
            status,
            code: b[5],
            cookie,
            addr: SocketAddr::new(ip, port),
            mac,
            host: text(lens[0], "host")?,
            settings: text(lens[1], "settings")?,
            reason: text(lens[2], "reason")?,
            verbs: match verbs_len {
                0 => None,
                _ => Some(VerbsAddr::parse(&b[need - verbs_len..])?),
            },
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEAD_LEN
            + self.host.len()
            + self.settings.len()
            + self.reason.len()
            + self.verbs.as_ref().map_or(0, VerbsAddr::buffer_len)
    }

    /// Writes the blob into `b` (at least [`Repr::buffer_len`] bytes); returns its length.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize, WireError> {
        for (what, s) in [
            ("host name", self.host),
            ("settings", self.settings),
            ("reason", self.reason),
        ] {
            if s.len() > MAX_TEXT {
                return Err(WireError::TooLong {
                    what,
                    len: s.len(),
                    max: MAX_TEXT,
                });
            }
        }
        let need = self.buffer_len();
        if b.len() < need {
            return Err(WireError::BufferTooSmall { need, got: b.len() });
        }
        let b = &mut b[..need];
        b.fill(0);
        b[0..3].copy_from_slice(&MAGIC);
        b[3] = if self.verbs.is_some() {
            VERSION
        } else {
            VERSION_PLAIN
        };
        b[4] = match self.status {
            Status::Ready => 0,
            Status::Failed => 1,
        };
        b[5] = self.code;
        b[6..8].copy_from_slice(&u16::from(self.mac.is_some()).to_le_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_le_bytes());
        b[16..18].copy_from_slice(&self.addr.port().to_le_bytes());
        match self.addr.ip() {
            IpAddr::V4(v4) => {
                b[18] = 4;
                b[20..24].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                b[18] = 6;
                b[20..36].copy_from_slice(&v6.octets());
            }
        }
        if let Some(mac) = self.mac {
            b[36..42].copy_from_slice(&mac);
        }
        let mut at = HEAD_LEN;
        for (i, s) in [self.host, self.settings, self.reason].iter().enumerate() {
            b[44 + 2 * i..46 + 2 * i].copy_from_slice(&(s.len() as u16).to_le_bytes());
            b[at..at + s.len()].copy_from_slice(s.as_bytes());
            at += s.len();
        }
        if let Some(v) = &self.verbs {
            b[50..54].copy_from_slice(&(v.buffer_len() as u32).to_le_bytes());
            v.emit(&mut b[at..]);
        }
        Ok(need)
    }

    /// The blob as a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, WireError> {
        let mut v = vec![0; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Repr<'static> {
        Repr {
            status: Status::Ready,
            code: 0,
            cookie: 0x0123_4567_89ab_cdef,
            addr: "198.18.0.7:40123".parse().unwrap(),
            mac: Some([2, 0, 0, 0, 0, 7]),
            host: "n7",
            settings: "tree=auto window=16",
            reason: "",
            verbs: None,
        }
    }

    fn verbs() -> VerbsAddr {
        VerbsAddr {
            port: 1,
            gid_index: 3,
            lid: 0,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, 7],
            mtu: 3,
            ring_addr: 0x7f12_3456_7000,
            ring_rkey: 0xabcd,
            ring_slot: 32768,
            ring_slots: 4,
            qpns: vec![0, 0x11, 0x22],
        }
    }

    /// A blob without verbs is version 1, as before; with verbs, version 2 carries them.
    #[test]
    fn the_verbs_section_is_versioned_compatibly() {
        let plain = sample().to_vec().unwrap();
        assert_eq!(plain[3], 1);
        assert_eq!(&plain[50..56], &[0; 6]);
        let with = Repr {
            verbs: Some(verbs()),
            ..sample()
        };
        let bytes = with.to_vec().unwrap();
        assert_eq!(bytes[3], 2);
        assert_eq!(bytes.len(), plain.len() + VERBS_HEAD + 12);
        assert_eq!(Repr::parse(&bytes).unwrap(), with);
        let mut cut = bytes.clone();
        cut.pop();
        assert!(Repr::parse(&cut).is_err());
        // A section whose queue pair count disagrees with its length.
        let mut b = bytes;
        let at = b.len() - 12 - VERBS_HEAD + 44;
        b[at] = 9;
        assert!(Repr::parse(&b)
            .unwrap_err()
            .to_string()
            .contains("queue pairs"));
    }

    #[test]
    fn round_trip() {
        for r in [
            sample(),
            Repr {
                status: Status::Failed,
                code: 3,
                addr: "[::1]:5".parse().unwrap(),
                mac: None,
                verbs: Some(verbs()),
                reason: "PIPECAST_IFACE: no interface matches \"nosuch0\"",
                ..sample()
            },
        ] {
            let bytes = r.to_vec().unwrap();
            assert_eq!(Repr::parse(&bytes).unwrap(), r);
        }
    }

    #[test]
    fn malformed_blobs_are_errors() {
        let good = sample().to_vec().unwrap();
        assert!(matches!(
            Repr::parse(&good[..10]),
            Err(WireError::Truncated { .. })
        ));
        let mut b = good.clone();
        b[3] = 9;
        assert!(matches!(
            Repr::parse(&b),
            Err(WireError::BadVersion { got: 9, .. })
        ));
        let mut b = good.clone();
        b.push(0);
        assert!(Repr::parse(&b).is_err());
        let mut b = good.clone();
        b[0] = b'X';
        assert!(Repr::parse(&b).unwrap_err().to_string().contains("magic"));
        let mut b = good;
        b[HEAD_LEN] = 0xff;
        assert!(Repr::parse(&b).unwrap_err().to_string().contains("UTF-8"));
        let long = "x".repeat(MAX_TEXT + 1);
        let r = Repr {
            reason: &long,
            ..sample()
        };
        assert!(r.to_vec().is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(0u8..=255, 0..200)) {
            let _ = Repr::parse(&bytes);
            let mut b = sample().to_vec().unwrap();
            for (i, x) in bytes.iter().enumerate() {
                let n = b.len();
                b[i % n] ^= x;
            }
            if let Ok(r) = Repr::parse(&b) {
                let again = r.to_vec().unwrap();
                proptest::prop_assert_eq!(Repr::parse(&again).unwrap(), r);
            }
        }
    }
}
