//! The k-ary extension of Algorithm 2 (seed 003 `003_f72e5e0868946953.txt`, §4.1.2, the
//! paragraph after Theorem 2): "S(i, j) can basically be partitioned into k sub-arrays which
//! form the k subtrees. Precautions must be taken to prevent the communications from root to a
//! subtree from causing contention with communications in the subtrees."
//!
//! `tree(i, j)` has root `m_i` and `2 ≤ t ≤ K` children `m_{i+1} = m_{c_1} < m_{c_2} < … <
//! m_{c_t}` (in send order), child `c_r` rooting the best tree found for the sub-array
//! `S(c_r, c_{r+1} - 1)` (the last one ends at `j`). As with Figure 4, a root of three or more
//! machines always has at least two children, ties go to the earliest cut, and sub-arrays of
//! two machines are a single edge.
//!
//! **Why it is contention-free.** By Lemma 3 two subtrees never contend, the root's own sends
//! share only the root's uplink (same sender: serialised under the 1-port model, see
//! [`super::binary`]), and `m_i → m_{c_r}` never contends with subtrees to its right. The
//! precaution is against subtrees to its left. With the footprints of [`super::binary`], a
//! subtree over `S(a, b)` is safe from every later root send iff it is safe from `m_i →
//! m_{b+1}` (later targets lie further right, which only relaxes the *down* test), and its *up*
//! test depends only on the root's position. The planner demands the slightly stronger
//! `m_{a-1} → m_{b+1}` (the binary planner's line-17 test for that sub-array): exactly the
//! paper's test for the first subtree (`a = i+1`), and sufficient for later ones because
//! `m_{a-1}` lies no earlier than `m_i`. That makes the test independent of the root, so
//! "best forest of at most `t` subtrees over `S(a, j)`" is a DP table of its own.
//!
//! **Complexity.** O(K·P³) time (one O(P) vectorised scan per sub-array and per `t ≤ K`),
//! O(K·P²) memory, O(1) contention test. `K = 1` is Algorithm 1's chain; `K = 2` is Algorithm 2
//! edge for edge.

use super::binary::{first_min, Footprint, Line, Table, VISITS, WALKS_UP_TO};
use super::{Lane, PlanError};
use crate::topology::{MachineId, Topology};

/// Sub-array entries the forest tables may hold in total (about 16 bytes each).
const FOREST_BUDGET: usize = 1 << 24;

/// Best forests of at most `t` subtrees over every `S(a, j)` (for one `t ≥ 2`): height, the cut
/// (start of the second subtree; 0 = a single subtree), footprint of all subtrees, and the
/// start of the last subtree (the root's farthest send).
struct Forests {
    table: Table,
    last: Vec<u16>,
}

/// Contention-free k-ary tree rooted at `root`: every rank has at most `k` children. As
/// [`binary::build`](super::binary::build), the lowest tree over the DFS walks it tries (up to
/// 1024 machines; ties: the papers' walk), or a tree built switch by switch
/// ([`super::switch_tree`], [`super::jump_tree`]) where that one is lower.
pub fn build(topology: &Topology, root: MachineId, k: usize) -> Result<Lane, PlanError> {
    let name = format!("kary:{k}");
    if k == 0 {
        return Err(PlanError::BadArity(name));
    }
    if k == 1 || topology.size() <= 2 {
        let line = Line::new(topology, root, &name)?;
        return Ok(Lane::chain(line.order.len(), &line.order));
    }
    let walks = if topology.size() > WALKS_UP_TO {
        1
    } else {
        VISITS.len()
    };
    let mut best: Option<Lane> = None;
    for visit in VISITS.into_iter().take(walks) {
        let line = Line::with_visit(topology, root, &name, visit)?;
        let lane = on_line(&line, k, &name)?;
        if best.as_ref().is_none_or(|b| lane.height() < b.height()) {
            best = Some(lane);
        }
    }
    let best = best.expect("at least one walk");
    Ok(super::binary::lowest_of(best, topology, root, k))
}

/// The k-ary DP on one order (`k ≥ 2`, at least three machines).
fn on_line(line: &Line, k: usize, name: &str) -> Result<Lane, PlanError> {
    let name = name.to_string();
    let n = line.order.len();
    let k = k.min(n - 1);
    if (k - 1) * n * n > FOREST_BUDGET {
        let max = ((FOREST_BUDGET / (k - 1)) as f64).sqrt() as usize;
        return Err(PlanError::TooLarge {
            tree: name,
            ranks: n,
            max,
        });
    }
    let mut dp = Table::new(n);
    let mut forests: Vec<Forests> = (2..k)
        .map(|_| Forests {
            table: Table::new(n),
            last: vec![0; n * n],
        })
        .collect();
    // barred[c] for the current row a: all ones when m_{a-1} -> m_c contends with tree(a, c-1).
    let mut barred = vec![0u16; n];
    let mut next_barred = vec![0u16; n];
    for a in (0..n).rev() {
        // Trees rooted at m_a: first subtree S(a+1, c-1), then a forest of ≤ k-1 over S(c, j).
        if a + 1 < n {
            dp.set(a, a + 1, 1, 0, line.comm(a, a + 1));
        }
        for j in a + 2..n {
            let left = &dp.row(a + 1)[a + 1..j];
            let rest = forests.last().map_or(&dp, |f| &f.table);
            let right = &rest.column(j)[a + 2..=j];
            let (h, at) = first_min(left, right, &barred[a + 2..=j]);
            let c = a + 2 + at;
            let (forest_fp, last) = match forests.last() {
                Some(f) => (f.table.footprint(c, j), f.last[c * n + j] as usize),
                None => (dp.footprint(c, j), c),
            };
            let fp = dp
                .footprint(a + 1, c - 1)
                .union(forest_fp)
                .union(line.comm(a, last));
            dp.set(a, j, h + 1, c as u16, fp);
        }
        if a == 0 {
            break;
        }
        for (c, bar) in next_barred.iter_mut().enumerate().skip(a + 1) {
            *bar = line.bars(a - 1, c, dp.footprint(a, c - 1));
        }
        // Forests of ≤ t subtrees starting at m_a, t = 2..k-1.
        for t in 0..forests.len() {
            let (done, todo) = forests.split_at_mut(t);
            let prev = done.last();
            let this = &mut todo[0];
            this.table.set(a, a, 0, 0, Footprint::NONE);
            this.last[a * n + a] = a as u16;
            for j in a + 1..n {
                let left = &dp.row(a)[a..j];
                let fewer = prev.map_or(&dp, |f| &f.table);
                let right = &fewer.column(j)[a + 1..=j];
                let (h, at) = first_min(left, right, &next_barred[a + 1..=j]);
                let whole = dp.height(a, j);
                if whole <= h {
                    this.table.set(a, j, whole, 0, dp.footprint(a, j));
                    this.last[a * n + j] = a as u16;
                } else {
                    let c = a + 1 + at;
                    let (rest_fp, last) = match prev {
                        Some(f) => (f.table.footprint(c, j), f.last[c * n + j]),
                        None => (dp.footprint(c, j), c as u16),
                    };
                    let fp = dp.footprint(a, c - 1).union(rest_fp);
                    this.table.set(a, j, h, c as u16, fp);
                    this.last[a * n + j] = last;
                }
            }
        }
        std::mem::swap(&mut barred, &mut next_barred);
    }
    let mut children = vec![Vec::new(); n];
    let mut stack = vec![(0, n - 1)];
    while let Some((i, j)) = stack.pop() {
        if j <= i {
            continue;
        }
        let mut parts = vec![(i + 1, i + 1)];
        if j > i + 1 {
            let c = dp.split(i, j);
            parts[0] = (i + 1, c - 1);
            forest_parts(&forests, c, j, &mut parts);
        }
        for &(x, y) in &parts {
            children[line.order[i]].push(line.order[x]);
            stack.push((x, y));
        }
    }
    Ok(Lane::from_children(children))
}

/// Appends the subtrees of the best forest of at most `forests.len() + 1` subtrees over
/// `S(a, j)`.
fn forest_parts(forests: &[Forests], mut a: usize, j: usize, parts: &mut Vec<(usize, usize)>) {
    let mut t = forests.len();
    while t > 0 {
        let f = &forests[t - 1];
        let cut = f.table.split(a, j);
        if cut == 0 {
            break;
        }
        parts.push((a, cut - 1));
        a = cut;
        t -= 1;
    }
    parts.push((a, j));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{binary, linear};
    use crate::topology::gen;

    #[test]
    fn two_is_binary_and_one_is_the_chain() {
        for seed in 0..60u64 {
            let t = gen::random_cluster(
                1 + (seed % 11) as usize,
                2 + (seed * 13 % 90) as usize,
                seed,
            );
            let root = seed as usize % t.size();
            assert_eq!(
                build(&t, root, 2).unwrap(),
                binary::build(&t, root).unwrap()
            );
            assert_eq!(build(&t, root, 1).unwrap(), linear::build(&t, root));
        }
    }

    #[test]
    fn degree_is_bounded_and_height_does_not_grow_with_k() {
        let t = Topology::single_switch(40);
        for k in 2..6 {
            let lane = build(&t, 3, k).unwrap();
            assert!(lane.max_degree() <= k);
            assert!(lane.max_degree() >= 2);
        }
        // On one switch nothing contends: a K-ary tree of 40 is as short as a complete K-ary tree.
        assert_eq!(build(&t, 0, 3).unwrap().height(), 3);
        assert_eq!(build(&t, 0, 39).unwrap().height(), 1);
        assert_eq!(build(&t, 0, 500).unwrap().height(), 1);
    }

    #[test]
    fn errors() {
        let t = Topology::single_switch(4);
        assert!(matches!(build(&t, 0, 0), Err(PlanError::BadArity(_))));
        assert!(matches!(build(&t, 9, 2), Err(PlanError::BadRoot { .. })));
        let t = Topology::single_switch(3000);
        assert!(matches!(build(&t, 0, 9), Err(PlanError::TooLarge { .. })));
    }
}
