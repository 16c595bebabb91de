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
//! 3. inside each host, every other rank is a direct child of its leader (over sockets at
//!    most [`SOCKET_FAN_OUT`] of them, below), in rank order and *after* the leader's network
//!    children, so the network stream is never delayed by them.
//!
//! The local ranks read each segment straight from the leader's buffer (shared memory), all
//! at once: the in-host stage costs about one memory copy per rank, concurrently, and
//! pipelines behind the network stream (`model::two_level` prices it), instead of a chain of
//! network hops. The result is ordinary [`Lane`]s over all ranks, one per lane of the
//! inter-host plan (`multilane` keeps its two), so the engine needs no change. O(P) after the
//! inter-host tree.
//!
//! A host whose ranks talk through sockets (no shared memory: [`InHost::Sockets`]) and are
//! more than the connection bound + 1 ([`Hosts::tree_inside`]) is fed by a tree instead of
//! the fan-out, which over sockets would be a flat tree whose root opens a connection to
//! every rank of the host, beyond what the link keeps: the requested tree over the host's
//! ranks as machines of one switch, from its leader ([`inside`]; a chain for a tree that
//! cannot be built there). A job of one such host is that tree alone. Every rank plans
//! alike: the facts ([`Hosts::in_host`]) come from agreed settings.
//!
//! A host over sockets of at most the bound + 1 ranks keeps the fan-out, capped: its leader
//! feeds at most [`SOCKET_FAN_OUT`] ranks directly and its first children feed the rest, one
//! hop further ([`fan_out`]), so the leader's streams do not grow with the host up to the
//! bound. Through memory the fan-out stays flat (a reader there costs the leader no stream
//! of its own in the data path, and nothing is copied twice).

use super::{Lane, Plan, PlanError, TreeKind};
use crate::topology::{Hosts, InHost, MachineId, Topology};

/// The most ranks a leader feeds directly on a host whose ranks talk through sockets and keep
/// the fan-out (at most the connection bound + 1 ranks, [`Hosts::tree_inside`] false): with
/// the default bound of 16 a host of 13 to 17 ranks has its last 1 to 5 ranks fed by the
/// leader's first children. 11 keeps a rank's peak descriptors at P = 16 (a base of about 17
/// plus its streams) within 4 of P = 64's and 256's (24, 27), where a host is fed by a tree;
/// caps of 4 and 8 were measured slower (docs/scale.md, "Connections only on tree edges").
pub const SOCKET_FAN_OUT: usize = 11;

/// Who feeds host h's ranks other than `leader` when they are not fed by a tree: `(parent,
/// children)` pairs, the leader's first. Through memory the leader feeds them all. Through
/// sockets it feeds the first [`SOCKET_FAN_OUT`] in rank order, and the rest, in rank order,
/// go in contiguous runs to its first children, spread evenly (the first children get each
/// segment soonest): every rank fed once, at most two hops from the leader.
pub fn fan_out(hosts: &Hosts, h: usize, leader: MachineId) -> Vec<(MachineId, Vec<MachineId>)> {
    let others: Vec<MachineId> = hosts
        .ranks(h)
        .iter()
        .copied()
        .filter(|&r| r != leader)
        .collect();
    let cap = match hosts.in_host(h) {
        InHost::Memory => others.len(),
        InHost::Sockets { .. } => SOCKET_FAN_OUT.max(1),
    };
    if others.len() <= cap {
        return vec![(leader, others)];
    }
    let (direct, rest) = others.split_at(cap);
    let (each, extra) = (rest.len() / cap, rest.len() % cap);
    let mut fed = vec![(leader, direct.to_vec())];
    let mut at = 0;
    for (i, &child) in direct.iter().enumerate() {
        let n = each + usize::from(i < extra);
        if n > 0 {
            fed.push((child, rest[at..at + n].to_vec()));
        }
        at += n;
    }
    fed
}

/// Every host's leader for a broadcast from `root`, by host.
pub fn leaders(hosts: &Hosts, root: MachineId) -> Vec<MachineId> {
    (0..hosts.count()).map(|h| hosts.leader(h, root)).collect()
}

/// The tree that feeds host h's ranks from `leader` when they are fed by a tree
/// ([`Hosts::tree_inside`]): `tree` over the host's ranks as machines of one switch (machine
/// i = the host's i-th rank), rooted at the leader's index; a chain when `tree` cannot be
/// built there (`auto`, `multicast`, `hetero:NAME`, too many ranks for its planner).
pub fn inside(
    hosts: &Hosts,
    h: usize,
    leader: MachineId,
    tree: &TreeKind,
    segments: Option<u64>,
) -> Plan {
    let ranks = hosts.ranks(h);
    let at = ranks
        .iter()
        .position(|&r| r == leader)
        .expect("the leader is a rank of its host");
    let one = Topology::single_switch(ranks.len());
    let built = match tree {
        TreeKind::Auto | TreeKind::Multicast | TreeKind::Hetero(_) => None,
        tree => super::build(&one, at, tree, segments).ok(),
    };
    built.unwrap_or_else(|| Plan::one_lane(TreeKind::Linear, at, super::linear::build(&one, at)))
}

/// The plan over all ranks for `network`, a plan over [`Hosts::network`] rooted at the root's
/// host: each network edge `h → g` becomes `leader(h) → leader(g)`, and each leader then feeds
/// the other ranks of its host: by its fan-out ([`fan_out`]: all of them directly through
/// memory, capped at [`SOCKET_FAN_OUT`] over sockets), or through the tree [`inside`] builds of
/// `tree` when the host's ranks talk through sockets and are many ([`Hosts::tree_inside`];
/// its lane l feeds network lane l, cycling when it has fewer).
pub fn expand(
    hosts: &Hosts,
    root: MachineId,
    network: &Plan,
    tree: &TreeKind,
    segments: Option<u64>,
) -> Plan {
    let leaders = leaders(hosts, root);
    let trees: Vec<Option<Plan>> = (0..hosts.count())
        .map(|h| {
            hosts
                .tree_inside(h)
                .then(|| inside(hosts, h, leaders[h], tree, segments))
        })
        .collect();
    let lanes = network
        .lanes
        .iter()
        .enumerate()
        .map(|(l, lane)| {
            let mut children = vec![Vec::new(); hosts.size()];
            for (h, kids) in lane.children.iter().enumerate() {
                let leader = leaders[h];
                children[leader].extend(kids.iter().map(|&g| leaders[g]));
                let ranks = hosts.ranks(h);
                match &trees[h] {
                    None => {
                        for (p, kids) in fan_out(hosts, h, leader) {
                            children[p].extend(kids);
                        }
                    }
                    Some(t) => {
                        let local = &t.lanes[l % t.lanes.len()];
                        for (i, kids) in local.children.iter().enumerate() {
                            children[ranks[i]].extend(kids.iter().map(|&k| ranks[k]));
                        }
                    }
                }
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
    if hosts.one_tree() {
        // One host fed by a tree: that tree is the plan (ranks 0.. are the host's, in order).
        return super::build(&Topology::single_switch(size), root, tree, segments);
    }
    let network = super::build(hosts.network(), hosts.host_of(root), tree, segments)?;
    Ok(expand(hosts, root, &network, tree, segments))
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

    /// `n` ranks on each of `hosts` hosts of one switch, talking through sockets under a
    /// connection bound of `bound`.
    fn socket_hosts(hosts: usize, n: usize, bound: usize) -> Topology {
        hosts::expand(&Topology::single_switch(hosts), Some(n))
            .unwrap()
            .with_in_host(|_| crate::topology::InHost::Sockets {
                max_connections: bound,
            })
    }

    #[test]
    fn one_host_over_sockets_beyond_the_bound_is_the_tree_itself() {
        for name in TREES {
            let tree: TreeKind = name.parse().unwrap();
            for root in [0, 5, 9] {
                // 10 ranks, a bound of 8: the fan-out would need 9 connections.
                let t = socket_hosts(1, 10, 8);
                assert!(t.hosts().unwrap().one_tree());
                let plan = plan::build(&t, root, &tree, Some(8)).unwrap();
                let want = plan::build(&Topology::single_switch(10), root, &tree, Some(8));
                assert_eq!(plan, want.unwrap(), "{name} root {root}");
                assert!(check(&plan, &t).ok(), "{name}");
                // Up to the bound the fan-out stays (faster there).
                let t = socket_hosts(1, 10, 9);
                assert!(!t.hosts().unwrap().tree_inside(0));
                let plan = plan::build(&t, root, &tree, Some(8)).unwrap();
                for lane in &plan.lanes {
                    assert_eq!(lane.children[root].len(), 9, "{name}");
                }
            }
        }
    }

    #[test]
    fn a_fan_out_over_sockets_is_capped_two_hops_deep() {
        // Hosts of 2 to 17 ranks over sockets under the default bound of 16 (the fan-out
        // applies), one host or two: every rank fed once, the leader feeding at most
        // SOCKET_FAN_OUT of its host directly (after its network children), the rest fed by
        // its first children, spread evenly, at most two hops inside a host.
        for hosts_n in [1, 2] {
            for n in 2..=17 {
                let t = socket_hosts(hosts_n, n, 16);
                let h = t.hosts().unwrap();
                assert!(!h.tree_inside(0));
                for name in TREES {
                    let tree: TreeKind = name.parse().unwrap();
                    for root in [0, 1, n - 1, t.size() - 1] {
                        let plan = plan::build(&t, root, &tree, Some(8)).unwrap();
                        let what = format!("{name} {hosts_n}x{n} root {root}");
                        let report = check(&plan, &t);
                        assert!(
                            report.spanning && report.rooted && report.acyclic,
                            "{what}: {report:?}"
                        );
                        let leaders = leaders(h, root);
                        for lane in &plan.lanes {
                            for (host, &leader) in leaders.iter().enumerate() {
                                let local = |p: usize| -> Vec<usize> {
                                    let kids = &lane.children[p];
                                    kids.iter()
                                        .copied()
                                        .filter(|&c| is_local(h, p, c))
                                        .collect()
                                };
                                let direct = local(leader);
                                let others = n - 1;
                                assert_eq!(direct.len(), others.min(SOCKET_FAN_OUT), "{what}");
                                // Network children first, then the local ones.
                                let kids = &lane.children[leader];
                                let first_local = kids.len() - direct.len();
                                assert!(kids[first_local..]
                                    .iter()
                                    .all(|&c| is_local(h, leader, c)));
                                let rest = others - direct.len();
                                let mut fed = direct.len();
                                for (i, &c) in direct.iter().enumerate() {
                                    let second = local(c);
                                    // Spread evenly over the first children.
                                    let want = rest / SOCKET_FAN_OUT
                                        + usize::from(i < rest % SOCKET_FAN_OUT);
                                    assert_eq!(second.len(), want, "{what} child {c}");
                                    assert!(second.iter().all(|&g| local(g).is_empty()));
                                    assert!(!lane.children[c].iter().any(|&g| !is_local(h, c, g)));
                                    fed += second.len();
                                }
                                // Every other rank of the host within two hops.
                                assert_eq!(fed, others, "{what} host {host}");
                            }
                        }
                    }
                }
            }
        }
        // 16 ranks from root 0: 0 feeds 1..=11, and 1, 2, 3, 4 feed 12, 13, 14, 15.
        let t = socket_hosts(1, 16, 16);
        let plan = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
        let c = &plan.lanes[0].children;
        assert_eq!(c[0], (1..=11).collect::<Vec<_>>());
        assert_eq!([&c[1], &c[2], &c[3], &c[4]], [&[12], &[13], &[14], &[15]]);
        assert!(c[5..].iter().all(Vec::is_empty));
        // Through memory the fan-out stays flat.
        let memory = hosts::expand(&Topology::single_switch(1), Some(17)).unwrap();
        let plan = plan::build(&memory, 3, &TreeKind::Binary, None).unwrap();
        assert_eq!(plan.lanes[0].children[3].len(), 16);
        assert_eq!(plan.height(), 1);
    }

    #[test]
    fn hosts_over_sockets_beyond_the_bound_are_fed_by_trees() {
        // 3 hosts of 8 ranks, a bound of 3: inside every host the requested tree from its
        // leader; only leaders cross a NIC; no rank has more local children than its tree.
        let t = socket_hosts(3, 8, 3);
        let h = t.hosts().unwrap();
        assert!((0..3).all(|host| h.tree_inside(host)));
        for name in TREES {
            let tree: TreeKind = name.parse().unwrap();
            for root in [0, 7, 12, 23] {
                let plan = plan::build(&t, root, &tree, Some(8)).unwrap();
                let net = plan::build(h.network(), h.host_of(root), &tree, Some(8)).unwrap();
                assert_eq!(network(&plan, h), net, "{name} root {root}");
                let report = check(&plan, &t);
                assert!(report.spanning && report.rooted && report.acyclic, "{name}");
                let leaders = leaders(h, root);
                for (l, lane) in plan.lanes.iter().enumerate() {
                    for (host, &leader) in leaders.iter().enumerate() {
                        let inner = inside(h, host, leader, &tree, Some(8));
                        let local = &inner.lanes[l % inner.lanes.len()];
                        for (i, &r) in h.ranks(host).iter().enumerate() {
                            let mine: Vec<usize> = lane.children[r]
                                .iter()
                                .copied()
                                .filter(|&c| is_local(h, r, c))
                                .collect();
                            let want: Vec<usize> = local.children[i]
                                .iter()
                                .map(|&k| h.ranks(host)[k])
                                .collect();
                            assert_eq!(mine, want, "{name} root {root} rank {r}");
                            // Network children only at leaders.
                            if lane.children[r].iter().any(|&c| !is_local(h, r, c)) {
                                assert_eq!(r, leader);
                            }
                        }
                    }
                }
                if tree == TreeKind::Linear {
                    // A chain inside every host: at most one local child per rank.
                    for r in 0..24 {
                        let local = plan.lanes[0].children[r]
                            .iter()
                            .filter(|&&c| is_local(h, r, c))
                            .count();
                        assert!(local <= 1, "rank {r}");
                    }
                }
            }
        }
        // A restriction (a communicator of some ranks) keeps how its hosts talk.
        let members: Vec<usize> = (0..24).filter(|r| r % 8 < 5).collect();
        let view = t.restrict(&members).unwrap();
        let vh = view.hosts().unwrap();
        assert!((0..3).all(|host| vh.tree_inside(host)));
        let fewer: Vec<usize> = (0..24).filter(|r| r % 8 < 4).collect();
        let view = t.restrict(&fewer).unwrap();
        assert!(!view.hosts().unwrap().tree_inside(0));
        let memory = hosts::expand(&Topology::single_switch(3), Some(8)).unwrap();
        assert!(!memory.hosts().unwrap().tree_inside(0));
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
