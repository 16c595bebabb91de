//! Topology generators for tests, experiments and the shipped examples.

use super::{Link, Machine, Switch, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The random cluster of seed 003 §4.1 (`003_f72e5e0868946953.txt`, the Fig. 5 experiment):
/// random links between switches are added while they keep the switch graph a forest, until
/// it is one tree; then each machine picks a switch uniformly at random. Deterministic for a
/// seed. Machines are named `n<rank>`, switches `s<i>`.
pub fn random_cluster(switches: usize, machines: usize, seed: u64) -> Topology {
    assert!(
        switches >= 1 && machines >= 1,
        "a cluster needs a switch and a machine"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut component: Vec<usize> = (0..switches).collect();
    fn find(c: &mut [usize], mut x: usize) -> usize {
        while c[x] != x {
            c[x] = c[c[x]];
            x = c[x];
        }
        x
    }
    let mut links = Vec::with_capacity(switches.saturating_sub(1));
    while links.len() + 1 < switches {
        let a = rng.gen_range(0..switches);
        let b = rng.gen_range(0..switches);
        let (ra, rb) = (find(&mut component, a), find(&mut component, b));
        if ra != rb {
            component[ra] = rb;
            links.push(Link { a, b, gbps: None });
        }
    }
    let machines = (0..machines)
        .map(|i| Machine::new(format!("n{i}"), rng.gen_range(0..switches)))
        .collect();
    let switches = (0..switches)
        .map(|i| Switch {
            name: format!("s{i}"),
        })
        .collect();
    Topology::new(switches, links, machines).expect("generated topology is a valid tree")
}

/// A star of switches: hub `s0` linked to `edges` edge switches `s1…`, `per_switch` machines on
/// every switch (the hub included). With `interleaved`, rank r sits on switch `r mod (edges+1)`
/// — the contention-prone placement of seed 000's topologies (4)/(5) where rank-order trees
/// cross the switch links again and again; otherwise ranks are grouped by switch.
pub fn hub(edges: usize, per_switch: usize, interleaved: bool) -> Topology {
    let count = edges + 1;
    let switches = (0..count)
        .map(|i| Switch {
            name: format!("s{i}"),
        })
        .collect();
    let links = (1..count)
        .map(|i| Link {
            a: 0,
            b: i,
            gbps: None,
        })
        .collect();
    let total = count * per_switch;
    let machines = (0..total)
        .map(|r| {
            let s = if interleaved {
                r % count
            } else {
                r / per_switch
            };
            Machine::new(format!("n{r}"), s)
        })
        .collect();
    Topology::new(switches, links, machines).expect("a star of switches is a tree")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_cluster_is_deterministic_and_spans() {
        let a = random_cluster(16, 100, 7);
        let b = random_cluster(16, 100, 7);
        assert_eq!(a.links(), b.links());
        assert_eq!(a.machines(), b.machines());
        assert_eq!(a.links().len(), 15);
        assert_ne!(random_cluster(16, 100, 8).links(), a.links());
    }

    #[test]
    fn hub_placements() {
        let t = hub(3, 4, false);
        assert_eq!(t.size(), 16);
        assert_eq!(t.switch_of(5), 1);
        let t = hub(3, 4, true);
        assert_eq!(t.switch_of(5), 1);
        assert_eq!(t.switch_of(4), 0);
        assert_eq!(t.machines_on(2).count(), 4);
    }
}
