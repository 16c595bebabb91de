//! Algorithm 2 of seed 003 §4.1.2 (`003_f72e5e0868946953.txt`, Figure 4; also seed 000 §4):
//! the contention-free logical binary tree.
//!
//! Take the Algorithm 1 order `m_0 = root, m_1, …, m_{P-1}` ([`super::linear::order`]). For
//! every sub-array `S(i, j) = {m_i … m_j}` the dynamic program keeps one tree `tree(i, j)` of
//! least height it could find: `m_i` is the root, `tree(i+1, k-1)` hangs below `m_{i+1}` (the
//! left child) and `tree(k, j)` below `m_k` (the right child), for the `k` that minimises the
//! height among those where `m_i → m_k` does not contend with `tree(i+1, k-1)` (Figure 4, line
//! 17). Lemma 3 makes every other pair of communications contention-free, so the whole tree is
//! (Theorem 2). Ties go to the smallest `k`, as in Figure 4; the trees are the paper's, edge
//! for edge (a test compares against a literal transcription of Figure 4).
//!
//! **The 1-port subtlety.** `m_i → m_{i+1}` and `m_i → m_k` both leave through `m_i`'s own
//! uplink, so they share a directed edge. That is not contention: under the 1-port model
//! (seed 000 §3, seed 003 §4.1.2 "m_i → m_{i+1} and m_i → m_{i+2} cannot happen at the same
//! time") a machine sends one message at a time, so communications with the *same sender* are
//! serialised by the sender anyway. Only communications with different senders must use
//! disjoint directed edges — which is also what [`super::check()`] verifies.
//!
//! **Complexity.** The paper's version is O(P⁴): line 17 compares `m_i → m_k` with every
//! communication of `tree(i+1, k-1)`. Here line 17 is O(1): `m_i → m_k` can only meet
//! `tree(i+1, k-1)` on switch-to-switch edges (`m_i`'s uplink and `m_k`'s downlink are not used
//! by a tree that contains neither as sender or receiver), and the machines of a sub-array sit
//! on a contiguous run of DFS-numbered switches. Number the switches in DFS preorder from the
//! root's switch and let `end(c)` be the last position in `c`'s subtree. A communication from
//! position `u` to `v > u` goes *down* into switch `c` iff `u < pos(c) ≤ v ≤ end(c)` and *up*
//! out of `c` iff `pos(c) ≤ u ≤ end(c) < v`. For an outer communication from `pi ≤ u` to
//! `pk ≥ v` the two share a down edge iff some `c` with `pos(c) ∈ (u, v]` has `end(c) ≥ pk`,
//! and an up edge iff some `c` with `end(c) ∈ [u, v)` has `pos(c) ≤ pi`. So each tree is
//! summarised by two numbers (a `Footprint`), merged with `max`/`min` as trees are joined,
//! and computed per communication with O(1) range queries (sparse tables). The DP itself is
//! O(P³) with a branch-free inner loop over `u16` heights (vectorised), O(P²) memory:
//! 1024 machines on 128 switches plan in well under a second (see `docs/planner.md`).

use super::linear::Visit;
use super::{Lane, PlanError};
use crate::topology::{MachineId, Topology};

/// Largest number of ranks the DP planners (`binary`, `kary`) accept: they need O(P²) memory
/// (about 14 bytes per sub-array) and O(P³) time.
pub const MAX_RANKS: usize = 4096;

/// Contention-free binary tree rooted at `root`: the lowest of [`algorithm2`], the tree built
/// switch by switch ([`super::switch_tree`], beyond the papers) and the one that also feeds
/// chains of switches from their far end ([`super::jump_tree`], beyond the papers); ties keep
/// the earlier, so where neither is lower the tree is the papers' (docs/planner.md has the
/// measured heights). `children` are in send order.
pub fn build(topology: &Topology, root: MachineId) -> Result<Lane, PlanError> {
    Ok(lowest_of(algorithm2(topology, root)?, topology, root, 2))
}

/// The lowest of `lane` and the switch-by-switch trees of at most `k` children ([`super::
/// switch_tree`], then [`super::jump_tree`]); ties keep the earlier.
pub(crate) fn lowest_of(lane: Lane, topology: &Topology, root: MachineId, k: usize) -> Lane {
    let lane = lower(lane, super::switch_tree::build(topology, root, k));
    lower(lane, super::jump_tree::build(topology, root, k))
}

/// `other` where it is a lower tree than `lane`, else `lane`.
fn lower(lane: Lane, other: Option<Lane>) -> Lane {
    match other {
        Some(other) if other.height() < lane.height() => other,
        _ => lane,
    }
}

/// Algorithm 2 on each of the DFS walks of [`Visit`], keeping the lowest tree (ties: the
/// papers' walk, so where it is as low the tree is the paper's, edge for edge). Beyond the
/// paper: its walk by switch id lets the height grow to 2–2.6 × log2(P) on random clusters
/// with 8 machines per switch (seed 003 §5, Figure 5 reports "within a factor of two" of a
/// complete binary tree); visiting heavier subtrees first lowers it. Three DPs instead of one,
/// so beyond 1024 machines only the papers' walk runs. `children` are in send order: the left
/// child `m_{i+1}` first, then `m_k`.
pub fn algorithm2(topology: &Topology, root: MachineId) -> Result<Lane, PlanError> {
    let mut best: Option<(u16, Lane)> = None;
    // The DP is O(P³): beyond 1024 machines only the papers' walk (one DP, not three).
    let walks = if topology.size() > WALKS_UP_TO {
        1
    } else {
        VISITS.len()
    };
    for visit in VISITS.into_iter().take(walks) {
        let line = Line::with_visit(topology, root, "binary", visit)?;
        let (height, lane) = on_line(&line);
        if best.as_ref().is_none_or(|(h, _)| height < *h) {
            best = Some((height, lane));
        }
    }
    Ok(best.expect("at least one walk").1)
}

/// Largest machine count for which [`build`] tries every walk.
pub(crate) const WALKS_UP_TO: usize = 1024;

/// The DFS walks [`build`] tries, the papers' first.
pub(crate) const VISITS: [Visit; 3] = [Visit::ById, Visit::HeavyFirst, Visit::LightFirst];

/// Algorithm 2 exactly as seed 003 Figure 4 has it: on the DFS walk by switch id.
pub fn paper(topology: &Topology, root: MachineId) -> Result<Lane, PlanError> {
    Ok(on_line(&Line::new(topology, root, "binary")?).1)
}

/// Algorithm 2's DP on one order; the tree and its height.
fn on_line(line: &Line) -> (u16, Lane) {
    let n = line.order.len();
    let mut dp = Table::new(n);
    // `barred[k]` is all ones when m_i -> m_k contends with tree(i+1, k-1) (line 17).
    let mut barred = vec![0u16; n];
    for i in (0..n).rev() {
        if i + 1 < n {
            dp.set(i, i + 1, 1, 0, line.comm(i, i + 1));
        }
        for (k, bar) in barred.iter_mut().enumerate().skip(i + 2) {
            *bar = line.bars(i, k, dp.footprint(i + 1, k - 1));
        }
        for j in i + 2..n {
            // k runs over i+2..=j: left = height(i+1, k-1), right = height(k, j).
            let left = &dp.row(i + 1)[i + 1..j];
            let right = &dp.column(j)[i + 2..=j];
            let (h, at) = first_min(left, right, &barred[i + 2..=j]);
            let k = i + 2 + at;
            let footprint = dp
                .footprint(i + 1, k - 1)
                .union(dp.footprint(k, j))
                .union(line.comm(i, k));
            dp.set(i, j, h + 1, k as u16, footprint);
        }
    }
    let mut children = vec![Vec::new(); n];
    let mut stack = vec![(0, n - 1)];
    while let Some((i, j)) = stack.pop() {
        if j <= i {
            continue;
        }
        let kids = &mut children[line.order[i]];
        kids.push(line.order[i + 1]);
        if j == i + 1 {
            continue;
        }
        let k = dp.split(i, j);
        kids.push(line.order[k]);
        stack.push((i + 1, k - 1));
        stack.push((k, j));
    }
    let height = if n > 1 { dp.height(0, n - 1) } else { 0 };
    (height, Lane::from_children(children))
}

/// The first index of the smallest `max(left, right) | barred` (barred entries are all ones,
/// so they lose unless nothing else is left). Two passes so that both loops vectorise.
pub(crate) fn first_min(left: &[u16], right: &[u16], barred: &[u16]) -> (u16, usize) {
    let value = |((&l, &r), &b): ((&u16, &u16), &u16)| l.max(r) | b;
    let best = left
        .iter()
        .zip(right)
        .zip(barred)
        .map(value)
        .min()
        .unwrap_or(u16::MAX);
    let at = left
        .iter()
        .zip(right)
        .zip(barred)
        .map(value)
        .position(|v| v == best)
        .unwrap_or(0);
    (best, at)
}

/// What a set of communications does on the switch tree, as far as line 17 needs to know
/// (see the module comment): `down` is one more than the largest subtree end of a switch the
/// set enters from above (0: none), `up` the smallest DFS position of a switch the set leaves
/// upwards (`u32::MAX`: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Footprint {
    down: u32,
    up: u32,
}

impl Footprint {
    pub(crate) const NONE: Footprint = Footprint {
        down: 0,
        up: u32::MAX,
    };

    pub(crate) fn union(self, other: Footprint) -> Footprint {
        Footprint {
            down: self.down.max(other.down),
            up: self.up.min(other.up),
        }
    }

    /// Whether a communication from switch position `from` to `to` (`from ≤` every sender's
    /// position, `to ≥` every receiver's) shares a switch edge with this set.
    fn meets(self, from: u32, to: u32) -> bool {
        self.down > to || self.up <= from
    }
}

/// The Algorithm 1 order with the DFS switch numbering behind it.
pub(crate) struct Line {
    /// `m_0 … m_{P-1}`.
    pub(crate) order: Vec<MachineId>,
    /// DFS position of the switch of `m_x`, by order index `x`.
    pos: Vec<u32>,
    /// Range max over `end(switch at position p)`.
    ends: SparseTable,
    /// Range min over "smallest position of a switch whose subtree ends at `e`".
    starts: SparseTable,
}

impl Line {
    /// The order for `root`; `tree` names the algorithm in errors.
    pub(crate) fn new(topology: &Topology, root: MachineId, tree: &str) -> Result<Line, PlanError> {
        Line::with_visit(topology, root, tree, Visit::ById)
    }

    /// The order for `root` over `visit`'s DFS walk.
    pub(crate) fn with_visit(
        topology: &Topology,
        root: MachineId,
        tree: &str,
        visit: Visit,
    ) -> Result<Line, PlanError> {
        let size = topology.size();
        if root >= size {
            return Err(PlanError::BadRoot { root, size });
        }
        if size > MAX_RANKS {
            return Err(PlanError::TooLarge {
                tree: tree.to_string(),
                ranks: size,
                max: MAX_RANKS,
            });
        }
        let switches =
            super::linear::dfs_switch_order_with(topology, topology.switch_of(root), visit);
        let mut position = vec![0u32; topology.switches().len()];
        for (p, &s) in switches.iter().enumerate() {
            position[s] = p as u32;
        }
        // In a preorder the parent is the one neighbour numbered earlier; subtrees are ranges.
        let mut end: Vec<u32> = (0..switches.len() as u32).collect();
        for p in (1..switches.len()).rev() {
            let parent = topology
                .neighbours(switches[p])
                .iter()
                .map(|&(n, _)| position[n])
                .filter(|&q| (q as usize) < p)
                .min()
                .expect("every switch but the first has an earlier neighbour in DFS order");
            end[parent as usize] = end[parent as usize].max(end[p]);
        }
        let mut first_ending = vec![u32::MAX; switches.len()];
        for (p, &e) in end.iter().enumerate() {
            first_ending[e as usize] = first_ending[e as usize].min(p as u32);
        }
        let order = super::linear::order_with(topology, root, visit);
        let pos = order
            .iter()
            .map(|&m| position[topology.switch_of(m)])
            .collect();
        Ok(Line {
            order,
            pos,
            ends: SparseTable::new(end, u32::max),
            starts: SparseTable::new(first_ending, u32::min),
        })
    }

    /// The footprint of the single communication `m_x → m_y`, `x < y`.
    pub(crate) fn comm(&self, x: usize, y: usize) -> Footprint {
        let (u, v) = (self.pos[x] as usize, self.pos[y] as usize);
        if u >= v {
            return Footprint::NONE;
        }
        Footprint {
            down: self.ends.query(u + 1, v) + 1,
            up: self.starts.query(u, v - 1),
        }
    }

    /// All ones when `m_i → m_k` contends with a tree over `S(i+1, k-1)` of footprint `inner`.
    pub(crate) fn bars(&self, i: usize, k: usize, inner: Footprint) -> u16 {
        if inner.meets(self.pos[i], self.pos[k]) {
            u16::MAX
        } else {
            0
        }
    }
}

/// O(1) range queries of an idempotent operation (max or min) after O(n log n) preparation.
struct SparseTable {
    levels: Vec<Vec<u32>>,
    op: fn(u32, u32) -> u32,
}

impl SparseTable {
    fn new(values: Vec<u32>, op: fn(u32, u32) -> u32) -> SparseTable {
        let mut levels = vec![values];
        let mut width = 1;
        while 2 * width <= levels[0].len() {
            let prev = levels.last().expect("level 0 exists");
            let next = (0..prev.len() - width)
                .map(|i| op(prev[i], prev[i + width]))
                .collect();
            levels.push(next);
            width *= 2;
        }
        SparseTable { levels, op }
    }

    /// `op` over positions `lo..=hi`.
    fn query(&self, lo: usize, hi: usize) -> u32 {
        let level = (usize::BITS - 1 - (hi - lo + 1).leading_zeros()) as usize;
        let width = 1 << level;
        (self.op)(self.levels[level][lo], self.levels[level][hi + 1 - width])
    }
}

/// The DP tables over sub-arrays `(i, j)`, `i ≤ j`: height by row and by column (so that both
/// operands of the inner loop are contiguous), the chosen split and the footprint.
pub(crate) struct Table {
    n: usize,
    rows: Vec<u16>,
    columns: Vec<u16>,
    splits: Vec<u16>,
    footprints: Vec<Footprint>,
}

impl Table {
    pub(crate) fn new(n: usize) -> Table {
        Table {
            n,
            rows: vec![0; n * n],
            columns: vec![0; n * n],
            splits: vec![0; n * n],
            footprints: vec![Footprint::NONE; n * n],
        }
    }
    pub(crate) fn set(&mut self, i: usize, j: usize, h: u16, split: u16, fp: Footprint) {
        self.rows[i * self.n + j] = h;
        self.columns[j * self.n + i] = h;
        self.splits[i * self.n + j] = split;
        self.footprints[i * self.n + j] = fp;
    }
    /// `height(i, ·)`, indexed by `j`.
    pub(crate) fn row(&self, i: usize) -> &[u16] {
        &self.rows[i * self.n..(i + 1) * self.n]
    }
    /// `height(·, j)`, indexed by `i`.
    pub(crate) fn column(&self, j: usize) -> &[u16] {
        &self.columns[j * self.n..(j + 1) * self.n]
    }
    pub(crate) fn height(&self, i: usize, j: usize) -> u16 {
        self.rows[i * self.n + j]
    }
    pub(crate) fn split(&self, i: usize, j: usize) -> usize {
        self.splits[i * self.n + j] as usize
    }
    /// Footprint of the tree over `S(i, j)`; empty when `j < i`.
    pub(crate) fn footprint(&self, i: usize, j: usize) -> Footprint {
        if j < i {
            Footprint::NONE
        } else {
            self.footprints[i * self.n + j]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::linear;
    use crate::topology::gen;

    /// Figure 4, line by line (O(P⁴), for tests): trees as lists of (sender, receiver) order
    /// indices, line 17 with `Topology::contends`.
    fn figure4(t: &Topology, root: MachineId) -> Lane {
        let m = linear::order(t, root);
        let p = m.len();
        let mut best = vec![vec![0usize; p]; p];
        let mut tree: Vec<Vec<Vec<(usize, usize)>>> = vec![vec![Vec::new(); p]; p];
        for i in 0..p.saturating_sub(1) {
            best[i][i + 1] = 1;
            tree[i][i + 1] = vec![(i, i + 1)];
        }
        for i in 0..p.saturating_sub(2) {
            best[i][i + 2] = 1;
            tree[i][i + 2] = vec![(i, i + 1), (i, i + 2)];
        }
        for j in 3..p {
            for i in 0..p - j {
                best[i][i + j] = usize::MAX;
                let mut index = 0;
                for k in i + 2..=i + j {
                    let clash = tree[i + 1][k - 1]
                        .iter()
                        .any(|&(a, b)| t.contends((m[i], m[k]), (m[a], m[b])));
                    if !clash {
                        let h = best[i + 1][k - 1].max(best[k][i + j]) + 1;
                        if best[i][i + j] > h {
                            best[i][i + j] = h;
                            index = k;
                        }
                    }
                }
                let mut edges = tree[i + 1][index - 1].clone();
                edges.extend_from_slice(&tree[index][i + j]);
                edges.push((i, i + 1));
                edges.push((i, index));
                tree[i][i + j] = edges;
            }
        }
        let mut children = vec![Vec::new(); p];
        let mut edges = tree[0][p - 1].clone();
        edges.sort_unstable(); // by sender, then receiver: m_{i+1} before m_k
        for (a, b) in edges {
            children[m[a]].push(m[b]);
        }
        Lane::from_children(children)
    }

    #[test]
    fn matches_figure4_edge_for_edge() {
        for seed in 0..300u64 {
            let switches = 1 + (seed % 9) as usize;
            let machines = 1 + (seed * 7 % 29) as usize;
            let t = gen::random_cluster(switches, machines, seed);
            let root = (seed as usize * 5) % machines;
            let fast = paper(&t, root).unwrap();
            let slow = figure4(&t, root);
            assert!(
                build(&t, root).unwrap().height() <= slow.height(),
                "seed {seed}"
            );
            assert_eq!(fast.height(), slow.height(), "seed {seed}");
            assert_eq!(
                fast, slow,
                "seed {seed}: {switches} switches, {machines} machines"
            );
        }
    }

    #[test]
    fn footprint_agrees_with_paths() {
        // `Line::comm(..).meets(..)` against shared directed switch edges, all quadruples.
        for seed in 0..40u64 {
            let t = gen::random_cluster(2 + (seed % 7) as usize, 14, seed);
            let line = Line::new(&t, (seed % 14) as usize, "binary").unwrap();
            let m = &line.order;
            let n = m.len();
            for i in 0..n {
                for k in i + 1..n {
                    for a in i + 1..k {
                        for b in a + 1..k {
                            let shared = t.contends((m[i], m[k]), (m[a], m[b]));
                            let meets = line.comm(a, b).meets(line.pos[i], line.pos[k]);
                            assert_eq!(shared, meets, "seed {seed} m{i}->m{k} vs m{a}->m{b}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn small_and_single_switch_trees() {
        let t = Topology::single_switch(1);
        assert_eq!(build(&t, 0).unwrap().height(), 0);
        let t = Topology::single_switch(3);
        let lane = build(&t, 1).unwrap();
        assert_eq!(lane.children[1].len(), 2);
        // On one switch nothing contends: the tree is as short as a complete binary tree.
        let t = Topology::single_switch(31);
        assert_eq!(build(&t, 0).unwrap().height(), 4);
        assert_eq!(build(&t, 0).unwrap().max_degree(), 2);
    }

    #[test]
    fn errors() {
        let t = Topology::single_switch(4);
        assert_eq!(build(&t, 4), Err(PlanError::BadRoot { root: 4, size: 4 }));
        let t = Topology::single_switch(MAX_RANKS + 1);
        assert!(matches!(build(&t, 0), Err(PlanError::TooLarge { .. })));
    }
}
