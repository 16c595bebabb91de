//! The job's group, derived from its cookie: an IPv4 group address in the organization-local
//! scope (239.192.0.0/14, RFC 2365) with a UDP port, and a locally administered group MAC
//! (03:50:…) for raw Ethernet. Every rank derives the same group from the cookie that the
//! bootstrap agreed, so nothing more is exchanged.
//!
//! **Collisions.** The cookie is 64 random bits; the group takes 18 bits of its hash for the
//! address and about 15 for the port, the MAC 32 bits. Two jobs on one network may thus
//! share a group (about 1 in 10¹⁰ for a pair of jobs over UDP; switches map 239.192.0.0/14 to
//! MACs by its low 23 bits, so their filtering is coarser still). That costs bandwidth, never
//! data: every frame carries the whole 64-bit cookie and is dropped unread when it is not this
//! job's (`accept` in `mod.rs`, counted as `foreign`), and the ranks' probe runs on the shared
//! group as on any other.

use crate::wire::frame::Mac;
use std::net::Ipv4Addr;

/// The first address of the organization-local scope, 239.192.0.0/14.
const ORG_LOCAL: u32 = 0xEFC0_0000;
/// UDP ports the group may use: 20000..60000 (below Linux's ephemeral range).
const PORT_BASE: u16 = 20_000;
const PORTS: u64 = 40_000;

/// Where a job's group frames go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub mac: Mac,
}

/// SplitMix64's finalizer: every bit of the cookie moves every bit of the result.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Group {
    /// The group of the job with `cookie`.
    pub fn of(cookie: u64) -> Group {
        let h = mix(cookie);
        let ip = Ipv4Addr::from(ORG_LOCAL | (h as u32 & 0x3_ffff));
        let port = PORT_BASE + ((h >> 18) % PORTS) as u16;
        let m = mix(h ^ 0x7069_7065_6361_7374).to_le_bytes();
        Group {
            ip,
            port,
            mac: [0x03, 0x50, m[0], m[1], m[2], m[3]],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_organization_local_and_locally_administered() {
        for cookie in [0u64, 1, 2, u64::MAX, 0xdead_beef, 1 << 63] {
            let g = Group::of(cookie);
            let o = g.ip.octets();
            assert_eq!(o[0], 239);
            assert_eq!(o[1] & 0xfc, 192, "{}", g.ip);
            assert!(g.ip.is_multicast());
            assert!((20_000..60_000).contains(&g.port));
            assert_eq!(g.mac[0] & 3, 3, "multicast, locally administered");
            assert_ne!(&g.mac[..3], &[0x01, 0x80, 0xc2], "never link-local");
            assert_eq!(Group::of(cookie), g, "every rank derives the same");
        }
    }

    #[test]
    fn neighbouring_cookies_get_different_groups() {
        let mut seen = std::collections::BTreeSet::new();
        for cookie in 0..10_000u64 {
            let g = Group::of(cookie);
            seen.insert((g.ip, g.port));
        }
        assert_eq!(seen.len(), 10_000);
        let macs: std::collections::BTreeSet<_> =
            (0..10_000u64).map(|c| Group::of(c).mac).collect();
        assert_eq!(macs.len(), 10_000);
    }
}
