//! Two-level plans: a contention-free tree between hosts, and a flat fan-out through memory
//! inside each host.
//!
//! When several ranks share a host they share its NIC (`topology::hosts`). Chaining through
//! them as if each were a machine (`net → r0 → r1 → r2 → net`) pays a full network hop per
//! local rank, and every rank of the host that forwards off it shares the NIC's directed edges
//! with the others — seed 000 §3's contention (`../shared/seeds/000_4ae1cf15394cd769.txt`).
//! So the plan becomes two-level:
//!
//! 1. per host one *leader* ([`Hosts::leader`]): the root on the root's host, the host's lowest
//!    rank elsewhere;
//! 2. between the leaders, the requested algorithm's tree on [`Hosts::network`] (one machine
//!    per host, whose link is the host's NIC), so only leaders cross a NIC and the tree keeps
//!    its guarantee (Algorithms 1 and 2 of seed 003 §4.1 are contention-free there);
//! 3. inside each host, every other rank is a direct child of its leader, in rank order and
//!    *after* the leader's network children, so the network stream is never delayed by them.
//!
//! The local ranks read each segment straight from the leader's buffer (shared memory), all
//! at once: the in-host stage costs about one memory copy per rank, concurrently, and
//! pipelines behind the network stream (`model::two_level` prices it), instead of a chain of
//! network hops. The result is ordinary [`Lane`]s over all ranks, one per lane of the
//! inter-host plan (`multilane` keeps its two), so the engine needs no change. O(P) after the
//! inter-host tree.

use super::{Lane, Plan, PlanError, TreeKind};
use crate::topology::{Hosts, MachineId};

/// Every host's leader for a broadcast from `root`, by host.
pub fn leaders(hosts: &Hosts, root: MachineId) -> Vec<MachineId> {
    (0..hosts.count()).map(|h| hosts.leader(h, root)).collect()
}

/// The plan over all ranks for `network`, a plan over [`Hosts::network`] rooted at the root's
/// host: each network edge `h → g` becomes `leader(h) → leader(g)`, and each leader then feeds
/// the other ranks of its host (module doc).
pub fn expand(hosts: &Hosts, root: MachineId, network: &Plan) -> Plan {
    let leaders = leaders(hosts, root);
    let lanes = network
        .lanes
        .iter()
        .map(|lane| {
            let mut children = vec![Vec::new(); hosts.size()];
            for (h, kids) in lane.children.iter().enumerate() {
                let leader = leaders[h];
                children[leader].extend(kids.iter().map(|&g| leaders[g]));
                children[leader].extend(hosts.ranks(h).iter().filter(|&&r| r != leader));
            }
            Lane::from_children(children)
        })
        .collect();
    Plan {
        tree: network.tree.clone(),
        root,
        lanes,
        rails: network.rails.clone(),
    }
}

/// The two-level plan of `tree` from `root`: `plan::build` on [`Hosts::network`] from the
/// root's host, then [`expand`]. `segments` is passed on (kbinomial's optimal k counts hosts).
pub fn build(
    hosts: &Hosts,
    root: MachineId,
    tree: &TreeKind,
    segments: Option<u64>,
) -> Result<Plan, PlanError> {
    let size = hosts.size();
    if root >= size {
        return Err(PlanError::BadRoot { root, size });
    }
    let network = super::build(hosts.network(), hosts.host_of(root), tree, segments)?;
    Ok(expand(hosts, root, &network))
}

/// The inter-host part of a plan over all ranks: its edges between ranks of different hosts,
/// as a plan over [`Hosts::network`] (host h = machine h) rooted at the root's host. For a
/// two-level plan this is the tree [`expand`] started from.
pub fn network(plan: &Plan, hosts: &Hosts) -> Plan {
    let lanes = plan
        .lanes
        .iter()
        .map(|lane| {
            let mut children = vec![Vec::new(); hosts.count()];
            for (p, kids) in lane.children.iter().enumerate() {
                for &c in kids {
                    if p < hosts.size() && c < hosts.size() && !is_local(hosts, p, c) {
                        children[hosts.host_of(p)].push(hosts.host_of(c));
                    }
                }
            }
            Lane::from_children(children)
        })
        .collect();
    Plan {
        tree: plan.tree.clone(),
        // (A malformed plan's out-of-range root is clamped: the checker reports it.)
        root: hosts.host_of(plan.root.min(hosts.size() - 1)),
        lanes,
        rails: plan.rails.clone(),
    }
}

/// Whether `p → c` stays inside one host (a memory copy, not a NIC transfer).
pub fn is_local(hosts: &Hosts, p: MachineId, c: MachineId) -> bool {
    hosts.host_of(p) == hosts.host_of(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{self, check};
    use crate::topology::{gen, hosts, Topology};

    /// `gen::hub` with the given ranks per machine (cycled over the machines).
    fn hub(per: &[usize]) -> Topology {
        let mut file = gen::hub(2, 3, true);
        let n = file.size();
        let machines: Vec<_> = file
            .machines()
            .iter()
            .enumerate()
            .map(|(i, m)| crate::topology::Machine {
                ranks: per[i % per.len()],
                ..m.clone()
            })
            .collect();
        file = Topology::new(file.switches().to_vec(), file.links().to_vec(), machines).unwrap();
        assert_eq!(file.size(), n);
        hosts::expand(&file, None).unwrap()
    }

    const TREES: [&str; 9] = [
        "linear",
        "binary",
        "kary:3",
        "kbinomial:2",
        "multilane",
        "flat",
        "binomial",
        "naive-linear",
        "naive-binary",
    ];

    /// Every property the brief asks of a two-level plan.
    fn assert_two_level(t: &Topology, plan: &Plan, network_tree: &Plan) {
        let h = t.hosts().unwrap();
        let report = check(plan, t);
        assert!(
            report.spanning && report.rooted && report.acyclic && report.consistent,
            "{report:?}"
        );
        let leaders = leaders(h, plan.root);
        assert_eq!(leaders[h.host_of(plan.root)], plan.root);
        for (host, &l) in leaders.iter().enumerate() {
            if host != h.host_of(plan.root) {
                assert_eq!(l, h.ranks(host)[0]);
            }
        }
        for lane in &plan.lanes {
            for (p, kids) in lane.children.iter().enumerate() {
                let mut seen_local = false;
                for &c in kids {
                    if is_local(h, p, c) {
                        // Local children come from the leader, after its network children.
                        assert_eq!(p, leaders[h.host_of(p)], "{p} -> {c}");
                        assert_ne!(c, p);
                        seen_local = true;
                    } else {
                        // Only leaders cross a NIC, in both directions.
                        assert!(!seen_local, "network child {c} after local ones of {p}");
                        assert_eq!(p, leaders[h.host_of(p)]);
                        assert_eq!(c, leaders[h.host_of(c)]);
                    }
                }
                let local: Vec<usize> = kids
                    .iter()
                    .copied()
                    .filter(|&c| is_local(h, p, c))
                    .collect();
                let mut sorted = local.clone();
                sorted.sort_unstable();
                assert_eq!(local, sorted, "local children in rank order");
                if p == leaders[h.host_of(p)] {
                    assert_eq!(local.len(), h.ranks(h.host_of(p)).len() - 1);
                }
            }
        }
        assert_eq!(&network(plan, h), network_tree);
    }

    #[test]
    fn every_tree_becomes_two_level_on_mixed_hosts() {
        for per in [&[1usize, 2, 3][..], &[2], &[3, 1], &[1, 1, 4]] {
            let t = hub(per);
            let h = t.hosts().unwrap();
            for name in TREES {
                let tree: TreeKind = name.parse().unwrap();
                for root in [0, 1, t.size() - 1, t.size() / 2] {
                    let plan = plan::build(&t, root, &tree, Some(8)).unwrap();
                    let net = plan::build(h.network(), h.host_of(root), &tree, Some(8)).unwrap();
                    assert_eq!(plan.tree, net.tree);
                    assert_eq!(plan.lanes.len(), net.lanes.len());
                    assert_two_level(&t, &plan, &net);
                    // Contention-free between hosts is contention-free over all ranks.
                    assert_eq!(
                        check(&plan, &t).contention_free,
                        check(&net, h.network()).contention_free,
                        "{name} {per:?} root {root}"
                    );
                }
            }
        }
    }

    #[test]
    fn uniform_ranks_keep_the_machines_tree() {
        // K ranks on every machine: the tree between hosts is the K = 1 tree.
        let file = gen::random_cluster(4, 12, 3);
        let t = hosts::expand(&file, Some(3)).unwrap();
        for tree in [TreeKind::Linear, TreeKind::Binary] {
            let machines = plan::build(&file, 2, &tree, None).unwrap();
            let plan = plan::build(&t, 6, &tree, None).unwrap();
            assert_eq!(network(&plan, t.hosts().unwrap()).lanes, machines.lanes);
        }
    }

    #[test]
    fn linear_example_reads_as_the_issue_says() {
        // Two machines with 3 ranks each, linear: 0 → 3 over the network, then 0 → 1, 2 and
        // 3 → 4, 5 through memory (no more net → r0 → r1 → r2 → net).
        let t = hosts::expand(&Topology::single_switch(2), Some(3)).unwrap();
        let plan = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
        assert_eq!(
            plan.lanes[0].children,
            [vec![3, 1, 2], vec![], vec![], vec![4, 5], vec![], vec![]]
        );
        assert!(check(&plan, &t).ok());
        // Root 4 leads its host; the other host is led by its lowest rank.
        let plan = plan::build(&t, 4, &TreeKind::Linear, None).unwrap();
        assert_eq!(
            plan.lanes[0].children,
            [vec![1, 2], vec![], vec![], vec![], vec![0, 3, 5], vec![]]
        );
    }

    #[test]
    fn one_host_is_a_fan_out_from_the_root() {
        let names = ["box"; 5];
        let keys: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let t = hosts::host_topology(None, &names, &keys).unwrap();
        for name in TREES {
            let plan = plan::build(&t, 3, &name.parse().unwrap(), None).unwrap();
            for lane in &plan.lanes {
                assert_eq!(lane.children[3], [0, 1, 2, 4], "{name}");
                assert_eq!(lane.height(), 1);
            }
            assert!(check(&plan, &t).ok(), "{name}");
        }
    }

    #[test]
    fn bad_roots_are_refused() {
        let t = hub(&[2]);
        assert_eq!(
            plan::build(&t, 99, &TreeKind::Linear, None),
            Err(PlanError::BadRoot {
                root: 99,
                size: t.size()
            })
        );
    }
}
