//! The joining blob: what each member of a communicator joined on existing engines
//! (`comm::grow`, `Comm::join_on`) tells the others in the first round, before anything else
//! is set up, so that every member decides alike whether the communicator joins the engines
//! or gets its own. All integers little-endian; a fixed 64-byte head, then three strings:
//!
//! ```text
//! 0  magic "PCJ"   3 version u8 (2)
//! 4  status u8 (0: its engine can take the communicator, 1: it cannot, 2: local failure)
//! 5  address family u8 (4 or 6; 0 without an engine)   6 TCP port u16
//! 8  communicator id u32   12 first CPU u16   14 CPUs u16 (0: unknown)
//! 16 identity: job cookie u64   24 identity: rank u64
//! 32 address: 16 bytes (IPv4 in the first 4)
//! 48 host length u16   50 settings length u16   52 reason length u16
//! 54 engines u16   56 reserved: 8 bytes (0)
//! 64 host bytes, settings bytes, reason bytes (UTF-8)
//! ```
//!
//! The identity is the job cookie and rank of the setup that made the member's engine (what
//! its TCP hellos say, `wire::hello`), the address where that engine's TCP link listens,
//! `settings` the text of the engine's agreed settings, `reason` why a member's engine cannot
//! take the communicator (status 1) or why it failed (status 2), `engines` how many pipecast
//! engines (progress threads) the member's process holds as it sends the blob (saturated at
//! 65535; version 2, which added it: `comm::grow` bounds the engines per process with it).

use super::bootstrap::CpuRange;
use super::WireError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const MAGIC: [u8; 3] = *b"PCJ";
/// The version written and read.
pub const VERSION: u8 = 2;
/// Bytes of the fixed head.
pub const HEAD_LEN: usize = 64;
/// Longest string field.
pub const MAX_TEXT: usize = 4096;

/// A member's state in the first round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Its engine can take the communicator (its link can add peers).
    Engine,
    /// It has no engine that can (`reason` says why).
    NoEngine,
    /// Its local setup failed (`reason` says why).
    Failed,
}

/// A parsed joining blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr<'a> {
    pub status: Status,
    /// The communicator's id the member asks for (the same at every member).
    pub id: u32,
    pub identity: (u64, u64),
    /// Where the engine's TCP link listens (`None` without an engine).
    pub addr: Option<SocketAddr>,
    pub cpus: Option<CpuRange>,
    /// How many engines the member's process holds (`comm::grow`).
    pub engines: u16,
    pub host: &'a str,
    pub settings: &'a str,
    pub reason: &'a str,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(w)
}

fn bad(detail: String) -> WireError {
    WireError::Invalid {
        what: "joining blob",
        detail,
    }
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
            return Err(bad("no \"PCJ\" magic".into()));
        }
        if b[3] != VERSION {
            return Err(WireError::BadVersion {
                got: b[3],
                want: VERSION,
            });
        }
        let status = match b[4] {
            0 => Status::Engine,
            1 => Status::NoEngine,
            2 => Status::Failed,
            s => return Err(bad(format!("unknown status {s}"))),
        };
        let port = u16_at(b, 6);
        let addr = match b[5] {
            0 => None,
            4 => Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(b[32], b[33], b[34], b[35])),
                port,
            )),
            6 => {
                let mut v6 = [0u8; 16];
                v6.copy_from_slice(&b[32..48]);
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(v6)), port))
            }
            f => return Err(bad(format!("unknown address family {f}"))),
        };
        if status == Status::Engine && addr.is_none() {
            return Err(bad("a member with an engine gave no address".into()));
        }
        let lens = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52)].map(usize::from);
        let total = HEAD_LEN + lens.iter().sum::<usize>();
        if b.len() != total {
            return Err(WireError::BadLength {
                what: "joining blob",
                detail: format!("{} bytes, its lengths say {total}", b.len()),
            });
        }
        let mut at = HEAD_LEN;
        let mut text = |len: usize| {
            let s = std::str::from_utf8(&b[at..at + len]).map_err(|e| bad(e.to_string()));
            at += len;
            s
        };
        let (host, settings, reason) = (text(lens[0])?, text(lens[1])?, text(lens[2])?);
        let mut id = [0u8; 4];
        id.copy_from_slice(&b[8..12]);
        Ok(Repr {
            status,
            id: u32::from_le_bytes(id),
            identity: (u64_at(b, 16), u64_at(b, 24)),
            addr,
            cpus: match u16_at(b, 14) {
                0 => None,
                count => Some(CpuRange {
                    first: u16_at(b, 12),
                    count,
                }),
            },
            engines: u16_at(b, 54),
            host,
            settings,
            reason,
        })
    }

    /// The blob's bytes; an error when a string is longer than [`MAX_TEXT`].
    pub fn to_vec(&self) -> Result<Vec<u8>, WireError> {
        let texts = [self.host, self.settings, self.reason];
        for (what, t) in ["host", "settings", "reason"].iter().zip(texts) {
            if t.len() > MAX_TEXT {
                return Err(WireError::TooLong {
                    what,
                    len: t.len(),
                    max: MAX_TEXT,
                });
            }
        }
        let mut b = vec![0u8; HEAD_LEN];
        b[..3].copy_from_slice(&MAGIC);
        b[3] = VERSION;
        b[4] = match self.status {
            Status::Engine => 0,
            Status::NoEngine => 1,
            Status::Failed => 2,
        };
        if let Some(addr) = self.addr {
            b[6..8].copy_from_slice(&addr.port().to_le_bytes());
            match addr.ip() {
                IpAddr::V4(v4) => {
                    b[5] = 4;
                    b[32..36].copy_from_slice(&v4.octets());
                }
                IpAddr::V6(v6) => {
                    b[5] = 6;
                    b[32..48].copy_from_slice(&v6.octets());
                }
            }
        }
        b[8..12].copy_from_slice(&self.id.to_le_bytes());
        if let Some(c) = self.cpus.filter(|c| c.count > 0) {
            b[12..14].copy_from_slice(&c.first.to_le_bytes());
            b[14..16].copy_from_slice(&c.count.to_le_bytes());
        }
        b[16..24].copy_from_slice(&self.identity.0.to_le_bytes());
        b[24..32].copy_from_slice(&self.identity.1.to_le_bytes());
        for (i, t) in texts.iter().enumerate() {
            b[48 + 2 * i..50 + 2 * i].copy_from_slice(&(t.len() as u16).to_le_bytes());
        }
        b[54..56].copy_from_slice(&self.engines.to_le_bytes());
        for t in texts {
            b.extend_from_slice(t.as_bytes());
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Repr<'static> {
        Repr {
            status: Status::Engine,
            id: 0x8000_0007,
            identity: (0xdead_beef_1234_5678, 3),
            addr: Some("10.1.2.3:4567".parse().unwrap()),
            cpus: Some(CpuRange { first: 2, count: 4 }),
            engines: 2,
            host: "node-a",
            settings: "tree=auto segment=65536",
            reason: "",
        }
    }

    #[test]
    fn round_trips() {
        let a = sample();
        assert_eq!(Repr::parse(&a.to_vec().unwrap()).unwrap(), a);
        let b = Repr {
            status: Status::NoEngine,
            addr: None,
            cpus: None,
            reason: "its link (raweth:eth0) cannot add peers",
            ..sample()
        };
        assert_eq!(Repr::parse(&b.to_vec().unwrap()).unwrap(), b);
        let c = Repr {
            addr: Some("[fe80::1]:9".parse().unwrap()),
            ..sample()
        };
        assert_eq!(Repr::parse(&c.to_vec().unwrap()).unwrap(), c);
    }

    #[test]
    fn malformed_blobs_are_errors() {
        let good = sample().to_vec().unwrap();
        assert!(Repr::parse(&good[..HEAD_LEN - 1]).is_err());
        assert!(Repr::parse(&good[..good.len() - 1]).is_err());
        let mut extra = good.clone();
        extra.push(0);
        assert!(Repr::parse(&extra).is_err());
        for (at, value) in [(0, b'X'), (3, 1), (3, 9), (4, 3), (5, 5)] {
            let mut b = good.clone();
            b[at] = value;
            assert!(Repr::parse(&b).is_err(), "byte {at} = {value}");
        }
        let mut no_addr = good.clone();
        no_addr[5] = 0;
        assert!(Repr::parse(&no_addr).is_err(), "an engine without address");
        let mut bad_utf8 = good.clone();
        bad_utf8[HEAD_LEN] = 0xff;
        assert!(Repr::parse(&bad_utf8).is_err());
        let long = "x".repeat(MAX_TEXT + 1);
        assert!(Repr {
            host: &long,
            ..sample()
        }
        .to_vec()
        .is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(0u8..=255, 0..200)) {
            let _ = Repr::parse(&bytes);
        }
    }
}
