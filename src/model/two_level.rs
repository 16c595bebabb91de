//! Pricing two-level plans (`plan::two_level`): the network stream between the hosts'
//! leaders, then a memory copy per local rank, concurrent and pipelined behind it.
//!
//! The network part is the inter-host tree (`plan::two_level::network`) priced as any plan
//! ([`super::predict`]: seed 003 §4.2's formula (2), seed 001's step model for k-binomial
//! trees). Each local rank of host h reads segment x straight from its leader's buffer once
//! the leader has it: the first segment lands at `arrive(leader) + c`, with `c` = one
//! segment's copy at [`Profile::copy_us`], and later ones follow every
//! `max(period, lanes · c)` — the network's period (the busiest leader's sends per segment,
//! `D·g`) or, when memory is the slower stage, one copy per lane. So
//!
//! `T = max(T_net, max over hosts with several ranks of arrive(leader) + c + (X − 1)·max(D·g, lanes·c))`.
//!
//! The local ranks copy concurrently (each from the leader's buffer, `process_vm_readv`), so a
//! host's stage does not grow with its rank count; the memory bus they share is not modelled.
//! A single host is `X·c` = the message over the copy bandwidth plus a per-segment overhead
//! ([`super::profile::COPY_OVERHEAD_US`]).
//!
//! A host over sockets that keeps the fan-out but caps it (`plan::two_level::SOCKET_FAN_OUT`)
//! feeds its last ranks one hop further, through the leader's first children: each segment
//! reaches them one copy later, `arrive(leader) + 2c + (X − 1)·max(D·g, lanes·c)`.
//!
//! A host fed by a tree over sockets (`Hosts::tree_inside`, `plan::two_level::inside`) is
//! priced as that tree: its part of the plan over the host's ranks as machines of one switch
//! ([`super::predict`] with the profile's network costs, loopback being a network), starting
//! when its leader has the first segment: `arrive(leader) + T_inside`. A job of one such
//! host is that tree alone, priced and its segment chosen as on a topology without hosts.

use super::logp;
use super::profile::{Cost, Profile};
use crate::plan::{kbinomial, two_level, Lane, Plan, TreeKind};
use crate::topology::{Hosts, InHost, Topology};

/// Predicted µs of `msize` bytes over the two-level `plan` with segments of `segment` bytes
/// (per lane; non-pipelined trees move whole messages, as [`super::predict`]).
pub fn predict(plan: &Plan, hosts: &Hosts, profile: &Profile, msize: u64, segment: u64) -> f64 {
    if msize == 0 || plan.lanes.is_empty() {
        return 0.0;
    }
    if hosts.one_tree() {
        return super::predict(plan, profile, msize, segment);
    }
    let net = two_level::network(plan, hosts);
    let t_net = super::predict(&net, profile, msize, segment);
    let (x, bytes, cost) = if plan.tree.is_pipelined() {
        let share = super::per_lane(plan, msize);
        let seg = segment.max(1).min(share);
        (share.div_ceil(seg), seg, profile.cost(seg))
    } else {
        (1, msize, profile.cost(msize))
    };
    let copy = profile.copy_us(bytes);
    let (arrive, period) = network_schedule(&net, cost, profile);
    let copy_period = copy * plan.lanes.len() as f64;
    let pipeline = x.saturating_sub(1) as f64 * period.max(copy_period);
    (0..hosts.count())
        .filter(|&h| hosts.ranks(h).len() > 1)
        .map(|h| {
            let at = arrive.get(h).copied().unwrap_or(0.0);
            if hosts.tree_inside(h) {
                at + super::predict(&inside(plan, hosts, h), profile, msize, segment)
            } else {
                at + hops(plan, hosts, h) as f64 * copy + pipeline
            }
        })
        .fold(t_net, f64::max)
}

/// How many copies deep host h's fan-out is: 1 through memory (every rank reads the leader),
/// 2 over sockets when the leader's first children feed the ranks beyond its cap
/// (`plan::two_level::fan_out`); the height of the host's part of `plan`, at least 1.
fn hops(plan: &Plan, hosts: &Hosts, h: usize) -> usize {
    match hosts.in_host(h) {
        InHost::Memory => 1,
        InHost::Sockets { .. } => inside(plan, hosts, h).height().max(1),
    }
}

/// Host h's part of `plan`: its edges between ranks of host h, over the host's ranks as
/// machines (machine i = the host's i-th rank), rooted at its leader.
pub fn inside(plan: &Plan, hosts: &Hosts, h: usize) -> Plan {
    let ranks = hosts.ranks(h);
    let index = |r: usize| ranks.binary_search(&r).ok();
    let leader = hosts.leader(h, plan.root);
    let lanes = plan
        .lanes
        .iter()
        .map(|lane| {
            let mut children = vec![Vec::new(); ranks.len()];
            for (i, &r) in ranks.iter().enumerate() {
                let kids = lane.children.get(r).map_or(&[][..], Vec::as_slice);
                children[i].extend(kids.iter().filter_map(|&c| index(c)));
            }
            Lane::from_children(children)
        })
        .collect();
    Plan {
        tree: plan.tree.clone(),
        root: index(leader).unwrap_or(0),
        lanes,
        rails: plan.rails.clone(),
    }
}

/// When the first segment reaches each host's leader (latest over lanes), and the network's
/// period between segments, as [`super::predict`] prices `net`: the busiest leader's gaps or
/// its CPU's segment ends ([`super::round_cpu_us`]), whichever is longer.
fn network_schedule(net: &Plan, cost: Cost, profile: &Profile) -> (Vec<f64>, f64) {
    match net.tree {
        TreeKind::KBinomial(_) if net.lanes.len() == 1 => {
            let lane = &net.lanes[0];
            let arrive = kbinomial::arrival_steps(lane)
                .into_iter()
                .map(|s| s as f64 * (cost.l_us + cost.g_us))
                .collect();
            let gaps = lane.max_degree() as f64 * cost.g_us;
            (arrive, gaps.max(super::round_cpu_us(net, profile)))
        }
        _ => (
            logp::arrival_times(&net.lanes, cost),
            (logp::sending_degree(&net.lanes) as f64 * cost.g_us)
                .max(super::round_cpu_us(net, profile)),
        ),
    }
}

/// The candidate segment size with the smallest [`predict`]ed time, and that time (as
/// [`super::choose_segment`]; several concurrent lanes also pay for their busiest shared
/// network edge, [`super::busiest_edge`] on the inter-host tree).
pub fn choose_segment(plan: &Plan, hosts: &Hosts, profile: &Profile, msize: u64) -> (u64, f64) {
    if msize == 0 {
        return (0, 0.0);
    }
    if hosts.one_tree() {
        return super::choose_segment_flat(
            plan,
            &Topology::single_switch(hosts.size()),
            profile,
            msize,
        );
    }
    if !plan.tree.is_pipelined() {
        return (msize, predict(plan, hosts, profile, msize, msize));
    }
    let share = super::per_lane(plan, msize);
    let busiest = if plan.lanes.len() > 1 {
        super::busiest_edge(&two_level::network(plan, hosts), hosts.network()) as f64
    } else {
        0.0
    };
    let mut best = (0u64, f64::INFINITY);
    // Beyond the profile's sizes: the in-host stage favours large segments (each costs a
    // fixed overhead), and a host's ranks may be all there is.
    let large = [256 << 10, 1 << 20, 4 << 20, share];
    for size in profile.sizes().chain(large) {
        let seg = size.min(share).max(1);
        let links = busiest * share as f64 * profile.cost(seg).g_us / seg as f64;
        let t = predict(plan, hosts, profile, msize, size).max(links);
        if t < best.1 {
            best = (seg, t);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{plan_for, COPY_OVERHEAD_US, DEFAULT_MEMCPY_GB_S};
    use crate::plan;
    use crate::topology::{gen, hosts, Topology};

    fn profile() -> Profile {
        Profile::builtin("1gbit").unwrap()
    }

    #[test]
    fn one_host_costs_the_message_over_the_copy_bandwidth() {
        let names = ["box"; 4];
        let keys: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let t = hosts::host_topology(None, &names, &keys).unwrap();
        let plan = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
        let msize = 1 << 20;
        let t_us = predict(&plan, t.hosts().unwrap(), &profile(), msize, 8192);
        // 128 segments, each its bytes over the copy bandwidth plus the per-segment overhead.
        let want = msize as f64 / (DEFAULT_MEMCPY_GB_S * 1000.0) + 128.0 * COPY_OVERHEAD_US;
        assert!((t_us - want).abs() < 1e-6, "{t_us} vs {want}");
    }

    #[test]
    fn the_in_host_stage_hides_behind_the_network() {
        // 1 Gbit/s: a segment's network gap is far longer than its copy, so K ranks per
        // machine cost about one copy more than one rank per machine, and far less than the
        // ranks-as-machines chain.
        let file = gen::hub(2, 3, false);
        let p = profile();
        let msize = 4 << 20;
        let one = plan_for(&file, 0, &TreeKind::Linear, &p, msize).unwrap();
        let t = hosts::expand(&file, Some(4)).unwrap();
        let two = plan_for(&t, 0, &TreeKind::Linear, &p, msize).unwrap();
        assert!(two.predicted_us >= one.predicted_us);
        assert!(
            two.predicted_us < one.predicted_us * 1.01,
            "{} vs {}",
            two.predicted_us,
            one.predicted_us
        );
        let mut flat = t.clone();
        flat = Topology::new(
            flat.switches().to_vec(),
            flat.links().to_vec(),
            flat.machines().to_vec(),
        )
        .unwrap(); // the same rank topology without the grouping: today's chain
        let chain = plan_for(&flat, 0, &TreeKind::Linear, &p, msize).unwrap();
        assert!(chain.predicted_us > two.predicted_us);
    }

    #[test]
    fn slow_memory_sets_the_pace() {
        let t = hosts::expand(&Topology::single_switch(2), Some(3)).unwrap();
        let mut p = profile();
        p.memcpy_gb_s = Some(0.001); // 1 B/µs: slower than the wire
        let plan = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
        let seg = 8192;
        let msize = 64 * seg;
        let copy = p.copy_us(seg);
        assert!(copy > p.cost(seg).g_us);
        let t_us = predict(&plan, t.hosts().unwrap(), &p, msize, seg);
        // Host 1's leader gets segment 1 after L + g; its ranks then copy 64 segments.
        let c = p.cost(seg);
        let want = c.l_us + c.g_us + 64.0 * copy;
        assert!((t_us - want).abs() < 1e-6, "{t_us} vs {want}");
    }

    fn sockets(t: Topology, bound: usize) -> Topology {
        t.with_in_host(|_| crate::topology::InHost::Sockets {
            max_connections: bound,
        })
    }

    #[test]
    fn one_host_fed_by_a_tree_is_priced_as_that_tree() {
        // 20 ranks on one host without shared memory, a bound of 16: exactly what the ranks
        // as machines of one switch plan and price.
        let t = sockets(
            hosts::expand(&Topology::single_switch(1), Some(20)).unwrap(),
            16,
        );
        let flat = Topology::single_switch(20);
        let p = profile();
        for name in [
            "auto",
            "linear",
            "binary",
            "kbinomial",
            "multilane",
            "binomial",
        ] {
            for msize in [1, 64 << 10, 1 << 20] {
                let tree = name.parse().unwrap();
                let a = plan_for(&t, 3, &tree, &p, msize).unwrap();
                let b = plan_for(&flat, 3, &tree, &p, msize).unwrap();
                assert_eq!(a.plan, b.plan, "{name} {msize}");
                assert_eq!(a.segment_bytes, b.segment_bytes, "{name} {msize}");
                assert!((a.predicted_us - b.predicted_us).abs() < 1e-9, "{name}");
            }
        }
    }

    #[test]
    fn a_host_fed_by_a_tree_pays_for_it() {
        // 2 hosts of 12 ranks: fed through memory, the in-host stage is about one copy; fed
        // by a chain over sockets (bound 4), it is a chain of 12 behind the leader.
        let p = profile();
        let memory = hosts::expand(&Topology::single_switch(2), Some(12)).unwrap();
        let chains = sockets(memory.clone(), 4);
        let h = chains.hosts().unwrap();
        let msize = 1 << 20;
        let plan = plan::build(&chains, 0, &TreeKind::Linear, None).unwrap();
        let seg = 64 << 10;
        let t = predict(&plan, h, &p, msize, seg);
        let host1 = inside(&plan, h, 1);
        assert_eq!(host1.lanes[0].height(), 11);
        let net = two_level::network(&plan, h);
        let (arrive, _) = network_schedule(&net, p.cost(seg), &p);
        let want = arrive[1] + crate::model::predict(&host1, &p, msize, seg);
        assert!((t - want).abs() < 1e-6, "{t} vs {want}");
        let fan = plan::build(&memory, 0, &TreeKind::Linear, None).unwrap();
        assert!(predict(&fan, memory.hosts().unwrap(), &p, msize, seg) < t);
    }

    #[test]
    fn a_capped_fan_out_pays_one_copy_more() {
        // One host over sockets under the default bound: 12 ranks fit the leader's cap (one
        // copy deep), 16 do not (the last 4 one copy further).
        let p = profile();
        let (msize, seg) = (1 << 20, 64 << 10);
        let us = |n: usize| {
            let t = sockets(
                hosts::expand(&Topology::single_switch(1), Some(n)).unwrap(),
                16,
            );
            let plan = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
            predict(&plan, t.hosts().unwrap(), &p, msize, seg)
        };
        let copy = p.copy_us(seg);
        assert!(
            (us(16) - us(12) - copy).abs() < 1e-6,
            "{} {}",
            us(16),
            us(12)
        );
        // Through memory 16 ranks stay one copy deep.
        let memory = hosts::expand(&Topology::single_switch(1), Some(16)).unwrap();
        let plan = plan::build(&memory, 0, &TreeKind::Linear, None).unwrap();
        assert!((predict(&plan, memory.hosts().unwrap(), &p, msize, seg) - us(12)).abs() < 1e-6);
    }

    #[test]
    fn auto_and_every_tree_price_two_level_plans() {
        let t = hosts::expand(&gen::random_cluster(3, 9, 4), Some(2)).unwrap();
        let p = profile();
        for name in [
            "auto",
            "kbinomial",
            "multilane",
            "flat",
            "binomial",
            "binary",
        ] {
            let c = plan_for(&t, 5, &name.parse().unwrap(), &p, 1 << 20).unwrap();
            assert!(c.predicted_us > 0.0 && c.segment_bytes > 0, "{name}");
            assert!(plan::check(&c.plan, &t).spanning, "{name}");
            let (seg, us) = choose_segment(&c.plan, t.hosts().unwrap(), &p, 1 << 20);
            assert_eq!((seg, us), (c.segment_bytes, c.predicted_us), "{name}");
        }
    }
}
