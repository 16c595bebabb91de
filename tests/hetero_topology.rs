//! `hetero::plan_on_topology`: seed 004's heuristics on a switched cluster.

use pipecast::hetero::{self, HEURISTICS};
use pipecast::topology::{self, gen};

#[test]
fn every_heuristic_gives_a_spanning_lane() {
    let topo = gen::random_cluster(4, 9, 5);
    for root in [0, 4] {
        for name in HEURISTICS {
            let (lane, tp) = hetero::plan_on_topology(&topo, root, name, 65536).unwrap();
            assert_eq!(lane.parents.len(), 9);
            assert_eq!(lane.root(), Some(root), "{name}");
            assert_eq!(lane.parents.iter().filter(|p| p.is_none()).count(), 1);
            // The period is at least one slice over a 1 Gbit/s link (default bandwidth).
            let slice_time = 65536.0 * 8.0 / 1e9;
            assert!(
                tp > 0.0 && tp <= 1.0 / slice_time * (1.0 + 1e-9),
                "{name}: {tp}"
            );
        }
    }
}

#[test]
fn bottleneck_bandwidth_sets_edge_times() {
    let text = r#"{"switches": ["s0", "s1"], "links": [{"a": "s0", "b": "s1", "gbps": 1}],
        "machines": [{"name": "n0", "switch": "s0", "gbps": 10}, {"name": "n1", "switch": "s0", "gbps": 10},
                     {"name": "n2", "switch": "s1", "gbps": 10}]}"#;
    let topo = topology::parse_topology(text).unwrap();
    let p = hetero::platform_of_topology(&topo, 0, 1_000_000).unwrap();
    let time = |u: usize, v: usize| {
        p.edges()
            .iter()
            .find(|e| e.from == u && e.to == v)
            .unwrap()
            .time
    };
    assert!((time(0, 1) - 8e6 / 10e9).abs() < 1e-15);
    assert!((time(0, 2) - 8e6 / 1e9).abs() < 1e-15);
    // grow: n0 sends to n1 (fast), the slow crossing to n2 is best made once, by either.
    let (lane, tp) = hetero::plan_on_topology(&topo, 0, "grow", 1_000_000).unwrap();
    assert_eq!(lane.parents[0], None);
    assert!((tp - 1e9 / 8e6).abs() < 1e-6 * tp, "{tp}");
}

#[test]
fn bad_arguments_are_errors() {
    let topo = gen::random_cluster(2, 3, 1);
    assert!(hetero::plan_on_topology(&topo, 3, "grow", 1000)
        .unwrap_err()
        .to_string()
        .contains("root 3"));
    assert!(hetero::plan_on_topology(&topo, 0, "grow", 0).is_err());
    assert!(hetero::plan_on_topology(&topo, 0, "nope", 1000)
        .unwrap_err()
        .to_string()
        .contains("unknown heuristic"));
}
