//! A contention-free k-ary tree built switch by switch: beyond the papers, for lower trees
//! than Algorithm 2 (seed 003 §4.1.2, Figure 4) can build.
//!
//! **Why.** Algorithm 2 only builds trees whose subtrees are contiguous runs of the DFS chain
//! of Algorithm 1, each rooted at its first machine. On seed 003's random clusters with 8
//! machines per switch that lets the height grow to 1.7 × log2(P) at P = 256 (docs/planner.md,
//! "Seed 003 Fig. 5"), where seed 003 §5 only promises "within a factor of two".
//!
//! **The construction.** Root the switch tree at the root's switch. Data only ever goes *down*
//! it: every switch subtree `T(c)` is entered through its down link `parent(c) → c` by exactly
//! one sender (a machine on `parent(c)`), which sends to between 1 and k machines on `c` — the
//! subtree's *entries*. Inside a switch every communication uses only the sender's uplink and
//! the receiver's downlink. So each directed switch link carries the messages of one sender
//! only, and the tree is contention-free in the sense of seed 000 §3 / seed 003 §4.1 (what
//! [`super::check()`] verifies): communications of different senders share no directed edge.
//!
//! Per switch `c` and entry count `e`, `height(c, e)` is the least height of `T(c)`'s tree when
//! `e` entries receive at depth 0. It comes from a level-by-level greedy over the switch's own
//! machines and its child subtrees: at depth `d` the machines placed at `d − 1` offer `k` slots
//! each; a child subtree that can wait no longer is placed first (with the fewest entries that
//! still meet the height, all from one sender), then the switch's own machines (each brings `k`
//! new slots), then, in leftover slots, subtrees that could have waited. The smallest height
//! whose greedy succeeds is kept; the same greedy, run again top-down, builds the tree.
//!
//! Switches without machines whose subtree leads to a single switch with machines are passed
//! through (the one sender's messages cross them); a switch without machines above two or more
//! such subtrees would need links used upwards, so then there is no tree here ([`build`]
//! returns `None`) and the callers keep Algorithm 2's.

use super::Lane;
use crate::topology::{MachineId, SwitchId, Topology};

/// The lowest tree this construction finds, rooted at `root`, every machine with at most `k`
/// children (`k ≥ 2`); `None` where it does not apply (see the module doc).
pub fn build(topology: &Topology, root: MachineId, k: usize) -> Option<Lane> {
    build_entered(topology, root, k, k, false)
}

/// As [`build`], but every switch subtree is entered by at most `max_entries` machines
/// (`1 ≤ max_entries ≤ k`): with 1, every directed switch link carries exactly one tree edge
/// (the multicast ack tree's, `super::multicast::ack_tree`: a link's repairs and NACKs cross it
/// once per direction). With `root_local` the root's children are machines of its own switch
/// only (where it has others): the other switches hang below them, so nothing the root sends
/// to a child crosses a switch link (the lowest such tree; `None` where none fits). `None`
/// where the construction does not apply.
pub fn build_entered(
    topology: &Topology,
    root: MachineId,
    k: usize,
    max_entries: usize,
    root_local: bool,
) -> Option<Lane> {
    if k < 2 || max_entries == 0 || topology.rails() != 1 || root >= topology.size() {
        return None;
    }
    let switches = Switches::new(topology, root)?;
    // Bottom-up: every switch's heights for 1..=k entries (children before parents).
    let mut heights: Vec<Vec<usize>> = vec![Vec::new(); switches.locals.len()];
    for &s in switches.order.iter().rev() {
        let parts: Vec<&[usize]> = switches.below[s]
            .iter()
            .map(|&c| heights[c].as_slice())
            .collect();
        let loosest = subtree_size(&switches, s);
        let locals = &switches.locals[s];
        let found = (1..=k.min(max_entries).min(locals.len()))
            .map(|e| lowest(locals, e, k, &parts, loosest))
            .collect::<Option<_>>()?;
        heights[s] = found;
    }
    // Top-down: the assignment at each switch's own height.
    let mut children = vec![Vec::new(); topology.size()];
    let mut stack = vec![(switches.top, 1usize)];
    while let Some((s, entries)) = stack.pop() {
        let parts: Vec<&[usize]> = switches.below[s]
            .iter()
            .map(|&c| heights[c].as_slice())
            .collect();
        let locals = &switches.locals[s];
        let sends = if s == switches.top && root_local && locals.len() > 1 {
            // The lowest height at which the root sends to its own switch only.
            let least = heights[s][entries - 1];
            (least..=least + topology.size())
                .find_map(|h| greedy_with(locals, entries, k, h, &parts, Some(root)))?
        } else {
            greedy(locals, entries, k, heights[s][entries - 1], &parts)
                .expect("the height was found feasible bottom-up")
        };
        for (parent, kids) in sends {
            for kid in kids {
                match kid {
                    Kid::Machine(m) => children[parent].push(m),
                    Kid::Part(i, e) => {
                        let c = switches.below[s][i];
                        children[parent].extend(switches.locals[c][..e].iter().copied());
                        stack.push((c, e));
                    }
                }
            }
        }
    }
    Some(Lane::from_children(children))
}

/// The switch tree rooted at the root's switch, machine-less pass-through switches skipped.
/// Shared with [`super::jump_tree`], which feeds the same tree from both ends.
pub(super) struct Switches {
    /// The root's switch.
    pub(super) top: SwitchId,
    /// Switches with machines, parents before children.
    pub(super) order: Vec<SwitchId>,
    /// Each switch's machines (the root first on its switch).
    pub(super) locals: Vec<Vec<MachineId>>,
    /// Each switch's child subtrees, by the first switch with machines below the link, in
    /// switch id order.
    pub(super) below: Vec<Vec<SwitchId>>,
    /// Each switch's parent in this tree (the first switch with machines above the link; the
    /// top's is itself).
    pub(super) up: Vec<SwitchId>,
}

impl Switches {
    pub(super) fn new(topology: &Topology, root: MachineId) -> Option<Switches> {
        let n = topology.switches().len();
        let top = topology.switch_of(root);
        let mut locals: Vec<Vec<MachineId>> = vec![Vec::new(); n];
        for m in 0..topology.size() {
            locals[topology.switch_of(m)].push(m);
        }
        locals[top].retain(|&m| m != root);
        locals[top].insert(0, root);
        // DFS preorder from the top, with each switch's parent.
        let mut parent = vec![usize::MAX; n];
        let mut preorder = Vec::with_capacity(n);
        let mut stack = vec![top];
        parent[top] = top;
        while let Some(s) = stack.pop() {
            preorder.push(s);
            for &(t, _) in topology.neighbours(s) {
                if parent[t] == usize::MAX {
                    parent[t] = s;
                    stack.push(t);
                }
            }
        }
        // Machines in each switch's subtree (children after parents in preorder).
        let mut count: Vec<usize> = locals.iter().map(Vec::len).collect();
        for &s in preorder.iter().rev() {
            if s != top {
                count[parent[s]] += count[s];
            }
        }
        // Each switch's child subtrees that hold machines, passing through machine-less ones.
        let mut below = vec![Vec::new(); n];
        let mut up = vec![top; n];
        let mut order = Vec::new();
        let mut todo = vec![top];
        while let Some(s) = todo.pop() {
            order.push(s);
            for &(t, _) in topology.neighbours(s) {
                if parent[t] != s || t == top || count[t] == 0 {
                    continue;
                }
                let mut c = t;
                while locals[c].is_empty() {
                    let mut next = topology
                        .neighbours(c)
                        .iter()
                        .map(|&(u, _)| u)
                        .filter(|&u| parent[u] == c && u != top && count[u] > 0);
                    let only = next.next()?;
                    if next.next().is_some() {
                        return None; // machine-less, above two subtrees with machines
                    }
                    c = only;
                }
                below[s].push(c);
                up[c] = s;
                todo.push(c);
            }
            below[s].sort_unstable();
        }
        Some(Switches {
            top,
            order,
            locals,
            below,
            up,
        })
    }
}

/// The least height of a switch's part of the tree entered at the first `entries` of its
/// machines `locals`, below which hang child `parts` (each part's heights by entry count,
/// `usize::MAX` where an entry count cannot be used); heights up to `loosest` are tried. `None`
/// when no height fits (more child parts than its machines have slots for).
pub(super) fn lowest(
    locals: &[MachineId],
    entries: usize,
    k: usize,
    parts: &[&[usize]],
    loosest: usize,
) -> Option<usize> {
    // From a lower bound (every part is entered one level down at the earliest) up to
    // `loosest` (for a switch subtree: a chain through all its machines).
    let mut start = 0;
    for heights in parts {
        start = start.max(1 + heights.iter().copied().min().filter(|&h| h != usize::MAX)?);
    }
    (start..=loosest.max(start)).find(|&h| greedy(locals, entries, k, h, parts).is_some())
}

/// Machines in switch `s`'s subtree.
fn subtree_size(switches: &Switches, s: SwitchId) -> usize {
    let mut total = 0;
    let mut stack = vec![s];
    while let Some(t) = stack.pop() {
        total += switches.locals[t].len();
        stack.extend(switches.below[t].iter().copied());
    }
    total
}

/// What a sender sends to: one machine of its own switch, or `e` entries of child part `i`.
#[derive(Clone, Copy)]
pub(super) enum Kid {
    Machine(MachineId),
    Part(usize, usize),
}

/// Every sender of one switch and what it sends to, in send order.
pub(super) type Sends = Vec<(MachineId, Vec<Kid>)>;

/// The level-by-level greedy of the module doc for one switch with machines `locals`, its first
/// `entries` machines at depth 0, and child `parts` (heights by entry count, as in
/// [`lowest`]), within height `height`; `None` when it does not fit.
pub(super) fn greedy(
    locals: &[MachineId],
    entries: usize,
    k: usize,
    height: usize,
    parts: &[&[usize]],
) -> Option<Sends> {
    greedy_with(locals, entries, k, height, parts, None)
}

/// [`greedy`] where machine `local_only` (if any) sends to machines of its switch only.
fn greedy_with(
    locals: &[MachineId],
    entries: usize,
    k: usize,
    height: usize,
    parts: &[&[usize]],
    local_only: Option<MachineId>,
) -> Option<Sends> {
    let mut next_local = entries;
    // Child parts still to place, by index.
    let mut pending: Vec<usize> = (0..parts.len()).collect();
    // A part placed at depth d needs e entries with d + height(part, e) ≤ `height`.
    let need = |c: usize, d: usize| -> Option<usize> {
        parts[c]
            .iter()
            .position(|&h| d.saturating_add(h) <= height)
            .map(|i| i + 1)
    };
    let mut sends: Sends = Vec::new();
    let mut level: Vec<MachineId> = locals[..entries].to_vec();
    let mut d = 0;
    while next_local < locals.len() || !pending.is_empty() {
        d += 1;
        if d > height || level.is_empty() {
            return None;
        }
        // Free slots per sender of this level.
        let mut free: Vec<(MachineId, usize, Vec<Kid>)> = level
            .iter()
            .map(|&m| {
                (
                    m,
                    if Some(m) == local_only { k.min(2) } else { k },
                    Vec::new(),
                )
            })
            .collect();
        // Parts that cannot wait one more level: most entries first.
        let mut forced: Vec<(usize, usize)> = Vec::new();
        let mut waiting = Vec::new();
        for &c in &pending {
            let now = need(c, d)?;
            if need(c, d + 1).is_none() {
                forced.push((c, now));
            } else {
                waiting.push(c);
            }
        }
        forced.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (c, e) in forced {
            let slot = free
                .iter_mut()
                .filter(|f| f.1 >= e && Some(f.0) != local_only)
                .min_by_key(|f| f.1)?;
            slot.1 -= e;
            slot.2.push(Kid::Part(c, e));
        }
        // The switch's own machines: each brings k slots one level down.
        let mut placed_now = Vec::new();
        for f in free.iter_mut() {
            while f.1 > 0 && next_local < locals.len() {
                f.1 -= 1;
                f.2.push(Kid::Machine(locals[next_local]));
                placed_now.push(locals[next_local]);
                next_local += 1;
            }
        }
        // Leftover slots: parts that could have waited, the most urgent first.
        waiting.sort_by_key(|&c| {
            let one = parts[c].iter().find(|&&h| h != usize::MAX);
            (one.map(|&h| usize::MAX - h), c)
        });
        let mut still = Vec::new();
        for c in waiting {
            let e = need(c, d).expect("checked above");
            match free
                .iter_mut()
                .filter(|f| f.1 >= e && Some(f.0) != local_only)
                .min_by_key(|f| f.1)
            {
                Some(slot) => {
                    slot.1 -= e;
                    slot.2.push(Kid::Part(c, e));
                }
                None => still.push(c),
            }
        }
        pending = still;
        for (m, _, kids) in free {
            if !kids.is_empty() {
                sends.push((m, kids));
            }
        }
        level = placed_now;
    }
    // Deeper parts first in each sender's send order.
    for (_, kids) in &mut sends {
        kids.sort_by_key(|kid| match *kid {
            Kid::Part(c, e) => usize::MAX - parts[c][e - 1],
            Kid::Machine(_) => usize::MAX,
        });
    }
    Some(sends)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn one_switch_gives_the_complete_tree() {
        for (n, k, h) in [
            (1, 2, 0),
            (2, 2, 1),
            (7, 2, 2),
            (8, 2, 3),
            (15, 2, 3),
            (13, 3, 2),
        ] {
            let t = Topology::single_switch(n);
            let lane = build(&t, 0, k).unwrap();
            assert_eq!(lane.height(), h, "{n} machines, k {k}");
            assert!(lane.max_degree() <= k);
        }
    }

    #[test]
    fn random_clusters_are_contention_free_spanning_and_bounded() {
        check_random_clusters(build);
        check_random_clusters(|t, root, k| build_entered(t, root, k, 1, false));
        check_random_clusters(|t, root, k| build_entered(t, root, k, 1, true));
    }

    #[test]
    fn one_entry_puts_one_edge_on_each_switch_link_and_a_local_root_sends_at_home() {
        use crate::topology::gen;
        for seed in 0..20u64 {
            for (switches, machines) in [(4, 32), (16, 128), (9, 17), (20, 40)] {
                let t = gen::random_cluster(switches, machines, seed);
                for root in [0, machines / 2, machines - 1] {
                    for local in [false, true] {
                        let Some(lane) = build_entered(&t, root, 3, 1, local) else {
                            continue;
                        };
                        let mut crossed = vec![0; t.edge_count()];
                        for (child, parent) in lane.parents.iter().enumerate() {
                            let Some(p) = *parent else { continue };
                            for e in t.switch_path(t.switch_of(p), t.switch_of(child)) {
                                crossed[e.0 as usize] += 1;
                            }
                        }
                        assert!(crossed.iter().all(|&n| n <= 1), "seed {seed} root {root}");
                        let home = t.machines_on(t.switch_of(root)).count();
                        if local && home > 1 {
                            let kids = &lane.children[root];
                            assert!(!kids.is_empty() && kids.len() <= 2);
                            assert!(kids.iter().all(|&c| t.switch_of(c) == t.switch_of(root)));
                        }
                    }
                }
            }
        }
    }

    /// Checks `build` (a switch-by-switch construction) with [`crate::plan::check()`] on 60 seeds × 5
    /// random cluster sizes × 3 roots × k = 2, 3, 4: spanning, rooted at the root, contention-free,
    /// at most k children.
    pub(in crate::plan) fn check_random_clusters(
        build: fn(&Topology, MachineId, usize) -> Option<Lane>,
    ) {
        use crate::plan::{check, Plan, TreeKind};
        use crate::topology::gen;
        for seed in 0..60u64 {
            for (switches, machines) in [(4, 32), (16, 128), (32, 256), (9, 17), (20, 40)] {
                let t = gen::random_cluster(switches, machines, seed);
                for root in [0, machines / 2, machines - 1] {
                    for k in [2, 3, 4] {
                        let Some(lane) = build(&t, root, k) else {
                            continue;
                        };
                        assert!(lane.max_degree() <= k);
                        let report = check(&Plan::one_lane(TreeKind::Binary, root, lane), &t);
                        assert!(report.ok(), "seed {seed} root {root} k {k}: {report:?}");
                    }
                }
            }
        }
    }
}
