//! A calibration profile derived from what a job knows of its network without calibrating it:
//! the data links' rate (the NIC's speed, the topology's `gbps`, the lab's rate or
//! `PIPECAST_LINK_RATE`) and this host's cost per segment, measured once on loopback
//! (`comm::host_cost`). `pipecast calibrate` still measures everything; this is what a job
//! gets at default settings instead of seed 003's 2008 Gigabit Ethernet (Table 2), whose
//! 8 KiB segments ran a 10 Gbit/s lab at 1.8–2.6 × T(m) where 64 KiB ran it at 1.2 (issue 28).
//!
//! The model is seed 003 §4.2's with its parameters read off the two numbers:
//!
//! * g(s) = o + s / B: a segment of s bytes leaves a rank every g; o is the host's cost per
//!   segment end, B the slower of the wire (rate / 8) and the host's own byte rate (what one
//!   rank can push through its TCP stack, measured with o; a 100 Gbit/s NIC does not make a
//!   core copy faster).
//! * L(s) = 2·o + [`HOP_US`] + s / B: the sender's and the receiver's cost, a switch hop, and
//!   the segment's own time on the wire (store and forward).
//! * `segment_cpu_us` = o, stated: a relaying rank's CPU does both ends of every segment, so a
//!   round costs at least 2·o on a chain (`model::predict`'s CPU floor).
//!
//! The candidate sizes are the powers of two from 1 KiB to 4 MiB. The optimum this prices,
//! s* ≈ √(m·o·B / (P−1)) for a chain of P ranks, grows with the rate: about 4 KiB at
//! 100 Mbit/s, 32–128 KiB at 10 Gbit/s for 4–64 MiB and a few ranks.

use super::profile::{Point, Profile};

/// A switch hop and the wire's propagation, in µs: store-and-forward of a frame at a
/// top-of-rack switch is 1–5 µs; cut-through switches are faster.
pub const HOP_US: f64 = 5.0;

/// The smallest and largest candidate segment sizes (powers of two in between).
pub const SIZES: (u64, u64) = (1 << 10, 4 << 20);

/// What the job knows of its network: agreed by every rank (the slowest link, the slowest
/// host), so every rank derives the same profile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    /// The data links' rate, bits per second.
    pub rate_bps: u64,
    /// A rank's CPU time per segment it sends or receives, µs (measured on loopback).
    pub segment_us: f64,
    /// The host's own byte rate through its network stack, bytes per µs (MB/s); `None`:
    /// unknown, the wire alone limits.
    pub host_bytes_per_us: Option<f64>,
}

impl Network {
    /// Bytes per µs a rank moves: the slower of the wire and the host.
    pub fn bytes_per_us(&self) -> f64 {
        let wire = self.rate_bps.max(1) as f64 / 8e6;
        self.host_bytes_per_us
            .filter(|b| b.is_finite() && *b > 0.0)
            .map_or(wire, |host| wire.min(host))
    }

    /// The profile of this network (module doc).
    pub fn profile(&self) -> Profile {
        let o = if self.segment_us.is_finite() {
            self.segment_us.clamp(0.0, 1e3)
        } else {
            0.0
        };
        let b = self.bytes_per_us();
        let points = std::iter::successors(Some(SIZES.0), |s| (*s < SIZES.1).then(|| s * 2))
            .map(|bytes| {
                let wire = bytes as f64 / b;
                Point {
                    bytes,
                    l_us: (2.0 * o + HOP_US + wire).min(super::profile::MAX_US),
                    g_us: (o + wire).clamp(1e-3, super::profile::MAX_US),
                }
            })
            .collect();
        let mut p = Profile::new(points).expect("sizes increase, g and L are positive and finite");
        p.segment_cpu_us = Some(o);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{choose_segment, plan_for};
    use crate::plan::{self, TreeKind};
    use crate::topology::Topology;

    fn net(rate_bps: u64) -> Network {
        Network {
            rate_bps,
            segment_us: 12.0,
            host_bytes_per_us: None,
        }
    }

    fn chain_segment(machines: usize, profile: &Profile, msize: u64) -> u64 {
        let t = Topology::single_switch(machines);
        let p = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
        choose_segment(&p, profile, msize).0
    }

    #[test]
    fn the_profile_is_valid_and_states_its_cpu_cost() {
        let p = net(10_000_000_000).profile();
        p.validate().unwrap();
        assert_eq!(p.stated_segment_cpu_us(), Some(12.0));
        assert_eq!(p.sizes().next(), Some(1024));
        assert_eq!(p.sizes().last(), Some(4 << 20));
        // 64 KiB at 10 Gbit/s: 52.4 µs on the wire, 12 µs of the host.
        let c = p.cost(64 << 10);
        assert!((c.g_us - (12.0 + 65536.0 / 1250.0)).abs() < 1e-9, "{c:?}");
        assert!((c.l_us - (24.0 + HOP_US + 65536.0 / 1250.0)).abs() < 1e-9);
        // Nonsense in, a valid profile out.
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let n = Network {
                rate_bps: 0,
                segment_us: bad,
                host_bytes_per_us: Some(bad),
            };
            n.profile().validate().unwrap();
        }
    }

    /// The segment grows with the rate: small at 100 Mbit/s, tens of KiB at 10 Gbit/s (the
    /// 4-machine lab measured 32 KiB–512 KiB within 10 % of the best at 4 and 64 MiB, 8 KiB
    /// at 2.0–2.6 × T(m); docs/model.md).
    #[test]
    fn segments_grow_with_the_rate() {
        let seg = |rate: u64, machines: usize, msize: u64| {
            chain_segment(machines, &net(rate).profile(), msize)
        };
        assert!(seg(100_000_000, 16, 4 << 20) <= 8 << 10);
        let ten = (
            seg(10_000_000_000, 4, 4 << 20),
            seg(10_000_000_000, 4, 64 << 20),
        );
        assert!((32 << 10..=512 << 10).contains(&ten.0), "{ten:?}");
        assert!((64 << 10..=1 << 20).contains(&ten.1), "{ten:?}");
        assert!(seg(1_000_000_000, 4, 64 << 20) > seg(100_000_000, 4, 64 << 20));
        assert!(seg(10_000_000_000, 4, 64 << 20) >= seg(1_000_000_000, 4, 64 << 20));
        // A host slower than its NIC: the host's rate limits, not the wire's.
        let slow = Network {
            host_bytes_per_us: Some(1000.0),
            ..net(100_000_000_000)
        };
        assert_eq!(slow.bytes_per_us(), 1000.0);
    }

    #[test]
    fn auto_plans_on_a_derived_profile() {
        let t = Topology::single_switch(8);
        let c = plan_for(
            &t,
            0,
            &TreeKind::Auto,
            &net(10_000_000_000).profile(),
            16 << 20,
        )
        .unwrap();
        assert!(c.segment_bytes >= 16 << 10, "{c:?}");
    }
}
