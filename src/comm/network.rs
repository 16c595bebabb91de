//! What a communicator knows of its network for the model, when no profile was given: each
//! rank's data link rate and its host's cost per segment, carried in the bootstrap blobs, and
//! the one profile every rank derives from them (`model::network`; issue 28).
//!
//! A rank's rate is, in this order: `PIPECAST_LINK_RATE` (`pipecast lab run` sets the lab's),
//! the slowest `gbps` of the topology file, the speed its NIC reports
//! (`/sys/class/net/IFACE/speed` of the interface it listens on). Its host's cost is measured
//! once per host, build and NIC ([`host_cost`](super::host_cost)), and only where a rate is
//! known. Every rank derives the profile from everybody's blobs, the slowest rate and the
//! costliest host, so all plan alike; where no rank knows a rate (loopback, a virtual NIC
//! that reports none) the profile stays seed 003's Table 2 at 1 Gbit/s, as before.

use super::Config;
use crate::model::network::Network;
use crate::model::Profile;
use crate::wire::bootstrap::LinkSeen;

/// What this rank tells the others of its link: `None` where nothing is known. Where a
/// profile was given, its rate alone (nothing to derive for the model, and the host's cost is
/// not measured): a multicast root paces by the agreed rate whatever the profile
/// (`comm::multicast_setup`; unpaced, it stalled on its socket and ran late through the Open
/// MPI component, which gives a profile: docs/multicast.md, "A late root").
pub fn observe(config: &Config, ip: &str) -> Option<LinkSeen> {
    let (rate, nic) = local_rate(config, ip)?;
    if config.profile_given {
        return Some(LinkSeen {
            rate_mbps: (rate / 1_000_000).clamp(1, u64::from(u32::MAX)) as u32,
            segment_ns: 0,
            host_mb_s: 0,
        });
    }
    let host = super::hosts::host_name(config.machine.as_deref());
    let cost = super::host_cost::host_cost(&nic, &host);
    Some(LinkSeen {
        rate_mbps: (rate / 1_000_000).clamp(1, u64::from(u32::MAX)) as u32,
        segment_ns: cost.map_or(0, |c| (c.segment_us * 1e3).round().clamp(1.0, 1e9) as u32),
        host_mb_s: cost.map_or(0, |c| c.bytes_per_us.round().clamp(1.0, 1e9) as u32),
    })
}

/// This rank's link rate in bits/s and a description of its NIC (for the cost's cache key).
fn local_rate(config: &Config, ip: &str) -> Option<(u64, String)> {
    if let Some(rate) = config.link_rate {
        return Some((rate, format!("PIPECAST_LINK_RATE={rate}")));
    }
    if let Some(gbps) = config.topology.as_ref().and_then(topology_gbps) {
        let rate = (gbps * 1e9) as u64;
        return Some((rate, format!("topology {rate}")));
    }
    let iface = crate::transport::ifaddrs::ipv4_interfaces()
        .ok()?
        .into_iter()
        .find(|i| i.addr.to_string() == ip && !i.loopback)?;
    let speed = std::fs::read_to_string(format!("/sys/class/net/{}/speed", iface.name)).ok()?;
    let mbps = speed.trim().parse::<u64>().ok().filter(|m| *m > 0)?;
    Some((mbps * 1_000_000, format!("{} {mbps}Mb/s", iface.name)))
}

/// The slowest `gbps` the topology gives a machine or a link.
fn topology_gbps(t: &crate::topology::Topology) -> Option<f64> {
    t.machines()
        .iter()
        .filter_map(|m| m.gbps)
        .chain(t.links().iter().filter_map(|l| l.gbps))
        .filter(|g| g.is_finite() && *g > 0.0)
        .reduce(f64::min)
}

/// The profile every rank derives from everybody's link sections: the slowest rate known, the
/// costliest host measured (the default cost where none was), the slowest host byte rate.
/// `None`: no rank knows its rate; keep the configured profile.
pub fn agreed(seen: &[Option<LinkSeen>]) -> Option<(Network, Profile)> {
    let seen: Vec<LinkSeen> = seen.iter().flatten().copied().collect();
    let rate_mbps = seen.iter().map(|s| s.rate_mbps).filter(|&r| r > 0).min()?;
    let segment_ns = seen.iter().map(|s| s.segment_ns).filter(|&n| n > 0).max();
    let host = seen.iter().map(|s| s.host_mb_s).filter(|&m| m > 0).min();
    let net = Network {
        rate_bps: u64::from(rate_mbps) * 1_000_000,
        segment_us: segment_ns.map_or(crate::model::profile::DEFAULT_SEGMENT_CPU_US, |n| {
            f64::from(n) / 1e3
        }),
        host_bytes_per_us: host.map(f64::from),
    };
    Some((net, net.profile()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(rate_mbps: u32, segment_ns: u32, host_mb_s: u32) -> Option<LinkSeen> {
        Some(LinkSeen {
            rate_mbps,
            segment_ns,
            host_mb_s,
        })
    }

    #[test]
    fn every_rank_derives_the_slowest_link_and_the_costliest_host() {
        let (net, profile) = agreed(&[
            seen(10_000, 8_000, 3_000),
            None,
            seen(1_000, 15_000, 0),
            seen(0, 0, 2_000),
        ])
        .unwrap();
        assert_eq!(net.rate_bps, 1_000_000_000);
        assert_eq!(net.segment_us, 15.0);
        assert_eq!(net.host_bytes_per_us, Some(2000.0));
        assert_eq!(profile, net.profile());
        // Nobody measured: the default cost.
        let (net, _) = agreed(&[seen(100, 0, 0)]).unwrap();
        assert_eq!(
            net.segment_us,
            crate::model::profile::DEFAULT_SEGMENT_CPU_US
        );
        // Nobody knows a rate: keep the configured profile.
        assert!(agreed(&[None, seen(0, 5_000, 100)]).is_none());
        assert!(agreed(&[]).is_none());
    }

    #[test]
    fn a_given_profile_or_rate_wins() {
        let mut c = Config {
            profile_given: true,
            link_rate: Some(10_000_000_000),
            ..Config::default()
        };
        // A given profile: the rate alone (the multicast root's pace), no host cost.
        assert_eq!(
            observe(&c, "127.0.0.1"),
            Some(LinkSeen {
                rate_mbps: 10_000,
                segment_ns: 0,
                host_mb_s: 0,
            })
        );
        c.profile_given = false;
        assert_eq!(
            local_rate(&c, "127.0.0.1").map(|r| r.0),
            Some(10_000_000_000)
        );
        // Loopback has no speed.
        c.link_rate = None;
        assert_eq!(local_rate(&c, "127.0.0.1"), None);
    }
}
