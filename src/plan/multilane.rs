//! Multi-lane trees — seed 002 (`../shared/seeds/002_837947fc000c5185.txt`, §3.1, §3.2,
//! Table 1).
//!
//! The paper splits the message into halves M_A and M_B. The non-root nodes are divided into
//! two groups, each arranged as a binary tree (Tree_A, Tree_B). The root sends M_A to the root of
//! Tree_A and M_B to the root of Tree_B; each half flows down its own tree; then the *leaves* of
//! Tree_A, whose upward links are otherwise idle, send M_A to the nodes of Tree_B (leaf A_{n+i}
//! feeds B_{2i+1} and B_{2i+2}) and the leaves of Tree_B feed Tree_A the same way. Every node
//! thus receives both halves and sends at most two half-size streams: the bandwidth term is
//! M/b as for a chain, the latency term log p as for a tree (Table 1).
//!
//! **Mapping to pipecast lanes.** A [`Lane`] is a spanning tree over all ranks carrying an equal
//! share of the message (DESIGN.md), so:
//! * lane 0 carries M_A: `root → A_1`, Tree_A, and every B node hangs under an A node with a
//!   free sending slot (the swap of step (iii)); B nodes are leaves of lane 0;
//! * lane 1 carries M_B symmetrically: `root → B_1`, Tree_B, A nodes hang under B nodes.
//!
//! **Any P ≥ 2** (the paper assumes 4n − 1): group A takes ⌈(P−1)/2⌉ nodes, group B the rest.
//! A binary tree over g nodes has g + 1 free child slots (2g slots, g − 1 tree edges), enough
//! for the other group (at most g + 1 nodes). Each receiver of the other group, in Algorithm 1
//! order, takes a free slot (two per leaf, one per node with one child): the sender whose
//! transfer shares the fewest directed edges with other senders' transfers in the lane, then
//! the nearest sender to its left in the ordering. For P = 4n − 1 and complete trees the 2n
//! slots are all on the n leaves and there are 2n − 1 receivers, so every leaf but one feeds
//! two nodes of the other tree as in the paper's `A_{n+i} → B_{2i+1}, B_{2i+2}` (which leaf
//! feeds which follows the network, not heap indices). A group with no node (P = 2) uses the
//! other group's tree for its lane.
//!
//! **Contention-free machinery.** The groups interleave the Algorithm 1 order (A takes the odd
//! positions, B the even ones), so each tree spans the switches the way the chain does, and each
//! group's tree is Algorithm 2 (`plan::binary::build`) run on the topology restricted to that
//! group, rooted at the group's first node — contention-free within the tree (the §3.1 heap
//! layout when Algorithm 2 refuses the size). The swap matching avoids shared edges greedily,
//! but nothing proves the lanes contention-free (on several switches they usually are not:
//! `lane_conflicts` in docs/model.md); `plan::check` gives the verdict for a topology.
//!
//! **Sites (§3.2).** When machines carry `site`, each site gets its own pair of groups and
//! trees, sites are taken in Algorithm 1 order starting with the root's site, and in each lane
//! one node of site c with a free slot (the last such node of that lane's own group, like the
//! paper's A_{2n−1}) feeds the lane's tree root in site c + 1. When no slot is free the node
//! with the fewest children takes a third child. O(P · 128 · switch-tree depth) for the matching
//! (each receiver weighs the 64 free senders on either side of it) plus the two Algorithm 2 runs
//! per site (O(g²) each, or the heap layout above its 4096-rank limit).

//!
//! **Rails** (machines with k NICs, `Topology::rails`): [`build_rails`] makes k lanes, lane i
//! on rail i, each the Algorithm 1 chain of its rail (see there for why not two trees per rail).

use super::{Lane, PlanError};
use crate::topology::{MachineId, Topology};

/// Senders with a free slot considered on each side of a receiver in the swap matching.
const SWAP_WINDOW: usize = 64;

/// Two lanes rooted at `root`: lane 0 carries the first half of the message, lane 1 the second.
pub fn build(topology: &Topology, root: MachineId) -> Result<Vec<Lane>, PlanError> {
    let size = topology.size();
    if root >= size {
        return Err(PlanError::BadRoot { root, size });
    }
    let order = super::linear::order(topology, root);
    let mut position = vec![0usize; size];
    for (i, &m) in order.iter().enumerate() {
        position[m] = i;
    }
    // Sites in order of first appearance on the Algorithm 1 order (the root's site first).
    let mut sites: Vec<(Option<&str>, Vec<MachineId>)> = Vec::new();
    let mut site_index = std::collections::HashMap::new();
    for &m in &order[1..] {
        let site = topology.machines()[m].site.as_deref();
        let i = *site_index.entry(site).or_insert_with(|| {
            sites.push((site, Vec::new()));
            sites.len() - 1
        });
        sites[i].1.push(m);
    }
    let root_site = topology.machines()[root].site.as_deref();
    if let Some(i) = sites.iter().position(|(s, _)| *s == root_site) {
        let first = sites.remove(i);
        sites.insert(0, first);
    }

    let mut lanes = [vec![Vec::new(); size], vec![Vec::new(); size]];
    // The node that feeds the next site's tree root, per lane.
    let mut feeder = [root, root];
    for (_, members) in &sites {
        let groups: [Vec<MachineId>; 2] = [
            members.iter().copied().step_by(2).collect(),
            members.iter().copied().skip(1).step_by(2).collect(),
        ];
        let trees = [
            group_tree(topology, &groups[0]),
            group_tree(topology, &groups[1]),
        ];
        for lane in 0..2 {
            let other = 1 - lane;
            // A lane whose own group is empty runs over the other group's tree.
            let own = if groups[lane].is_empty() { other } else { lane };
            let children = &mut lanes[lane];
            let tree_root = groups[own][0];
            children[feeder[lane]].push(tree_root);
            for &(p, c) in &trees[own] {
                children[p].push(c);
            }
            if own == lane {
                let slots = free_slots(&groups[lane], children);
                for (sender, receiver) in
                    match_slots(topology, children, &slots, &groups[other], &position)
                {
                    children[sender].push(receiver);
                }
            }
            feeder[lane] = next_feeder(&groups[own], children);
        }
    }
    Ok(lanes.into_iter().map(Lane::from_children).collect())
}

/// One lane per rail on a topology whose machines have k NICs (seed 002 §2.1's multi-lane
/// NICs, `002_837947fc000c5185.txt`): lane i carries 1/k of the message on rail i, as the
/// contention-free Algorithm 1 chain of rail i's switch tree (seed 000 §4, Theorem 1, on
/// [`Topology::rail_view`]). Lanes on different rails use different NICs, so each NIC sends one
/// stream and receives one: the broadcast takes about M/(k·b) plus the chain's P − 1 segment
/// latencies — the bound of seed 002 §2.2 ("its cost is equivalent to single chain" with every
/// NIC busy both ways) divided among k rails.
///
/// Why not seed 002 §3.1's pair of binary trees with the leaf swap on each rail: a lane is one
/// NIC per machine, and in a binary tree every inner node sends two streams through that one
/// NIC (M/b per lane instead of M/(2b)); the paper's trees need each node's two children on
/// *different* NICs. The swap exists to use the upward links a binary tree leaves idle; a chain
/// leaves none idle (only the last machine's), so on a rail there is nothing left to swap.
/// The paper's objection to the chain is its latency, linear in P: at 16 to a few hundred
/// machines and messages of megabytes that term is a few percent (docs/planner.md). The
/// two-tree layout with the swap stays what `multilane` plans on one NIC ([`build`]).
///
/// Each lane is contention-free on its rail (`plan::check` checks lane i against rail i).
/// O(k · (P + |S|)).
pub fn build_rails(topology: &Topology, root: MachineId) -> Result<Vec<Lane>, PlanError> {
    let size = topology.size();
    if root >= size {
        return Err(PlanError::BadRoot { root, size });
    }
    Ok((0..topology.rails())
        .map(|rail| super::linear::build(&topology.rail_view(rail), root))
        .collect())
}

/// Edges (parent, child) of a contention-free binary tree over `group` (in Algorithm 1 order),
/// rooted at `group[0]`: Algorithm 2 on the topology restricted to the group.
fn group_tree(topology: &Topology, group: &[MachineId]) -> Vec<(MachineId, MachineId)> {
    if group.len() <= 1 {
        return Vec::new();
    }
    let machines = group
        .iter()
        .map(|&m| topology.machines()[m].clone())
        .collect();
    let sub = Topology::new(
        topology.switches().to_vec(),
        topology.links().to_vec(),
        machines,
    )
    .expect("a subset of a valid topology's machines is valid");
    let heap = || {
        (1..group.len())
            .map(|i| (group[(i - 1) / 2], group[i]))
            .collect()
    };
    // Too large for Algorithm 2's dynamic program (or otherwise refused): heap layout of §3.1.
    let Ok(lane) = BinaryBuild::into_result(super::binary::build(&sub, 0)) else {
        return heap();
    };
    let mut edges = Vec::with_capacity(group.len() - 1);
    // Walk from the root so edges come out parent before child, children in send order.
    let mut stack = vec![0usize];
    while let Some(p) = stack.pop() {
        for &c in &lane.children[p] {
            edges.push((group[p], group[c]));
            stack.push(c);
        }
    }
    if edges.len() + 1 != group.len() || lane.max_degree() > 2 {
        // Not a binary spanning tree of the group: the heap layout of §3.1 (A_i's children are
        // A_{2i}, A_{2i+1}).
        return heap();
    }
    edges
}

/// `plan::binary::build` returns a `Lane` on some branches and `Result<Lane, PlanError>` (it
/// refuses sizes its O(P²) dynamic program cannot hold) on others; this accepts both.
trait BinaryBuild {
    fn into_result(self) -> Result<Lane, PlanError>;
}

impl BinaryBuild for Lane {
    fn into_result(self) -> Result<Lane, PlanError> {
        Ok(self)
    }
}

impl BinaryBuild for Result<Lane, PlanError> {
    fn into_result(self) -> Result<Lane, PlanError> {
        self
    }
}

/// Senders for the swap, one entry per free child slot (two for a leaf, one for a node with one
/// child), in Algorithm 1 order. Matching them in order to the other group's nodes (also in
/// that order) pairs each receiver with a nearby sender, so swap transfers span short, mostly
/// disjoint stretches of the contention-free ordering.
fn free_slots(group: &[MachineId], children: &[Vec<MachineId>]) -> Vec<MachineId> {
    let mut slots = Vec::with_capacity(group.len() + 1);
    for &m in group {
        slots.extend(std::iter::repeat_n(
            m,
            2usize.saturating_sub(children[m].len()),
        ));
    }
    slots
}

/// Assigns each of `receivers` (in Algorithm 1 order) a sender from `slots` (one entry per free
/// child slot), greedily: the sender whose transfer shares the fewest directed edges with
/// transfers of *other* senders already in the lane (the pipelined 1-port contention of
/// seed 000 §3), then the nearest sender to the receiver's left in the ordering (seed 000
/// Lemma 3 makes forward transfers over disjoint stretches contention-free), then the nearest
/// to its right. Candidates are the [`SWAP_WINDOW`] senders with free slots on either side of
/// the receiver in the ordering (all of them up to ~2·`SWAP_WINDOW` ranks, and whenever the
/// window is used up): O(R · `SWAP_WINDOW` · path length), so 100k ranks plan in about a second
/// where scanning every sender took minutes.
fn match_slots(
    topology: &Topology,
    children: &[Vec<MachineId>],
    slots: &[MachineId],
    receivers: &[MachineId],
    position: &[usize],
) -> Vec<(MachineId, MachineId)> {
    // Senders using each directed edge in this lane so far: the first one, and whether
    // another one does too (all the matching asks is "does a sender other than s use it").
    let mut users: Vec<(Option<MachineId>, bool)> = vec![(None, false); topology.edge_count()];
    let add = |users: &mut Vec<(Option<MachineId>, bool)>, s: MachineId, r: MachineId| {
        for e in topology.path(s, r) {
            let (first, several) = &mut users[e.0 as usize];
            match *first {
                None => *first = Some(s),
                Some(f) if f != s => *several = true,
                Some(_) => {}
            }
        }
    };
    let used_by_other = |users: &[(Option<MachineId>, bool)], e: usize, s: MachineId| {
        let (first, several) = users[e];
        several || first.is_some_and(|f| f != s)
    };
    for (p, kids) in children.iter().enumerate() {
        for &c in kids {
            add(&mut users, p, c);
        }
    }
    let mut capacity: Vec<(MachineId, usize)> = Vec::new();
    for &m in slots {
        match capacity.last_mut() {
            Some((last, n)) if *last == m => *n += 1,
            _ => capacity.push((m, 1)),
        }
    }
    let mut out = Vec::with_capacity(receivers.len());
    for &r in receivers {
        let best_in = |range: std::ops::Range<usize>| {
            capacity[range.clone()]
                .iter()
                .zip(range)
                .filter(|(&(_, n), _)| n > 0)
                .min_by_key(|(&(s, _), _)| {
                    let shared = topology
                        .path(s, r)
                        .iter()
                        .filter(|e| used_by_other(&users, e.0 as usize, s))
                        .count();
                    let (ps, pr) = (position[s], position[r]);
                    (shared, ps > pr, ps.abs_diff(pr))
                })
                .map(|(_, i)| i)
        };
        // Senders are in Algorithm 1 order: the window is around the receiver's place.
        let at = capacity.partition_point(|&(s, _)| position[s] < position[r]);
        let window = at.saturating_sub(SWAP_WINDOW)..(at + SWAP_WINDOW).min(capacity.len());
        let best = best_in(window).or_else(|| best_in(0..capacity.len()));
        let Some(i) = best else {
            break; // cannot happen: a binary tree over g nodes has g + 1 free slots
        };
        let sender = capacity[i].0;
        capacity[i].1 -= 1;
        add(&mut users, sender, r);
        out.push((sender, r));
    }
    out
}

/// The node of `group` that feeds the next site: the last one with a free slot, else the
/// one with the fewest children (latest on ties).
fn next_feeder(group: &[MachineId], children: &[Vec<MachineId>]) -> MachineId {
    *group
        .iter()
        .rev()
        .min_by_key(|&&m| children[m].len())
        .expect("a site's lane tree has a node")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{gen, parse_topology};

    /// Every rank is reached exactly once per lane, from the root, without cycles.
    fn assert_spanning(lane: &Lane, root: MachineId) {
        assert_eq!(lane.root(), Some(root));
        let mut seen = vec![false; lane.parents.len()];
        let mut stack = vec![root];
        while let Some(r) = stack.pop() {
            assert!(!seen[r], "rank {r} reached twice");
            seen[r] = true;
            stack.extend(&lane.children[r]);
        }
        assert!(
            seen.iter().all(|&s| s),
            "not every rank is reached: {seen:?}"
        );
    }

    #[test]
    fn both_lanes_span_for_every_size() {
        for p in 1..40 {
            let t = gen::random_cluster(4, p, p as u64);
            let root = p / 3;
            let lanes = build(&t, root).unwrap();
            assert_eq!(lanes.len(), 2);
            for lane in &lanes {
                assert_spanning(lane, root);
            }
            // Every rank sends at most two half-size streams in total (one site).
            for r in 0..p {
                let sends = lanes[0].children[r].len() + lanes[1].children[r].len();
                assert!(sends <= 2, "p={p}: rank {r} sends {sends} halves");
            }
        }
    }

    #[test]
    fn paper_shape_for_4n_minus_1() {
        // P = 15 on one switch: groups of 7; each lane's internal nodes belong to its group.
        let t = Topology::single_switch(15);
        let lanes = build(&t, 0).unwrap();
        assert_eq!(lanes[0].children[0].len(), 1);
        assert_eq!(lanes[1].children[0].len(), 1);
        let a1 = lanes[0].children[0][0];
        let b1 = lanes[1].children[0][0];
        assert_ne!(a1, b1);
        // Halves are swapped at the leaves: no rank forwards in both lanes.
        for r in 1..15 {
            let forwards = |l: usize| !lanes[l].children[r].is_empty();
            assert!(
                !(forwards(0) && forwards(1)),
                "rank {r} forwards in both lanes"
            );
        }
    }

    #[test]
    fn sites_are_chained() {
        let text = r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]], "machines": [
            {"name": "a0", "switch": "s0", "site": "x"}, {"name": "a1", "switch": "s0", "site": "x"},
            {"name": "a2", "switch": "s0", "site": "x"}, {"name": "b0", "switch": "s1", "site": "y"},
            {"name": "b1", "switch": "s1", "site": "y"}, {"name": "b2", "switch": "s1", "site": "y"},
            {"name": "b3", "switch": "s1", "site": "y"}]}"#;
        let t = parse_topology(text).unwrap();
        let lanes = build(&t, 1).unwrap();
        for lane in &lanes {
            assert_spanning(lane, 1);
            // Exactly one transfer per lane crosses from site x to site y.
            let crossings = (0..7)
                .flat_map(|p| lane.children[p].iter().map(move |&c| (p, c)))
                .filter(|&(p, c)| (p < 3) != (c < 3))
                .count();
            assert_eq!(crossings, 1);
        }
    }

    #[test]
    fn bad_root() {
        let t = Topology::single_switch(3);
        assert!(matches!(build(&t, 3), Err(PlanError::BadRoot { .. })));
    }

    #[test]
    fn rails_get_one_contention_free_lane_each() {
        for (rails, p, seed) in [(2, 16, 1), (3, 20, 2), (2, 2, 3), (4, 9, 4)] {
            let t = gen::random_rails(rails, 4, p, seed);
            for root in [0, p / 2, p - 1] {
                let plan =
                    crate::plan::build(&t, root, &crate::plan::TreeKind::Multilane, None).unwrap();
                assert_eq!(plan.lanes.len(), rails);
                assert_eq!(plan.rails, (0..rails).collect::<Vec<_>>());
                for lane in &plan.lanes {
                    assert_spanning(lane, root);
                    assert!(lane.max_degree() <= 1, "a chain per rail");
                }
                let report = crate::plan::check(&plan, &t);
                assert!(report.ok(), "{report:?}");
                // Checked against rail 0 only, the other lanes would contend (different trees).
                let on_rail0 = crate::plan::Plan {
                    rails: Vec::new(),
                    ..plan.clone()
                };
                let _ = crate::plan::check(&on_rail0, &t);
            }
        }
        assert!(matches!(
            build_rails(&gen::rails(2, 1, 2, false), 4),
            Err(PlanError::BadRoot { .. })
        ));
    }
}
