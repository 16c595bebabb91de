//! The bootstrap blob: what every rank tells every other through the host's allgather when a
//! communicator is created. Typed and versioned, with a status, so that a rank whose local
//! setup failed still takes part and every rank takes the same decision (DESIGN.md,
//! "Agreement": no rank ever falls back to the MPI's broadcast alone).
//!
//! All integers little-endian. Fixed 56-byte head, then three strings:
//!
//! ```text
//! 0  magic "PCB"   3 version u8 (1; 2 when rail NICs or a verbs section follow)
//! 4  status u8 (0 ready, 1 failed)   5 code u8 (error class of a failure)   6 flags u16 (bit 0: has MAC)
//! 8  job cookie u64 (rank 0's is the job's)
//! 16 TCP port u16  18 address family u8 (4 or 6)  19 reserved u8
//! 20 address: 16 bytes (IPv4 in the first 4)
//! 36 raw Ethernet MAC: 6 bytes   42 first CPU the rank may run on u16
//! 44 host length u16   46 settings length u16   48 reason length u16
//! 50 verbs section length u32 (version 2; 0 in version 1)   54 CPUs the rank may run on u16
//! 56 host bytes, settings bytes, reason bytes (UTF-8), then rail NICs and the verbs section
//! ```
//!
//! `settings` is the text of every setting that must be equal at every rank (tree, segment,
//! transport, window, digests of the profile and topology); `reason` says why a failed rank
//! failed.
//!
//! **Version 2** (issue 16, machines with several NICs): byte 19 counts the rank's NICs beyond
//! the first (0 to [`MAX_RAIL_NICS`]; the head's address and MAC are NIC 0's), and that many
//! 28-byte entries follow the strings, NIC 1 first:
//!
//! ```text
//! 0 TCP port u16   2 address family u8 (4 or 6)   3 flags u8 (bit 0: has MAC)
//! 4 address: 16 bytes   20 MAC: 6 bytes   26 reserved u16
//! ```
//!
//! **Version 2** (issue 17, RDMA verbs): bytes 50..54 give the length of a verbs section
//! after the rail NICs, 48 bytes whatever the number of ranks (queue pairs are connected per
//! tree edge when first used, through the listener named here: `transport/verbs/handshake.rs`):
//!
//! ```text
//! 0  port u8   1 GID index u8   2 LID u16   4 GID: 16 bytes   20 path MTU u8 (enum ibv_mtu)
//! 21 handshake listener's address family u8 (4 or 6)   22 its TCP port u16
//! 24 its address: 16 bytes (IPv4 in the first 4)   40 ring slot bytes u32   44 ring slots u32
//! ```
//!
//! A blob with neither rail NICs nor verbs is written as version 1, which every version-1
//! rank reads; both versions parse.
//!
//! **CPUs** (issue 11, both versions): bytes 42 and 54, reserved (zero) before, give the
//! lowest CPU of the rank's affinity mask and how many CPUs it may use ([`CpuRange`]); a count
//! of 0 means unknown, which is what a rank from before writes. Ranks on one host then know
//! how many CPUs they share, all from the same blobs, so they decide alike whether the host
//! is oversubscribed.
//!
//! **Link** (issue 28, both versions): flag bit 1 says that the last 12 bytes, after
//! everything above, are what the rank knows of its data link, from which every rank derives
//! the same calibration profile (`comm::network`):
//!
//! ```text
//! 0 link rate, Mbit/s u32 (0: unknown)   4 CPU per segment end, ns u32 (0: not measured)
//! 8 the host's byte rate through its network stack, MB/s u32 (0: not measured)
//! ```

use super::WireError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The version written when the rank has rail NICs or a verbs section.
pub const VERSION: u8 = 2;
/// The version of a blob with neither.
pub const VERSION_PLAIN: u8 = 1;
/// Bytes of the verbs section.
pub const VERBS_HEAD: usize = 48;
/// Most NICs beyond the first a blob carries (`topology::MAX_NICS` − 1).
pub const MAX_RAIL_NICS: usize = 15;
/// Bytes of one rail NIC's entry.
pub const NIC_LEN: usize = 28;
const MAGIC: [u8; 3] = *b"PCB";
/// Bytes of the fixed head.
pub const HEAD_LEN: usize = 56;
/// Longest string field.
pub const MAX_TEXT: usize = 4096;
/// Bytes of the link section.
pub const LINK_LEN: usize = 12;
/// The flag of the link section (head bytes 6..8).
const HAS_LINK: u16 = 2;

/// A rank's state at the agreement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ready,
    /// Local setup failed; `code` classifies it (see `Repr::code`).
    Failed,
}

/// Where one NIC beyond the first listens, and its raw Ethernet MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicAddr {
    pub addr: SocketAddr,
    pub mac: Option<[u8; 6]>,
}

/// The rank's NICs 1, 2, … (rails 1, 2, …): a fixed-capacity list, so parsing never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RailNics {
    count: usize,
    nics: [Option<NicAddr>; MAX_RAIL_NICS],
}

impl RailNics {
    /// The list of `nics`, or an error past [`MAX_RAIL_NICS`].
    pub fn new(nics: &[NicAddr]) -> Result<RailNics, WireError> {
        if nics.len() > MAX_RAIL_NICS {
            return Err(WireError::TooLong {
                what: "rail NICs",
                len: nics.len(),
                max: MAX_RAIL_NICS,
            });
        }
        let mut out = RailNics::default();
        for (slot, nic) in out.nics.iter_mut().zip(nics) {
            *slot = Some(*nic);
        }
        out.count = nics.len();
        Ok(out)
    }
    pub fn len(&self) -> usize {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// NIC `rail` (1-based like the rails: `get(1)` is NIC 1).
    pub fn get(&self, rail: usize) -> Option<NicAddr> {
        rail.checked_sub(1)
            .and_then(|i| self.nics[..self.count].get(i).copied().flatten())
    }
    pub fn iter(&self) -> impl Iterator<Item = NicAddr> + '_ {
        self.nics[..self.count].iter().flatten().copied()
    }
}

/// The CPUs a rank may run on, as a range: its affinity mask's lowest CPU and how many CPUs
/// it may use (the mask's size, capped by a cgroup quota). Exact for the masks launchers give
/// (a core, a socket, a list of consecutive cores, or everything); an approximation for a
/// scattered mask. See `comm::cpus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuRange {
    pub first: u16,
    /// At least 1.
    pub count: u16,
}

/// What a rank knows of its data link (the blob's link section); 0 is unknown everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkSeen {
    pub rate_mbps: u32,
    /// CPU time per segment end, ns.
    pub segment_ns: u32,
    /// The host's byte rate through its network stack, MB/s (bytes per µs).
    pub host_mb_s: u32,
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
    /// NICs 1, 2, … with their own addresses (empty for a one-NIC rank; version 2).
    pub rails: RailNics,
    /// The rank's RDMA verbs endpoint, when it opened one (version 2).
    pub verbs: Option<VerbsAddr>,
    /// The CPUs the rank may run on (`None`: unknown).
    pub cpus: Option<CpuRange>,
    /// What the rank knows of its data link.
    pub link: Option<LinkSeen>,
}

/// Where a rank's RDMA port is, and where it listens for queue pair handshakes (the verbs
/// section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsAddr {
    pub port: u8,
    /// The GID table index (RoCE v2: the entry of the wanted address and version).
    pub gid_index: u8,
    pub lid: u16,
    pub gid: [u8; 16],
    /// Active path MTU, `enum ibv_mtu` (1: 256 bytes … 5: 4096).
    pub mtu: u8,
    /// Where the rank accepts queue pair handshakes (TCP).
    pub listen: SocketAddr,
    /// The rank's fallback rings: `ring_slots` slots of `ring_slot` bytes per edge (every
    /// rank must agree; each ring's address and key travel in the edge's handshake).
    pub ring_slot: u32,
    pub ring_slots: u32,
}

impl VerbsAddr {
    /// Bytes of the section.
    pub fn buffer_len(&self) -> usize {
        VERBS_HEAD
    }

    fn emit(&self, b: &mut [u8]) {
        b[0] = self.port;
        b[1] = self.gid_index;
        b[2..4].copy_from_slice(&self.lid.to_le_bytes());
        b[4..20].copy_from_slice(&self.gid);
        b[20] = self.mtu;
        let mut family = 0;
        put_address(self.listen, &mut family, &mut b[24..40]);
        b[21] = family;
        b[22..24].copy_from_slice(&self.listen.port().to_le_bytes());
        b[40..44].copy_from_slice(&self.ring_slot.to_le_bytes());
        b[44..48].copy_from_slice(&self.ring_slots.to_le_bytes());
    }

    fn parse(b: &[u8]) -> Result<VerbsAddr, WireError> {
        let bad = |detail: String| WireError::BadLength {
            what: "bootstrap blob's verbs section",
            detail,
        };
        if b.len() != VERBS_HEAD {
            return Err(bad(format!(
                "{} bytes, {VERBS_HEAD} expected (a rank runs another pipecast?)",
                b.len()
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(VerbsAddr {
            port: b[0],
            gid_index: b[1],
            lid: u16_at(b, 2),
            gid: b[4..20].try_into().expect("16 bytes"),
            mtu: b[20],
            listen: address(b[21], u16_at(b, 22), &b[24..40])?,
            ring_slot: u32_at(40),
            ring_slots: u32_at(44),
        })
    }
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// An address from a family byte, a port and 16 address bytes.
fn address(family: u8, port: u16, a: &[u8]) -> Result<SocketAddr, WireError> {
    let ip = match family {
        4 => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
        6 => {
            let mut v6 = [0u8; 16];
            v6.copy_from_slice(&a[..16]);
            IpAddr::V6(Ipv6Addr::from(v6))
        }
        f => {
            return Err(WireError::BadLength {
                what: "bootstrap blob",
                detail: format!("unknown address family {f}"),
            })
        }
    };
    Ok(SocketAddr::new(ip, port))
}

/// Writes `addr`'s family at `b[0]` and its bytes into `a` (16 bytes).
fn put_address(addr: SocketAddr, family: &mut u8, a: &mut [u8]) {
    match addr.ip() {
        IpAddr::V4(v4) => {
            *family = 4;
            a[..4].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            *family = 6;
            a[..16].copy_from_slice(&v6.octets());
        }
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
            return Err(WireError::BadLength {
                what: "bootstrap blob",
                detail: "no \"PCB\" magic: is every rank running pipecast?".into(),
            });
        }
        if b[3] != VERSION_PLAIN && b[3] != VERSION {
            return Err(WireError::BadVersion {
                got: b[3],
                want: VERSION,
            });
        }
        let rail_count = if b[3] == VERSION_PLAIN {
            0
        } else {
            usize::from(b[19])
        };
        if rail_count > MAX_RAIL_NICS {
            return Err(WireError::BadLength {
                what: "bootstrap blob",
                detail: format!("{rail_count} rail NICs, at most {MAX_RAIL_NICS}"),
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
        let addr = address(b[18], port, &b[20..36])?;
        let mac = (flags & 1 != 0).then(|| b[36..42].try_into().expect("6 bytes"));
        let lens = [u16_at(b, 44), u16_at(b, 46), u16_at(b, 48)].map(usize::from);
        let verbs_len = if b[3] == VERSION {
            u32::from_le_bytes(b[50..54].try_into().expect("4 bytes")) as usize
        } else {
            0
        };
        let strings_end = HEAD_LEN + lens.iter().sum::<usize>();
        let rails_end = strings_end + rail_count * NIC_LEN;
        let verbs_end = rails_end.saturating_add(verbs_len);
        let need = verbs_end.saturating_add(if flags & HAS_LINK != 0 { LINK_LEN } else { 0 });
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
        let (host, settings, reason) = (
            text(lens[0], "host")?,
            text(lens[1], "settings")?,
            text(lens[2], "reason")?,
        );
        let mut rails = RailNics::default();
        for (i, e) in b[strings_end..rails_end].chunks_exact(NIC_LEN).enumerate() {
            rails.nics[i] = Some(NicAddr {
                addr: address(e[2], u16_at(e, 0), &e[4..20])?,
                mac: (e[3] & 1 != 0).then(|| e[20..26].try_into().expect("6 bytes")),
            });
        }
        rails.count = rail_count;
        Ok(Repr {
            status,
            code: b[5],
            cookie,
            addr,
            mac,
            host,
            settings,
            reason,
            rails,
            verbs: match verbs_len {
                0 => None,
                _ => Some(VerbsAddr::parse(&b[rails_end..verbs_end])?),
            },
            link: (flags & HAS_LINK != 0).then(|| {
                let l = &b[verbs_end..];
                let u32_at = |i: usize| u32::from_le_bytes(l[i..i + 4].try_into().expect("4"));
                LinkSeen {
                    rate_mbps: u32_at(0),
                    segment_ns: u32_at(4),
                    host_mb_s: u32_at(8),
                }
            }),
            cpus: match u16_at(b, 54) {
                0 => None,
                count => Some(CpuRange {
                    first: u16_at(b, 42),
                    count,
                }),
            },
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEAD_LEN
            + self.host.len()
            + self.settings.len()
            + self.reason.len()
            + self.rails.len() * NIC_LEN
            + self.verbs.as_ref().map_or(0, VerbsAddr::buffer_len)
            + self.link.map_or(0, |_| LINK_LEN)
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
        // One NIC and no verbs: version 1, what every earlier pipecast reads.
        b[3] = if self.rails.is_empty() && self.verbs.is_none() {
            VERSION_PLAIN
        } else {
            VERSION
        };
        b[19] = self.rails.len() as u8;
        b[4] = match self.status {
            Status::Ready => 0,
            Status::Failed => 1,
        };
        b[5] = self.code;
        let flags = u16::from(self.mac.is_some()) | if self.link.is_some() { HAS_LINK } else { 0 };
        b[6..8].copy_from_slice(&flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_le_bytes());
        b[16..18].copy_from_slice(&self.addr.port().to_le_bytes());
        {
            let (head, rest) = b.split_at_mut(20);
            put_address(self.addr, &mut head[18], &mut rest[..16]);
        }
        if let Some(mac) = self.mac {
            b[36..42].copy_from_slice(&mac);
        }
        if let Some(cpus) = self.cpus.filter(|c| c.count > 0) {
            b[42..44].copy_from_slice(&cpus.first.to_le_bytes());
            b[54..56].copy_from_slice(&cpus.count.to_le_bytes());
        }
        let mut at = HEAD_LEN;
        for (i, s) in [self.host, self.settings, self.reason].iter().enumerate() {
            b[44 + 2 * i..46 + 2 * i].copy_from_slice(&(s.len() as u16).to_le_bytes());
            b[at..at + s.len()].copy_from_slice(s.as_bytes());
            at += s.len();
        }
        for nic in self.rails.iter() {
            let e = &mut b[at..at + NIC_LEN];
            e[0..2].copy_from_slice(&nic.addr.port().to_le_bytes());
            let (head, rest) = e.split_at_mut(4);
            put_address(nic.addr, &mut head[2], &mut rest[..16]);
            if let Some(mac) = nic.mac {
                e[3] = 1;
                e[20..26].copy_from_slice(&mac);
            }
            at += NIC_LEN;
        }
        if let Some(v) = &self.verbs {
            b[50..54].copy_from_slice(&(v.buffer_len() as u32).to_le_bytes());
            v.emit(&mut b[at..at + v.buffer_len()]);
            at += v.buffer_len();
        }
        if let Some(l) = self.link {
            for (i, v) in [l.rate_mbps, l.segment_ns, l.host_mb_s].iter().enumerate() {
                b[at + 4 * i..at + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
            }
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

    // The samples are the fuzz seeds' blobs: `tests/fuzz_seeds.rs` makes them with this
    // encoder and checks that the committed files are what it makes now
    // (`PIPECAST_FUZZ_SEEDS=write cargo test --test fuzz_seeds` writes them anew).
    const SEED_READY: &[u8] = include_bytes!("../../fuzz/seeds/bootstrap/blob_ready");
    const SEED_FULL: &[u8] = include_bytes!("../../fuzz/seeds/bootstrap/blob_full");

    /// A ready rank's blob: IPv4 address, a MAC, a CPU range; no rails, verbs or link.
    fn sample() -> Repr<'static> {
        Repr::parse(SEED_READY).expect("fuzz/seeds/bootstrap/blob_ready parses")
    }

    /// A blob with every section: rails, verbs and the link.
    fn full() -> Repr<'static> {
        Repr::parse(SEED_FULL).expect("fuzz/seeds/bootstrap/blob_full parses")
    }

    fn verbs() -> VerbsAddr {
        full().verbs.expect("blob_full has a verbs section")
    }

    /// The link section rides at the very end, behind a flag, with or without verbs.
    #[test]
    fn the_link_section_round_trips_behind_its_flag() {
        let seen = full().link.expect("blob_full has a link section");
        for verbs in [None, Some(verbs())] {
            let plain = Repr {
                verbs: verbs.clone(),
                ..sample()
            };
            let with = Repr {
                link: Some(seen),
                ..plain.clone()
            };
            let bytes = with.to_vec().unwrap();
            assert_eq!(bytes.len(), plain.to_vec().unwrap().len() + LINK_LEN);
            assert_eq!(Repr::parse(&bytes).unwrap(), with);
            let mut cut = bytes.clone();
            cut.pop();
            assert!(Repr::parse(&cut).is_err());
            // The flag without the bytes, and the bytes without the flag, are errors.
            let mut unflagged = bytes.clone();
            unflagged[6] &= !2;
            assert!(Repr::parse(&unflagged).is_err());
        }
    }

    /// A blob without verbs is version 1, as before; with verbs, version 2 carries them.
    #[test]
    fn the_verbs_section_is_versioned_compatibly() {
        let plain = sample().to_vec().unwrap();
        assert_eq!(plain[3], 1);
        assert_eq!(&plain[50..54], &[0; 4]);
        let with = Repr {
            verbs: Some(verbs()),
            ..sample()
        };
        let bytes = with.to_vec().unwrap();
        assert_eq!(bytes[3], 2);
        assert_eq!(bytes.len(), plain.len() + VERBS_HEAD);
        assert_eq!(Repr::parse(&bytes).unwrap(), with);
        let mut cut = bytes.clone();
        cut.pop();
        assert!(Repr::parse(&cut).is_err());
        // A listener of an unknown address family.
        let mut b = bytes;
        let at = b.len() - VERBS_HEAD + 21;
        b[at] = 9;
        assert!(Repr::parse(&b)
            .unwrap_err()
            .to_string()
            .contains("address family"));
        // An IPv6 listener round-trips too.
        let v6 = Repr {
            verbs: Some(VerbsAddr {
                listen: "[fd00::7]:9".parse().unwrap(),
                ..verbs()
            }),
            ..sample()
        };
        assert_eq!(Repr::parse(&v6.to_vec().unwrap()).unwrap(), v6);
    }

    #[test]
    fn rail_nics_travel_in_version_2_and_one_nic_stays_version_1() {
        let one = sample().to_vec().unwrap();
        assert_eq!((one[3], one[19]), (1, 0));
        let nics = [
            NicAddr {
                addr: "198.19.0.7:40124".parse().unwrap(),
                mac: Some([2, 0, 0, 1, 0, 7]),
            },
            NicAddr {
                addr: "[fd00::7]:9".parse().unwrap(),
                mac: None,
            },
        ];
        let r = Repr {
            rails: RailNics::new(&nics).unwrap(),
            ..sample()
        };
        let bytes = r.to_vec().unwrap();
        assert_eq!((bytes[3], bytes[19]), (2, 2));
        assert_eq!(bytes.len(), one.len() + 2 * NIC_LEN);
        let back = Repr::parse(&bytes).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.rails.get(1), Some(nics[0]));
        assert_eq!(back.rails.get(2), Some(nics[1]));
        assert_eq!((back.rails.get(0), back.rails.get(3)), (None, None));
        // A version-1 blob with a stray count byte keeps ignoring it; lengths must add up.
        let mut v1 = one.clone();
        v1[19] = 3;
        assert!(Repr::parse(&v1).unwrap().rails.is_empty());
        let mut cut = bytes.clone();
        cut.pop();
        assert!(Repr::parse(&cut).is_err());
        let mut many = bytes;
        many[19] = 16;
        assert!(Repr::parse(&many)
            .unwrap_err()
            .to_string()
            .contains("16 rail NICs"));
        assert!(RailNics::new(&[nics[0]; 16]).is_err());
    }

    /// The CPU range rides in bytes that were reserved (zero): a blob from before reads as
    /// "unknown", and a count of zero is never written.
    #[test]
    fn cpus_ride_in_the_reserved_bytes() {
        let bytes = sample().to_vec().unwrap();
        assert_eq!(bytes[3], 1);
        assert_eq!((u16_at(&bytes, 42), u16_at(&bytes, 54)), (4, 2));
        let mut before = bytes.clone();
        before[42..44].fill(0);
        before[54..56].fill(0);
        assert_eq!(Repr::parse(&before).unwrap().cpus, None);
        let none = Repr {
            cpus: None,
            ..sample()
        };
        assert_eq!(none.to_vec().unwrap(), before);
        let zero = Repr {
            cpus: Some(CpuRange { first: 3, count: 0 }),
            ..sample()
        };
        assert_eq!(zero.to_vec().unwrap(), before);
    }

    /// Rail NICs and a verbs section in one version-2 blob: rails first, then verbs.
    #[test]
    fn rails_and_verbs_travel_together() {
        let nic = NicAddr {
            addr: "198.19.0.7:40124".parse().unwrap(),
            mac: None,
        };
        let r = Repr {
            rails: RailNics::new(&[nic]).unwrap(),
            verbs: Some(verbs()),
            ..sample()
        };
        let bytes = r.to_vec().unwrap();
        assert_eq!((bytes[3], bytes[19]), (2, 1));
        assert_eq!(Repr::parse(&bytes).unwrap(), r);
        let mut cut = bytes;
        cut.pop();
        assert!(Repr::parse(&cut).is_err());
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
