//! Topology generators for tests, experiments and the shipped examples.

use super::{Link, Machine, Nic, Switch, Topology};
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

/// `rails` copies of [`hub`]`(edges, per_switch, interleaved)`, one per rail, each its own
/// switch tree: rail r's switches are named with the r-th letter (`a0` hub, `a1…` edges;
/// `b0…`), and machine n's NIC r sits on the same position of rail r as NIC 0 on rail 0.
/// `rails(2, 3, 4, false)` is the issue-16 lab: 16 machines, 2 rails × 4 switches.
pub fn rails(rails: usize, edges: usize, per_switch: usize, interleaved: bool) -> Topology {
    assert!(
        (1..=super::MAX_NICS).contains(&rails),
        "1 to MAX_NICS rails"
    );
    let one = hub(edges, per_switch, interleaved);
    join_rails(&vec![one; rails])
}

/// One topology whose rail r is `per_rail[r]` (all with the same number of machines, by
/// index): switches renamed with the rail's letter (`s3` of rail 1 becomes `b3`), machines
/// named after rail 0.
pub fn join_rails(per_rail: &[Topology]) -> Topology {
    let letter = |r: usize| char::from(b'a' + (r % 26) as u8);
    let mut switches = Vec::new();
    let mut links = Vec::new();
    let mut base = Vec::with_capacity(per_rail.len());
    for (r, t) in per_rail.iter().enumerate() {
        base.push(switches.len());
        let offset = switches.len();
        switches.extend(t.switches().iter().map(|s| Switch {
            name: format!("{}{}", letter(r), s.name.trim_start_matches('s')),
        }));
        links.extend(t.links().iter().map(|l| Link {
            a: l.a + offset,
            b: l.b + offset,
            gbps: l.gbps,
        }));
    }
    let machines = per_rail[0]
        .machines()
        .iter()
        .enumerate()
        .map(|(m, first)| Machine {
            switch: first.switch + base[0],
            rails: (1..per_rail.len())
                .map(|r| Nic {
                    switch: per_rail[r].switch_of(m) + base[r],
                    mac: None,
                    port: None,
                })
                .collect(),
            ..first.clone()
        })
        .collect();
    Topology::new(switches, links, machines).expect("rails of valid trees are a valid forest")
}

/// `rails` independent [`random_cluster`]s over the same `machines`, joined by [`join_rails`]:
/// each rail its own random tree and its own random placement. Deterministic for a seed.
pub fn random_rails(rails: usize, switches: usize, machines: usize, seed: u64) -> Topology {
    let per_rail: Vec<Topology> = (0..rails as u64)
        .map(|r| random_cluster(switches, machines, seed.wrapping_mul(31).wrapping_add(r)))
        .collect();
    join_rails(&per_rail)
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

    #[test]
    fn rails_are_separate_trees() {
        let t = rails(2, 3, 4, false);
        assert_eq!((t.size(), t.rails(), t.switches().len()), (16, 2, 8));
        assert_eq!(t.switches()[t.nic_switch(5, 1)].name, "b1");
        assert_eq!(t.switches()[t.nic_switch(5, 0)].name, "a1");
        let r = random_rails(3, 5, 20, 9);
        assert_eq!(r.rails(), 3);
        assert_eq!(r.edge_count(), 2 * (20 * 3 + 12));
    }
}
