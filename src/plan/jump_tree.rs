//! A contention-free k-ary tree that feeds deep chains of switches from both ends: beyond the
//! papers, for lower trees than Algorithm 2 (seed 003 §4.1.2, Figure 4) and the down-only
//! switch-by-switch tree ([`super::switch_tree`]) can build.
//!
//! **Why.** In a tree whose messages only go down the switch tree from the root's switch,
//! every switch on the way to the farthest one costs at least one level: on seed 003's random
//! clusters with 8 machines per switch the farthest switch is about 10 switch hops from the
//! root's at P = 256, so such a tree cannot be lower than about 10 + 3 levels, above the
//! 1.5 × log2(P) = 12 the issue asks for (docs/planner.md, "Seed 003 Fig. 5").
//!
//! **The construction.** As in [`super::switch_tree`], root the switch tree at the root's
//! switch (machine-less switches passed through) and give every child subtree `T(d)` exactly
//! one sender, a machine on `d`'s parent switch, which sends to between 1 and k machines of
//! `T(d)` — but these entries may now sit on any switch `H` of `T(d)`, not only on `d`. The
//! sender's messages cross the down links from its switch to `H`; inside `T(d)` the data then
//! flows *away from `H`*: down into `H`'s own child subtrees, and *up* the chain `H → … → d`,
//! each switch of the chain feeding its other child subtrees downwards and its parent on the
//! chain upwards. So a chain of switches is fed from its far end while its top is skipped, and
//! the two flows meet in its middle.
//!
//! **Contention-free** in the sense of seed 000 §3 / seed 003 §4.1 (what [`super::check()`]
//! verifies: communications of different senders share no directed edge). Inside `T(d)` the
//! tree is the down-only tree of `T(d)` re-rooted at `H`: every directed link it uses points
//! away from `H`, and each is entered by one sender (one sender per part below). On the chain
//! those are the up links, which the entering sender — the only one to use the chain's down
//! links — never touches; and nothing inside `T(d)` leaves it. Inside a switch a communication
//! uses only the sender's uplink and the receiver's downlink.
//!
//! **Heights.** Each switch's part of the tree is the level-by-level greedy of
//! [`super::switch_tree`] over its own machines and its child *parts*: the subtrees below it,
//! entered at their best landing switch (`Part::Below`), and, on a re-rooted chain, the rest of
//! `T(d)` above it (`Part::Above`, entered at the parent switch from below). A subtree's height
//! for `e` entries is the least over its landing switches, the top `d` first (ties keep it, so
//! the tree is the down-only one wherever jumping does not lower it). Parts above a switch are
//! entered at their top only (one jump per subtree, not nested).
//!
//! **Complexity.** For every subtree `T(d)` and every switch of it, one greedy search for the
//! part above it and one for landing there: O(Σ_d |T(d)|) = O(S × depth) searches for S
//! switches, each a few greedy runs over a switch's machines and parts.

use super::switch_tree::{greedy, lowest, Kid, Switches};
use super::Lane;
use crate::topology::{MachineId, SwitchId, Topology};
use std::collections::HashMap;

/// A height no entry count reaches.
const UNREACHABLE: usize = usize::MAX;

/// The lowest tree this construction finds, rooted at `root`, every machine with at most `k`
/// children (`k ≥ 2`); `None` where it does not apply (as [`super::switch_tree::build`]: a
/// switch without machines above two subtrees with machines, or rails).
pub fn build(topology: &Topology, root: MachineId, k: usize) -> Option<Lane> {
    if k < 2 || topology.rails() != 1 || root >= topology.size() {
        return None;
    }
    let switches = Switches::new(topology, root)?;
    let heights = Heights::new(&switches, k)?;
    Some(heights.lane(topology.size()))
}

/// A part of the tree that one sender enters from outside it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Part {
    /// The subtree `T(d)` below switch `d`, entered from `d`'s parent at its best landing.
    Below(SwitchId),
    /// Inside `T(top)` re-rooted below `x`: switch `up[x]` with its child subtrees other than
    /// `x`'s and, unless it is `top`, the part above it; entered at `up[x]` from `x`.
    Above { x: SwitchId, top: SwitchId },
}

/// Every part's least height by entry count (`UNREACHABLE` where that count cannot be used).
struct Heights<'a> {
    switches: &'a Switches,
    k: usize,
    /// `Part::Below(d)`: heights by entry count, and the switch those entries land on.
    below: Vec<Vec<usize>>,
    landing: Vec<Vec<SwitchId>>,
    /// `Part::Above { x, top }` by `(x, top)`: heights by entry count (entries land on `up[x]`).
    above: HashMap<(SwitchId, SwitchId), Vec<usize>>,
    /// The height of the whole tree, from the root.
    whole: usize,
}

impl<'a> Heights<'a> {
    /// Bottom-up over the switch tree, children before parents.
    fn new(switches: &'a Switches, k: usize) -> Option<Heights<'a>> {
        let n = switches.locals.len();
        let mut heights = Heights {
            switches,
            k,
            below: vec![Vec::new(); n],
            landing: vec![Vec::new(); n],
            above: HashMap::new(),
            whole: 0,
        };
        for &d in switches.order.iter().rev() {
            if d != switches.top {
                heights.jumps_into(d);
            }
        }
        let top = switches.top;
        heights.whole = heights.lowest_at(top, 1, &heights.parts_at(top, None, top))?;
        Some(heights)
    }

    /// Fills `below[d]`, `landing[d]` and the parts above every switch of `T(d)` re-rooted
    /// below it (parents before children: each needs the part above its parent).
    fn jumps_into(&mut self, d: SwitchId) {
        let switches = self.switches;
        let mut nodes = vec![d];
        let mut i = 0;
        while i < nodes.len() {
            nodes.extend(switches.below[nodes[i]].iter().copied());
            i += 1;
        }
        for &x in &nodes[1..] {
            let s = switches.up[x];
            let parts = self.parts_at(s, Some(x), d);
            let found = self.by_entries(s, &parts);
            self.above.insert((x, d), found);
        }
        let widest = nodes
            .iter()
            .map(|&h| self.k.min(switches.locals[h].len()))
            .max()
            .unwrap_or(0);
        let mut best = vec![UNREACHABLE; widest];
        let mut landing = vec![d; widest];
        for &h in &nodes {
            let parts = self.parts_at(h, None, d);
            for (e, height) in self.by_entries(h, &parts).into_iter().enumerate() {
                if height < best[e] {
                    best[e] = height;
                    landing[e] = h;
                }
            }
        }
        self.below[d] = best;
        self.landing[d] = landing;
    }

    /// The parts hanging below switch `s` of `T(top)` when data lands on `s`: its child
    /// subtrees but `except`'s, and, unless `s` is `top`, the part above it.
    fn parts_at(&self, s: SwitchId, except: Option<SwitchId>, top: SwitchId) -> Vec<Part> {
        let mut parts: Vec<Part> = self.switches.below[s]
            .iter()
            .filter(|&&c| Some(c) != except)
            .map(|&c| Part::Below(c))
            .collect();
        if s != top {
            parts.push(Part::Above { x: s, top });
        }
        parts
    }

    /// A part's heights by entry count.
    fn heights(&self, part: Part) -> &[usize] {
        match part {
            Part::Below(d) => &self.below[d],
            Part::Above { x, top } => &self.above[&(x, top)],
        }
    }

    /// The least heights of switch `s` entered at 1, 2, … of its machines, with `parts` below.
    fn by_entries(&self, s: SwitchId, parts: &[Part]) -> Vec<usize> {
        (1..=self.k.min(self.switches.locals[s].len()))
            .map(|e| self.lowest_at(s, e, parts).unwrap_or(UNREACHABLE))
            .collect()
    }

    /// The least height of switch `s` entered at `entries` of its machines, with `parts` below.
    fn lowest_at(&self, s: SwitchId, entries: usize, parts: &[Part]) -> Option<usize> {
        let slices: Vec<&[usize]> = parts.iter().map(|&p| self.heights(p)).collect();
        // A chain through the switch's machines and every part at its loosest.
        let loosest = self.switches.locals[s].len()
            + slices
                .iter()
                .map(|h| 1 + h.iter().filter(|&&v| v != UNREACHABLE).max().unwrap_or(&0))
                .sum::<usize>();
        lowest(&self.switches.locals[s], entries, self.k, &slices, loosest)
    }

    /// Where `e` entries of `part` land, the part's height for them, and its parts below.
    fn open(&self, part: Part, e: usize) -> (SwitchId, usize, Vec<Part>) {
        match part {
            Part::Below(d) => {
                let land = self.landing[d][e - 1];
                (land, self.below[d][e - 1], self.parts_at(land, None, d))
            }
            Part::Above { x, top } => {
                let s = self.switches.up[x];
                (
                    s,
                    self.above[&(x, top)][e - 1],
                    self.parts_at(s, Some(x), top),
                )
            }
        }
    }

    /// Top-down: every switch's assignment at its part's height.
    fn lane(&self, size: usize) -> Lane {
        let switches = self.switches;
        let top = switches.top;
        let mut children = vec![Vec::new(); size];
        let mut stack = vec![(top, 1usize, self.whole, self.parts_at(top, None, top))];
        while let Some((s, entries, height, parts)) = stack.pop() {
            let slices: Vec<&[usize]> = parts.iter().map(|&p| self.heights(p)).collect();
            let sends = greedy(&switches.locals[s], entries, self.k, height, &slices)
                .expect("the height was found feasible bottom-up");
            for (sender, kids) in sends {
                for kid in kids {
                    match kid {
                        Kid::Machine(m) => children[sender].push(m),
                        Kid::Part(i, e) => {
                            let (land, height, below) = self.open(parts[i], e);
                            children[sender].extend(switches.locals[land][..e].iter().copied());
                            stack.push((land, e, height, below));
                        }
                    }
                }
            }
        }
        Lane::from_children(children)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{check, switch_tree, Plan, TreeKind};
    use crate::topology::{Link, Machine, Switch};

    /// A chain of `n` switches `s0 – s1 – … ` with `per` machines each.
    fn chain(n: usize, per: usize) -> Topology {
        let switches = (0..n)
            .map(|i| Switch {
                name: format!("s{i}"),
            })
            .collect();
        let links = (1..n)
            .map(|i| Link {
                a: i - 1,
                b: i,
                gbps: None,
            })
            .collect();
        let machines = (0..n * per)
            .map(|m| Machine::new(format!("n{m}"), m / per))
            .collect();
        Topology::new(switches, links, machines).unwrap()
    }

    #[test]
    fn a_chain_is_fed_from_both_ends() {
        // 12 switches of 4 machines in a line, root at one end: down-only needs a level per
        // switch, jumping to the middle about half.
        let t = chain(12, 4);
        let down = switch_tree::build(&t, 0, 2).unwrap();
        let jump = build(&t, 0, 2).unwrap();
        assert!(check(&Plan::one_lane(TreeKind::Binary, 0, jump.clone()), &t).ok());
        assert!(
            jump.height() + 3 < down.height(),
            "jump {} down {}",
            jump.height(),
            down.height()
        );
    }

    #[test]
    fn one_switch_gives_the_complete_tree() {
        for (n, k, h) in [(1, 2, 0), (2, 2, 1), (8, 2, 3), (15, 2, 3), (13, 3, 2)] {
            let lane = build(&Topology::single_switch(n), 0, k).unwrap();
            assert_eq!(lane.height(), h, "{n} machines, k {k}");
        }
    }

    #[test]
    fn random_clusters_are_contention_free_spanning_and_rooted() {
        switch_tree::tests::check_random_clusters(build);
    }
}
