//! Seed 004 heuristics and SSB(G): trees are spanning and use real edges, throughputs are
//! recomputed here independently, the LP bounds every one-port heuristic, the cut-generation LP
//! agrees with the direct program, and small platforms with a known optimum come out exactly.

use pipecast::hetero::{self, gen, Edge, Model, Platform, Tree, HEURISTICS};

fn platform(names: &[&str], edges: &[(usize, usize, f64, Option<f64>)]) -> Platform {
    Platform::new(
        names.iter().map(|s| s.to_string()).collect(),
        0,
        edges
            .iter()
            .map(|&(from, to, time, send)| Edge {
                from,
                to,
                time,
                send,
            })
            .collect(),
    )
    .unwrap()
}

/// Period recomputed from scratch: per node, the time it spends sending (one-port: Σ T,
/// multi-port: Σ send vs the longest T) and receiving (one-port), over every routed hop.
fn period_by_hand(p: &Platform, tree: &Tree, model: Model) -> f64 {
    let mut worst = 0.0f64;
    for u in 0..p.size() {
        let hops: Vec<&Edge> = tree
            .route
            .iter()
            .flatten()
            .map(|&e| &p.edges()[e])
            .collect();
        let sent: Vec<&&Edge> = hops.iter().filter(|e| e.from == u).collect();
        let recv: f64 = hops.iter().filter(|e| e.to == u).map(|e| e.time).sum();
        let node = match model {
            Model::OnePort => sent.iter().map(|e| e.time).sum::<f64>().max(recv),
            Model::MultiPort => {
                let send: f64 = sent.iter().map(|e| e.send.unwrap_or(e.time)).sum();
                sent.iter().map(|e| e.time).fold(send, f64::max)
            }
        };
        worst = worst.max(node);
    }
    worst
}

/// Checks the tree spans the platform from the source over existing edges (routes are paths
/// from the parent to the child; single edges except for binomial).
fn assert_spanning(p: &Platform, tree: &Tree, name: &str) {
    let n = p.size();
    assert_eq!(tree.parent.len(), n);
    for v in 0..n {
        if v == p.source() {
            assert_eq!(tree.parent[v], None, "{name}: source has a parent");
            continue;
        }
        let parent = tree.parent[v].unwrap_or_else(|| panic!("{name}: node {v} has no parent"));
        let route = &tree.route[v];
        assert!(!route.is_empty(), "{name}: empty route to {v}");
        if name != "binomial" {
            assert_eq!(route.len(), 1, "{name}: a tree edge is one platform edge");
        }
        let mut at = parent;
        for &e in route {
            assert_eq!(p.edges()[e].from, at, "{name}: route to {v} is not a path");
            at = p.edges()[e].to;
        }
        assert_eq!(at, v, "{name}: route ends elsewhere");
        // Following parents reaches the source.
        let (mut x, mut steps) = (v, 0);
        while let Some(q) = tree.parent[x] {
            x = q;
            steps += 1;
            assert!(steps <= n, "{name}: cycle");
        }
        assert_eq!(x, p.source());
    }
}

/// The direct program has |V|·|E| rows, each met to the solver's feasibility tolerance.
fn near(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
}

#[test]
fn star_has_one_tree() {
    // Leaves reach each other only through s (binomial routes b→c as b→s→c).
    let mut edges = Vec::new();
    for (v, t) in [(1, 1.0), (2, 2.0), (3, 3.0)] {
        edges.push((0, v, t, None));
        edges.push((v, 0, t, None));
    }
    let p = platform(&["s", "a", "b", "c"], &edges);
    let lp = hetero::ssb(&p).unwrap();
    assert!(close(lp.throughput, 1.0 / 6.0), "{}", lp.throughput);
    assert!(near(hetero::ssb_direct(&p).unwrap(), 1.0 / 6.0));
    for name in HEURISTICS {
        let tree = hetero::build(&p, name, Some(&lp)).unwrap();
        assert!(
            close(hetero::period(&p, &tree, Model::OnePort), 6.0),
            "{name}"
        );
    }
}

#[test]
fn chain_runs_at_its_slowest_link() {
    let p = platform(
        &["s", "a", "b", "c"],
        &[(0, 1, 1.0, None), (1, 2, 2.0, None), (2, 3, 3.0, None)],
    );
    let lp = hetero::ssb(&p).unwrap();
    assert!(close(lp.throughput, 1.0 / 3.0), "{}", lp.throughput);
    for name in HEURISTICS {
        let tree = hetero::build(&p, name, Some(&lp)).unwrap();
        assert!(
            close(hetero::throughput(&p, &tree, Model::OnePort), 1.0 / 3.0),
            "{name}"
        );
    }
}

/// s→a, s→b (T = 1) and a↔b (T = 2): every single tree has period 2 (TP 1/2), while two trees
/// (s→a→b and s→b→a, sharing the load) reach 3/4: x = n_sa = n_sb = 1/2, y = n_ab = n_ba = 1/4,
/// and TP ≤ x + y ≤ x + (1 − x)/2 ≤ 3/4 by the in-port of a.
#[test]
fn two_trees_beat_one() {
    let p = platform(
        &["s", "a", "b"],
        &[
            (0, 1, 1.0, None),
            (0, 2, 1.0, None),
            (1, 2, 2.0, None),
            (2, 1, 2.0, None),
        ],
    );
    let lp = hetero::ssb(&p).unwrap();
    assert!(close(lp.throughput, 0.75), "{}", lp.throughput);
    assert!(near(hetero::ssb_direct(&p).unwrap(), 0.75));
    for name in HEURISTICS {
        let tree = hetero::build(&p, name, Some(&lp)).unwrap();
        assert!(
            close(hetero::throughput(&p, &tree, Model::OnePort), 0.5),
            "{name}"
        );
    }
}

/// Seed 004 Fig. 2 / Fig. 3: u sends to v1, v2, v3; the multi-port period is
/// max(3·send_u, max T_u,vi) — (a) bounded by the serialized sends, (b) by the longest link.
#[test]
fn multiport_period_of_figures_2_and_3() {
    for (send, expected) in [(1.5, 4.5), (1.0, 4.0)] {
        let p = platform(
            &["u", "v1", "v2", "v3"],
            &[
                (0, 1, 2.0, Some(send)),
                (0, 2, 3.0, Some(send)),
                (0, 3, 4.0, Some(send)),
            ],
        );
        let tree = hetero::build(&p, "multiport-grow", None).unwrap();
        assert!(close(hetero::period(&p, &tree, Model::MultiPort), expected));
        assert!(close(period_by_hand(&p, &tree, Model::MultiPort), expected));
        assert!(close(hetero::period(&p, &tree, Model::OnePort), 9.0));
    }
}

/// The grow heuristics pick by weighted out-degree, not by edge weight: with s→a (1), s→b (1.5),
/// a→b (1), growing the cheapest out-degree gives the chain s→a→b (period 1), while a star
/// would take 2.5.
#[test]
fn grow_balances_out_degree() {
    let p = platform(
        &["s", "a", "b"],
        &[(0, 1, 1.0, None), (0, 2, 1.5, None), (1, 2, 1.0, None)],
    );
    let tree = hetero::build(&p, "grow", None).unwrap();
    assert_eq!(tree.parent, vec![None, Some(0), Some(1)]);
    let tree = hetero::build(&p, "prune-degree", None).unwrap();
    assert_eq!(tree.parent, vec![None, Some(0), Some(1)]);
    // prune-simple deletes the heaviest edge first: s→b goes too.
    let tree = hetero::build(&p, "prune-simple", None).unwrap();
    assert_eq!(tree.parent, vec![None, Some(0), Some(1)]);
}

/// Binomial on a chain s→a→b→c (plus back edges): ranks 0..3, transfers 0→2, 0→1, 2→3; the
/// transfer s→b crosses s→a and a→b, so s→a is loaded twice.
#[test]
fn binomial_counts_routed_load() {
    let mut edges = Vec::new();
    for (u, v, t) in [(0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0)] {
        edges.push((u, v, t, None));
        edges.push((v, u, t, None));
    }
    let p = platform(&["s", "a", "b", "c"], &edges);
    let tree = hetero::build(&p, "binomial", None).unwrap();
    assert_eq!(tree.parent, vec![None, Some(0), Some(0), Some(2)]);
    assert_eq!(tree.route[2].len(), 2);
    // s sends s→a twice (to a, and on the way to b): period 2.
    assert!(close(hetero::period(&p, &tree, Model::OnePort), 2.0));
    assert!(close(period_by_hand(&p, &tree, Model::OnePort), 2.0));
}

#[test]
fn random_platforms_lp_bounds_every_heuristic() {
    for seed in 0..12 {
        let nodes = 4 + (seed as usize % 6);
        let density = [0.1, 0.25, 0.5][seed as usize % 3];
        let p = if seed % 4 == 3 {
            gen::tiers(nodes + 4, seed).unwrap()
        } else {
            gen::random(nodes, density, seed).unwrap()
        };
        let lp = hetero::ssb(&p).unwrap();
        assert_eq!(lp.n.len(), p.edges().len());
        assert!(lp.n.iter().all(|&x| x >= 0.0));
        for name in HEURISTICS {
            let tree = hetero::build(&p, name, Some(&lp)).unwrap();
            assert_spanning(&p, &tree, name);
            for model in [Model::OnePort, Model::MultiPort] {
                let mine = hetero::period(&p, &tree, model);
                let theirs = period_by_hand(&p, &tree, model);
                assert!(
                    close(mine, theirs),
                    "seed {seed} {name} {model:?}: {mine} vs {theirs}"
                );
            }
            let tp = hetero::throughput(&p, &tree, Model::OnePort);
            assert!(
                tp <= lp.throughput * (1.0 + 1e-9),
                "seed {seed}: {name} {tp} > LP {}",
                lp.throughput
            );
        }
    }
}

#[test]
fn cut_generation_agrees_with_the_direct_program() {
    for seed in 0..8 {
        let p = gen::random(5 + seed as usize % 4, 0.3, 100 + seed).unwrap();
        let cuts = hetero::ssb(&p).unwrap().throughput;
        let direct = hetero::ssb_direct(&p).unwrap();
        assert!(
            (cuts - direct).abs() <= 1e-6 * direct,
            "seed {seed}: {cuts} vs {direct}"
        );
    }
}

#[test]
fn directed_platform_where_binomial_cannot_route() {
    // A directed star: every node is reachable from s, but the binomial transfer b→c has no path.
    let p = platform(
        &["s", "a", "b", "c"],
        &[(0, 1, 1.0, None), (0, 2, 1.0, None), (0, 3, 1.0, None)],
    );
    // 4 nodes: transfers 0→2, 0→1, 2→3.
    let err = hetero::build(&p, "binomial", None).unwrap_err().to_string();
    assert!(err.contains("\"b\" has no path to \"c\""), "{err}");
    assert!(hetero::build(&p, "no-such", None)
        .unwrap_err()
        .to_string()
        .contains("unknown heuristic"));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// On any small random platform every heuristic spans it and stays below the LP.
        #[test]
        fn heuristics_stay_below_the_lp(nodes in 2usize..9, density in 0.0f64..0.7, seed in any::<u64>()) {
            let p = gen::random(nodes, density, seed).unwrap();
            let lp = hetero::ssb(&p).unwrap();
            for name in HEURISTICS {
                let tree = hetero::build(&p, name, Some(&lp)).unwrap();
                assert_spanning(&p, &tree, name);
                let tp = 1.0 / period_by_hand(&p, &tree, Model::OnePort);
                prop_assert!(tp <= lp.throughput * (1.0 + 1e-9), "{} {} > {}", name, tp, lp.throughput);
            }
        }
    }
}

/// The LP's edge rates are a feasible one-port schedule and every destination can receive TP
/// through them (max flow ≥ TP): TP is achievable, not only an upper bound.
#[test]
fn lp_rates_are_feasible_and_carry_tp() {
    for seed in 0..6 {
        let p = gen::random(6 + seed as usize, 0.3, 500 + seed).unwrap();
        let lp = hetero::ssb(&p).unwrap();
        for u in 0..p.size() {
            let load = |edges: &[usize]| {
                edges
                    .iter()
                    .map(|&e| lp.n[e] * p.edges()[e].time)
                    .sum::<f64>()
            };
            assert!(
                load(p.out_edges(u)) <= 1.0 + 1e-7,
                "seed {seed}: out-port of {u}"
            );
            assert!(
                load(p.in_edges(u)) <= 1.0 + 1e-7,
                "seed {seed}: in-port of {u}"
            );
        }
        for w in 0..p.size() {
            if w != p.source() {
                let flow = hetero::maxflow::min_cut(&p, &lp.n, w, 0.0).value;
                assert!(
                    flow >= lp.throughput * (1.0 - 1e-6),
                    "seed {seed}: {flow} < {}",
                    lp.throughput
                );
            }
        }
    }
}
