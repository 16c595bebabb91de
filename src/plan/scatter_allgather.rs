//! The scatter + ring allgather baseline as lanes: MPICH's large-message broadcast (seed 000
//! §3.1, `../shared/seeds/000_4ae1cf15394cd769.txt`): a binomial scatter followed by a ring
//! allgather, written as one chain per share of the message so the engine runs it like any
//! multi-lane plan. P − 1 lanes of P ranks each: O(P²) to build.

use super::Lane;

/// The lanes of scatter + ring allgather (MPICH's large-message broadcast, seed 000 §3.1) as
/// a multi-lane plan. Lane j carries the j-th share of the message (one share per non-root
/// rank; relative ranks, root = 0). The scatter is MPICH's binomial one: the share travels
/// from the root down the binomial tree to relative rank j (the parent of r is r with its
/// lowest set bit cleared); then the ring allgather carries it on from j to j+1, j+2, …
/// around the ring, skipping ranks that already hold it. Each lane is a chain over all ranks.
pub fn scatter_allgather(size: usize, root: usize) -> Vec<Lane> {
    let rank = |rel: usize| (rel + root) % size;
    if size <= 1 {
        return vec![Lane::chain(size, &[root])];
    }
    (1..size)
        .map(|j| {
            let mut path = vec![j];
            let mut r = j;
            while r != 0 {
                r &= r - 1; // clear the lowest set bit: the binomial parent
                path.push(r);
            }
            path.reverse(); // 0, …, j
            let on_path = |rel: usize| path.contains(&rel);
            let ring = (1..size)
                .map(|k| (j + k) % size)
                .filter(|&rel| rel != 0 && !on_path(rel));
            let order: Vec<usize> = path.iter().copied().chain(ring).map(rank).collect();
            Lane::chain(size, &order)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_allgather_lanes_are_binomial_paths_then_rings() {
        // 8 ranks, root 0: share 3 goes 0 → 2 → 3 (binomial scatter), then 4, 5, 6, 7, 1.
        let lanes = scatter_allgather(8, 0);
        assert_eq!(lanes.len(), 7);
        let chain = |lane: &Lane| {
            let mut order = vec![lane.root().unwrap()];
            while let Some(&next) = lane.children[*order.last().unwrap()].first() {
                order.push(next);
            }
            order
        };
        assert_eq!(chain(&lanes[2]), vec![0, 2, 3, 4, 5, 6, 7, 1]);
        assert_eq!(chain(&lanes[0]), vec![0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(chain(&lanes[6]), vec![0, 4, 6, 7, 1, 2, 3, 5]);
        // Root 5 of 6: relative ranks shift.
        for (j, lane) in scatter_allgather(6, 5).iter().enumerate() {
            let order = chain(lane);
            assert_eq!(order.len(), 6, "lane {j} spans every rank once");
            assert_eq!(order[0], 5);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..6).collect::<Vec<_>>());
            assert_eq!(lane.max_degree(), 1);
        }
        assert_eq!(scatter_allgather(1, 0).len(), 1);
    }
}
