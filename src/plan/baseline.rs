//! Topology-unaware baseline trees, the ones seed 003 §5 compares against (`003_f72e5e0868946953.txt`:
//! LAM/MPICH's binomial tree, the flat tree of §3, and the "topology unaware" linear and binary
//! trees of Figures 15–16: `n_0 → n_1 → … → n_{P-1}` and the complete binary tree where `n_k`
//! has children `n_{2k+1}`, `n_{2k+2}`). All work on *relative ranks* `vr = (r − root) mod P`, as
//! MPICH does, so rank `root` plays the part of `n_0`. They often contend: [`super::check()`]
//! says where. O(P) each.

use super::Lane;
use crate::topology::MachineId;

/// Rank of relative rank `vr`.
fn rank(vr: usize, size: usize, root: MachineId) -> MachineId {
    (vr + root) % size
}

/// The root sends to every other rank, in relative-rank order.
pub fn flat(size: usize, root: MachineId) -> Lane {
    let mut children = vec![Vec::new(); size];
    children[root] = (1..size).map(|vr| rank(vr, size, root)).collect();
    Lane::from_children(children)
}

/// MPICH's / LAM's binomial tree: relative rank `vr` receives from `vr − 2^h` where `2^h` is
/// its lowest set bit, and sends to `vr + 2^j` for every `2^j` below that bit (all `2^j` for the
/// root), the largest subtree first — MPICH's `MPIR_Bcast_binomial` send order.
pub fn binomial(size: usize, root: MachineId) -> Lane {
    let mut children = vec![Vec::new(); size];
    for (vr, kids) in (0..size).map(|vr| (vr, rank(vr, size, root))) {
        let lowest = if vr == 0 {
            size.next_power_of_two()
        } else {
            1 << vr.trailing_zeros()
        };
        let mut mask = lowest >> 1;
        while mask > 0 {
            if vr + mask < size {
                children[kids].push(rank(vr + mask, size, root));
            }
            mask >>= 1;
        }
    }
    Lane::from_children(children)
}

/// The chain in rank order from the root: `root, root+1, …` (mod P).
pub fn naive_linear(size: usize, root: MachineId) -> Lane {
    let order: Vec<usize> = (0..size).map(|vr| rank(vr, size, root)).collect();
    Lane::chain(size, &order)
}

/// The complete binary tree on relative ranks: `vr` sends to `2vr+1`, then `2vr+2`.
pub fn naive_binary(size: usize, root: MachineId) -> Lane {
    let mut children = vec![Vec::new(); size];
    for vr in 0..size {
        for c in [2 * vr + 1, 2 * vr + 2] {
            if c < size {
                children[rank(vr, size, root)].push(rank(c, size, root));
            }
        }
    }
    Lane::from_children(children)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_tree() {
        let lane = flat(5, 3);
        assert_eq!(lane.children[3], [4, 0, 1, 2]);
        assert_eq!(lane.height(), 1);
        assert_eq!(lane.parents[3], None);
        assert_eq!(flat(1, 0).height(), 0);
    }

    #[test]
    fn binomial_tree_matches_mpich() {
        // P = 8, root 0: 0 -> 4, 2, 1; 4 -> 6, 5; 2 -> 3; 6 -> 7.
        let lane = binomial(8, 0);
        assert_eq!(lane.children[0], [4, 2, 1]);
        assert_eq!(lane.children[4], [6, 5]);
        assert_eq!(lane.children[2], [3]);
        assert_eq!(lane.children[6], [7]);
        assert_eq!(lane.height(), 3);
        // P = 6, root 2: relative 0..6 -> ranks 2,3,4,5,0,1; vr 0 sends to vr 4, 2, 1.
        let lane = binomial(6, 2);
        assert_eq!(lane.children[2], [0, 4, 3]);
        assert_eq!(lane.children[0], [1]); // vr 4 -> vr 5
        assert_eq!(lane.children[4], [5]); // vr 2 -> vr 3
        for p in 1..70 {
            let lane = binomial(p, p / 3);
            let spanned = lane.parents.iter().filter(|x| x.is_none()).count();
            assert_eq!(spanned, 1, "P = {p}");
            // The depth of relative rank vr is its number of set bits.
            let deepest = (0..p).map(|vr| vr.count_ones()).max().unwrap() as usize;
            assert_eq!(lane.height(), deepest, "P = {p}");
        }
    }

    #[test]
    fn naive_trees() {
        let lane = naive_linear(4, 2);
        assert_eq!(lane.children[2], [3]);
        assert_eq!(lane.children[3], [0]);
        assert_eq!(lane.children[0], [1]);
        assert_eq!(lane.height(), 3);
        let lane = naive_binary(7, 0);
        assert_eq!(lane.children[0], [1, 2]);
        assert_eq!(lane.children[2], [5, 6]);
        assert_eq!(lane.height(), 2);
        let lane = naive_binary(6, 5);
        assert_eq!(lane.children[5], [0, 1]); // vr 0 -> vr 1, 2
        assert_eq!(lane.children[1], [4]); // vr 2 -> vr 5
        assert_eq!(lane.parents[5], None);
    }
}
