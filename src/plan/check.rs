//! The plan checker: is every lane a spanning tree rooted at the plan's root, and is it
//! contention-free?
//!
//! Contention follows the 1-port pipelined model of seed 000 §3–4 (`000_4ae1cf15394cd769.txt`)
//! and `../shared/DESIGN.md`: in a pipelined broadcast every communication of a lane may be
//! active at the same time, except that one machine sends one message at a time. So a lane is
//! contention-free when no two communications (parent → child) with *different senders* cross
//! the same directed physical edge. Two sends of the same parent share its uplink by design.
//!
//! Cost: O(Σ path lengths) per lane — every communication walks its path once and each directed
//! edge remembers the first communication that crossed it — so 1024 ranks check in
//! milliseconds. Lanes are checked independently (each carries its own share of the message).

use super::Plan;
use crate::topology::{DirEdge, MachineId, Topology};

/// Two communications of one lane with different senders that cross the same directed edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub lane: usize,
    /// The earlier communication (in rank order of the sender) that crossed `edge`.
    pub first: (MachineId, MachineId),
    pub second: (MachineId, MachineId),
    pub edge: DirEdge,
    /// `topology.edge_name(edge)`, e.g. `s0->s1`.
    pub edge_name: String,
}

/// What the checker found. The booleans hold for every lane.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Every rank appears exactly once per lane: the root without a parent, every other rank
    /// as the child of exactly one rank, and reached from the root; lanes have the topology's
    /// size.
    pub spanning: bool,
    /// The plan's root has no parent in each lane, every other rank has one.
    pub rooted: bool,
    /// Following parents from any rank reaches the root.
    pub acyclic: bool,
    /// `parents` and `children` describe the same edges.
    pub consistent: bool,
    /// No conflicts (see [`Conflict`]).
    pub contention_free: bool,
    /// Every conflicting pair found; for one edge, each communication is paired with the first
    /// communication of another sender on that edge.
    pub conflicts: Vec<Conflict>,
    /// Structural problems in words, for people (empty when the plan is well formed).
    pub problems: Vec<String>,
}

impl Report {
    /// Whether the plan is a set of well-formed, contention-free spanning trees.
    pub fn ok(&self) -> bool {
        self.spanning && self.rooted && self.acyclic && self.consistent && self.contention_free
    }
}

/// Checks `plan` against `topology`.
pub fn check(plan: &Plan, topology: &Topology) -> Report {
    let mut report = Report {
        spanning: true,
        rooted: true,
        acyclic: true,
        consistent: true,
        contention_free: true,
        conflicts: Vec::new(),
        problems: Vec::new(),
    };
    let size = topology.size();
    if plan.lanes.is_empty() {
        report.spanning = false;
        report.problems.push("the plan has no lanes".into());
    }
    if plan.root >= size {
        report.rooted = false;
        report.problems.push(format!(
            "root {} is not a rank of this {size}-rank topology",
            plan.root
        ));
    }
    if !plan.rails.is_empty() && plan.rails.len() != plan.lanes.len() {
        report.consistent = false;
        report.problems.push(format!(
            "the plan names the rails of {} lanes but has {}",
            plan.rails.len(),
            plan.lanes.len()
        ));
    }
    for (l, lane) in plan.lanes.iter().enumerate() {
        let problem = |report: &mut Report, text: String| {
            if report.problems.len() < 20 {
                report.problems.push(format!("lane {l}: {text}"));
            }
        };
        // Each lane is checked against its own rail: its transfers leave and enter through
        // the machines' NIC `rail` (seed 002's multi-lane NICs, `Topology::path_on`).
        let rail = plan.rail(l);
        if rail >= topology.rails() {
            report.consistent = false;
            problem(
                &mut report,
                format!(
                    "runs on rail {rail}, but the machines have {} NIC(s)",
                    topology.rails()
                ),
            );
            continue;
        }
        if lane.parents.len() != size || lane.children.len() != size {
            report.spanning = false;
            problem(
                &mut report,
                format!(
                    "has {} parents and {} children lists for {size} ranks",
                    lane.parents.len(),
                    lane.children.len()
                ),
            );
            continue;
        }
        // Spanning and consistency from the children lists.
        let mut received = vec![0usize; size];
        for (p, kids) in lane.children.iter().enumerate() {
            for &c in kids {
                if c >= size {
                    report.spanning = false;
                    problem(&mut report, format!("rank {p} sends to {c}, not a rank"));
                    continue;
                }
                received[c] += 1;
                if lane.parents[c] != Some(p) {
                    report.consistent = false;
                    problem(
                        &mut report,
                        format!(
                            "rank {p} sends to {c} but parents[{c}] is {:?}",
                            lane.parents[c]
                        ),
                    );
                }
            }
        }
        for (r, &count) in received.iter().enumerate() {
            let want = usize::from(r != plan.root);
            if count != want {
                report.spanning = false;
                problem(
                    &mut report,
                    format!("rank {r} receives {count} times, not {want}"),
                );
            }
        }
        for (r, parent) in lane.parents.iter().enumerate() {
            match *parent {
                None if r != plan.root => {
                    report.rooted = false;
                    problem(
                        &mut report,
                        format!("rank {r} has no parent but is not the root"),
                    );
                }
                Some(p) if r == plan.root => {
                    report.rooted = false;
                    problem(&mut report, format!("the root {r} has parent {p}"));
                }
                Some(p) if p >= size || !lane.children[p].contains(&r) => {
                    report.consistent = false;
                    problem(
                        &mut report,
                        format!("parents[{r}] = {p}, which does not send to {r}"),
                    );
                }
                _ => {}
            }
        }
        // Acyclic: walk up from every rank; state 1 = on the current walk, 2 = reaches the root.
        let mut state = vec![0u8; size];
        for start in 0..size {
            let mut walk = Vec::new();
            let mut r = start;
            let reaches = loop {
                if r >= size || state[r] == 1 {
                    break false;
                }
                if state[r] == 2 {
                    break true;
                }
                state[r] = 1;
                walk.push(r);
                match lane.parents[r] {
                    None => break r == plan.root,
                    Some(p) => r = p,
                }
            };
            if !reaches {
                report.acyclic = false;
                report.spanning = false;
                problem(
                    &mut report,
                    format!("following parents from rank {start} does not reach the root"),
                );
                break;
            }
            for w in walk {
                state[w] = 2;
            }
        }
        // Contention: the first communication on each directed edge, then every later one
        // with another sender is a conflict.
        let mut first: Vec<Option<(MachineId, MachineId)>> = vec![None; topology.edge_count()];
        for (p, kids) in lane.children.iter().enumerate() {
            for &c in kids.iter().filter(|&&c| c < size && c != p) {
                for e in topology.path_on(rail, p, c) {
                    match first[e.0 as usize] {
                        None => first[e.0 as usize] = Some((p, c)),
                        Some(earlier) if earlier.0 != p => {
                            report.contention_free = false;
                            report.conflicts.push(Conflict {
                                lane: l,
                                first: earlier,
                                second: (p, c),
                                edge: e,
                                edge_name: topology.edge_name(e),
                            });
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{baseline, linear, Lane, TreeKind};
    use crate::topology::gen;

    fn plan(lane: Lane, root: usize) -> Plan {
        Plan::one_lane(TreeKind::Linear, root, lane)
    }

    #[test]
    fn chain_is_clean_and_naive_chain_contends() {
        let t = gen::hub(3, 4, true);
        let r = check(&plan(linear::build(&t, 0), 0), &t);
        assert!(r.ok(), "{r:?}");
        let r = check(&plan(baseline::naive_linear(16, 0), 0), &t);
        assert!(r.spanning && r.rooted && r.acyclic && r.consistent);
        assert!(!r.contention_free);
        // n0 (s0) -> n1 (s1) and n4 (s0) -> n5 (s1) both cross s0->s1.
        assert!(r
            .conflicts
            .iter()
            .any(|c| c.edge_name == "s0->s1" && c.first == (0, 1) && c.second == (4, 5)));
    }

    #[test]
    fn same_sender_is_not_contention() {
        let t = gen::hub(1, 2, false); // n0 n1 on s0, n2 n3 on s1
        let r = check(&plan(baseline::flat(4, 0), 0), &t);
        assert!(r.ok(), "{r:?}");
        // n0->n2 and n1->n3 share s0->s1.
        let lane = Lane::from_children(vec![vec![1, 2], vec![3], vec![], vec![]]);
        let r = check(&plan(lane, 0), &t);
        assert!(!r.contention_free);
        assert_eq!(r.conflicts.len(), 1);
        assert_eq!(r.conflicts[0].edge_name, "s0->s1");
    }

    #[test]
    fn malformed_lanes() {
        let t = Topology::single_switch(4);
        // Rank 3 missing.
        let lane = Lane::from_children(vec![vec![1, 2], vec![], vec![], vec![]]);
        let r = check(&plan(lane, 0), &t);
        assert!(!r.spanning && !r.rooted && r.consistent);
        // A cycle 1 -> 2 -> 3 -> 1 beside the root.
        let lane = Lane::from_children(vec![vec![], vec![2], vec![3], vec![1]]);
        let r = check(&plan(lane, 0), &t);
        assert!(!r.acyclic && r.rooted && !r.spanning);
        // Parents disagree with children.
        let mut lane = linear::build(&t, 0);
        lane.parents[2] = Some(0);
        let r = check(&plan(lane, 0), &t);
        assert!(!r.consistent);
        // Wrong root, wrong size, out-of-range child.
        let r = check(&plan(linear::build(&t, 1), 0), &t);
        assert!(!r.rooted);
        let r = check(&plan(baseline::flat(3, 0), 0), &t);
        assert!(!r.spanning);
        let lane = Lane {
            parents: vec![None, Some(0), Some(0), Some(0)],
            children: vec![vec![1, 2, 3, 9], vec![], vec![], vec![]],
        };
        let r = check(&plan(lane, 0), &t);
        assert!(!r.spanning && !r.problems.is_empty());
        let r = check(&plan(linear::build(&t, 0), 7), &t);
        assert!(!r.rooted);
    }
}
