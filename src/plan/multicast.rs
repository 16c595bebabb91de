//! The multicast schedule (issue 32): the root sends every segment **once** to the job's group
//! and the switches copy it, so every rank receives it straight from the network; a
//! contention-free tree over the ranks carries the reliability (acknowledgements aggregated up,
//! repairs sent down by unicast).
//!
//! **How a plan says it** (docs/multicast.md): a [`Plan`] whose `tree` is
//! [`TreeKind::Multicast`] and whose one lane is the **ack tree**, not a data tree:
//!
//! * data: root → group. A group frame leaves through the root's uplink and is copied by every
//!   switch along the switch tree rooted at the root's switch (away from the root), and down
//!   every other machine's link: each directed edge carries it once ([`group_edges`]). Every
//!   rank but the root receives it exactly once;
//! * reliability: `lanes[0]` is a contention-free tree rooted at the root ([`ack_tree`]: one
//!   edge per directed switch link ([`one_per_link`]) where that is at most a level taller
//!   than the lowest tree, else the `binary` planner's tree up to
//!   [`super::binary::MAX_RANKS`] ranks, beyond that the switch-by-switch tree, else
//!   `linear`). A rank acknowledges to its parent the prefix of
//!   segments its whole subtree holds (aggregated, so the root hears from its children only),
//!   asks its parent for a segment it misses (NACK), and repairs its children's misses by
//!   unicast from its own copy. `plan::check` checks the lane like any tree.
//!
//! On a topology whose ranks share hosts the plan is not two-level: every rank joins the group
//! (a host's kernel copies a group frame to each of its sockets, as its host switch does in
//! the topology) and the ack tree spans all ranks.
//!
//! The communicator runs this schedule over UDP multicast where its setup agreed on it: the
//! root's data to the group, the lane as the protocol's ack tree (`comm::multicast`,
//! docs/multicast.md).

use super::{binary, jump_tree, linear, switch_tree, Lane, Plan, PlanError, TreeKind};
use crate::topology::{DirEdge, MachineId, SwitchId, Topology};

/// Builds the multicast plan rooted at `root`: the group send plus the ack tree as its lane.
pub fn build(topology: &Topology, root: MachineId) -> Result<Plan, PlanError> {
    let size = topology.size();
    if root >= size {
        return Err(PlanError::BadRoot { root, size });
    }
    Ok(Plan::one_lane(
        TreeKind::Multicast,
        root,
        ack_tree(topology, root)?,
    ))
}

/// The contention-free tree acknowledgements climb and repairs descend: [`one_per_link`]'s
/// where it is at most [`ONE_PER_LINK_LEVELS`] taller than the lowest tree, else the lowest:
/// `binary` (the lowest of Algorithm 2 and the switch-by-switch trees) up to
/// [`binary::MAX_RANKS`] ranks; beyond, the switch-by-switch binary tree where it applies, else
/// the `linear` chain (always contention-free, but as tall as the job).
pub fn ack_tree(topology: &Topology, root: MachineId) -> Result<Lane, PlanError> {
    // Every rank is a receiver: with hosts, plan over all ranks, not between hosts' leaders.
    let flat;
    let t = match topology.hosts() {
        Some(_) => {
            flat = topology.rail_view(0);
            &flat
        }
        None => topology,
    };
    let lowest = if t.size() <= binary::MAX_RANKS {
        binary::build(t, root)?
    } else {
        let lowest = match (switch_tree::build(t, root, 2), jump_tree::build(t, root, 2)) {
            (Some(a), Some(b)) if b.height() < a.height() => Some(b),
            (Some(a), _) => Some(a),
            (None, b) => b,
        };
        lowest.unwrap_or_else(|| linear::build(t, root))
    };
    Ok(match one_per_link(t, root) {
        Some(lane) if lane.height() <= lowest.height() + ONE_PER_LINK_LEVELS => lane,
        _ => lowest,
    })
}

/// How many levels taller than the lowest tree the tree of one edge per switch link may be
/// (every level costs the tail one wake-up of a parent).
pub const ONE_PER_LINK_LEVELS: usize = 1;

/// The switch-by-switch tree whose every switch subtree hangs below **one** rank of the switch
/// above (`switch_tree::build_entered` with one entry): every directed switch link carries one
/// ack-tree edge, so a frame lost before a switch is repaired across its link once, not once
/// per rank of that switch whose parent is elsewhere, and their NACKs and acks climb it once.
/// The root's children are at most two ranks of its own switch (where it has others): what a
/// child misses the root repairs from its uplink, which the group's stream fills, and a child
/// across a switch link misses more; the other switches hang below them. Up to three children
/// a rank elsewhere, which keeps it as low as the lowest binary tree on the 16-machine lab; where
/// that does not apply, the binary tree of one entry per switch (docs/multicast.md, "One repair
/// edge per switch link (helper `ack32`)"). `None` where neither applies.
pub fn one_per_link(topology: &Topology, root: MachineId) -> Option<Lane> {
    switch_tree::build_entered(topology, root, 3, 1, true)
        .or_else(|| switch_tree::build_entered(topology, root, 2, 1, false))
}

/// How many ack-tree edges cross each directed switch link (rail 0), the most of any: 1 for
/// [`one_per_link`]'s tree (0 on one switch).
pub fn repair_edges_per_link(topology: &Topology, lane: &Lane) -> usize {
    let mut crossed = vec![0usize; topology.edge_count()];
    for (child, parent) in lane.parents.iter().enumerate() {
        let Some(parent) = *parent else { continue };
        let (a, b) = (topology.switch_of(parent), topology.switch_of(child));
        for e in topology.switch_path(a, b) {
            crossed[e.0 as usize] += 1;
        }
    }
    crossed.into_iter().max().unwrap_or(0)
}

/// The ranks the group delivers to: every rank but the root, in rank order.
pub fn receivers(plan: &Plan) -> Vec<MachineId> {
    (0..plan.size()).filter(|&r| r != plan.root).collect()
}

/// The directed edges one group frame from `root` crosses, in the order the switches copy it
/// (breadth first from the root's switch): the root's uplink, every switch link pointing away
/// from the root's switch, and the downlink of every other machine. Rail 0.
pub fn group_edges(topology: &Topology, root: MachineId) -> Vec<DirEdge> {
    let mut edges = vec![topology.machine_up(root)];
    for (switch, from) in switch_order(topology, root) {
        if let Some(e) = from {
            edges.push(e);
        }
        edges.extend(
            topology
                .machines_on(switch)
                .filter(|&m| m != root)
                .map(|m| topology.machine_down(m)),
        );
    }
    edges
}

/// The switches breadth first from the root's switch, each with the link edge a group frame
/// enters it by (`None` for the root's switch).
pub fn switch_order(topology: &Topology, root: MachineId) -> Vec<(SwitchId, Option<DirEdge>)> {
    let start = topology.switch_of(root);
    let mut seen = vec![false; topology.switches().len()];
    seen[start] = true;
    let mut order = vec![(start, None)];
    let mut i = 0;
    while i < order.len() {
        let s = order[i].0;
        for &(next, link) in topology.neighbours(s) {
            if !seen[next] {
                seen[next] = true;
                order.push((next, Some(topology.link_edge(link, s))));
            }
        }
        i += 1;
    }
    order
}

/// What is wrong with a multicast plan, in words (empty when nothing): it must be a
/// [`TreeKind::Multicast`] plan of one lane; the group must reach every rank but the root
/// exactly once and cross every directed edge at most once; its ack tree must pass
/// [`super::check()`] (spanning, rooted, acyclic, consistent, contention-free).
pub fn problems(plan: &Plan, topology: &Topology) -> Vec<String> {
    let mut out = Vec::new();
    if plan.tree != TreeKind::Multicast {
        out.push(format!("tree {} is not multicast", plan.tree));
    }
    if plan.lanes.len() != 1 {
        out.push(format!(
            "a multicast plan has one lane (the ack tree), not {}",
            plan.lanes.len()
        ));
    }
    let size = topology.size();
    if plan.root >= size {
        out.push(format!("root {} is not a rank", plan.root));
        return out;
    }
    let edges = group_edges(topology, plan.root);
    let mut crossed = vec![0u32; topology.edge_count()];
    for e in &edges {
        crossed[e.0 as usize] += 1;
    }
    if let Some(e) = crossed.iter().position(|&n| n > 1) {
        out.push(format!(
            "the group crosses {} more than once",
            topology.edge_name(DirEdge(e as u32))
        ));
    }
    for r in 0..size {
        let got = crossed[topology.machine_down(r).0 as usize];
        let want = u32::from(r != plan.root);
        if got != want {
            out.push(format!(
                "the group reaches rank {r} {got} times, not {want}"
            ));
        }
    }
    let report = super::check(plan, topology);
    if !report.ok() {
        out.extend(report.problems.iter().cloned());
        if !report.contention_free {
            out.push("the ack tree is not contention-free".into());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{gen, hosts};

    #[test]
    fn the_group_reaches_every_rank_once_and_the_ack_tree_is_clean() {
        let mut tops = vec![
            gen::hub(3, 4, true),
            gen::hub(2, 1, false),
            Topology::single_switch(1),
            Topology::single_switch(5),
        ];
        tops.extend((0..20usize).map(|s| gen::random_cluster(1 + s % 9, 4 + 13 * s, s as u64)));
        for t in &tops {
            for root in [0, t.size() / 2, t.size() - 1] {
                let plan = crate::plan::build(t, root, &TreeKind::Multicast, None).unwrap();
                assert_eq!(plan.tree, TreeKind::Multicast);
                assert!(problems(&plan, t).is_empty(), "{:?}", problems(&plan, t));
                let report = crate::plan::check(&plan, t);
                assert!(report.ok(), "{:?}", report.problems);
                assert_eq!(receivers(&plan).len(), t.size() - 1);
                // One copy per edge: uplink + switch links + P-1 downlinks.
                let edges = group_edges(t, root);
                assert_eq!(edges.len(), 1 + t.links().len() + t.size() - 1);
            }
        }
    }

    #[test]
    fn the_ack_tree_crosses_each_switch_link_once() {
        // The 16-machine lab (hub4x4-interleaved): every root's tree has one edge per
        // directed switch link, the root's children are on its switch, and it is no taller
        // than the lowest binary tree.
        let t = gen::hub(4, 4, true);
        for root in 0..t.size() {
            let lane = ack_tree(&t, root).unwrap();
            assert_eq!(repair_edges_per_link(&t, &lane), 1, "root {root}");
            let lowest = binary::build(&t, root).unwrap();
            assert!(lane.height() <= lowest.height(), "root {root}");
            assert!(problems(&build(&t, root).unwrap(), &t).is_empty());
            let kids = &lane.children[root];
            assert_eq!(kids.len(), 2, "root {root}");
            assert!(kids.iter().all(|&c| t.switch_of(c) == t.switch_of(root)));
            // One rank per switch but the root's has its parent on another switch.
            let across = (0..t.size())
                .filter(|&r| lane.parents[r].is_some_and(|p| t.switch_of(p) != t.switch_of(r)))
                .count();
            assert_eq!(across, t.switches().len() - 1, "root {root}");
        }
        // The lowest binary tree puts two edges across one link at root 3 (n12 → n1, n5).
        let lowest = binary::build(&t, 3).unwrap();
        assert_eq!(repair_edges_per_link(&t, &lowest), 2);
        let one = Topology::single_switch(5);
        assert_eq!(repair_edges_per_link(&one, &ack_tree(&one, 0).unwrap()), 0);
    }

    #[test]
    fn a_tall_one_per_link_tree_gives_way_to_the_lowest() {
        // Random clusters: the tree taken is never more than one level above the lowest, is
        // one per link wherever it is taller than the lowest, and passes the checks.
        let mut one = 0;
        for seed in 0..12u64 {
            for (switches, machines) in [(4, 32), (16, 128), (32, 256), (9, 17), (20, 40)] {
                let t = gen::random_cluster(switches, machines, seed);
                for root in [0, machines - 1] {
                    let lane = ack_tree(&t, root).unwrap();
                    let lowest = binary::build(&t, root).unwrap();
                    assert!(lane.height() <= lowest.height() + ONE_PER_LINK_LEVELS);
                    if lane.height() > lowest.height() {
                        assert_eq!(repair_edges_per_link(&t, &lane), 1);
                    }
                    if repair_edges_per_link(&t, &lane) <= 1 {
                        one += 1;
                    }
                    let plan = build(&t, root).unwrap();
                    assert!(problems(&plan, &t).is_empty(), "{:?}", problems(&plan, &t));
                }
            }
        }
        assert!(one > 0);
    }

    #[test]
    fn the_ack_tree_is_low() {
        let t = gen::random_cluster(32, 256, 3);
        let plan = build(&t, 0).unwrap();
        assert!(plan.height() <= 2 * 8 + 2, "{}", plan.height());
    }

    #[test]
    fn ranks_sharing_hosts_all_join_the_group() {
        let file = gen::hub(2, 2, true);
        let t = hosts::expand(&file, Some(3)).unwrap();
        let plan = crate::plan::build(&t, 4, &TreeKind::Multicast, None).unwrap();
        assert_eq!(plan.size(), t.size());
        assert_eq!(plan.lanes.len(), 1);
        assert!(plan.lanes[0].parents[4].is_none());
        assert!(problems(&plan, &t).is_empty(), "{:?}", problems(&plan, &t));
    }

    #[test]
    fn a_broken_plan_is_reported() {
        let t = gen::hub(2, 2, false);
        let mut plan = build(&t, 0).unwrap();
        plan.lanes[0].parents[3] = None;
        assert!(!problems(&plan, &t).is_empty());
        plan.tree = TreeKind::Linear;
        assert!(problems(&plan, &t)
            .iter()
            .any(|p| p.contains("not multicast")));
    }
}
