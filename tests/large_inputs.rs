//! Issue 14: name lookups are linear, not quadratic. Each test runs a size where the old
//! scans (one pass over every switch or machine per name) did ~10⁹ string comparisons and took
//! minutes in a debug build, while hash lookups take about a second. Timing decides nothing
//! here: a quadratic regression shows as a test that runs for minutes (cargo prints "has been
//! running for over 60 seconds"), and `bench/` has the 100k-machine timings (docs/hostile.md).

use pipecast::plan::{self, TreeKind};
use pipecast::topology::discover::{assemble, Observation, SwitchLayer};
use pipecast::topology::slurm::parse_slurm_topology;
use pipecast::topology::{gen, parse_topology, to_json};

const MACHINES: usize = 40_000;

/// A file with as many switches as machines: the topology parser's switch lookups per link
/// and per machine, then Algorithm 1 (linear) and the contention check over it.
#[test]
fn a_topology_of_40k_switches_parses_and_plans_linearly() {
    let t = gen::random_cluster(MACHINES, MACHINES, 7);
    let text = to_json(&t).to_string();
    let back = parse_topology(&text).unwrap();
    assert_eq!((back.switches().len(), back.size()), (MACHINES, MACHINES));
    let p = plan::build(&back, 0, &TreeKind::Linear, None).unwrap();
    assert_eq!(p.size(), MACHINES);
    assert!(plan::check(&p, &back).ok());
}

/// A Slurm topology.conf of 400 leaf switches × 100 nodes placing 40k silent ranks: one lookup
/// per rank in the layer, not a scan of every switch's node list.
#[test]
fn a_slurm_layer_places_40k_ranks() {
    let leaves = MACHINES / 100;
    let mut conf = format!("SwitchName=top Switches=leaf[0-{}]\n", leaves - 1);
    for l in 0..leaves {
        conf += &format!("SwitchName=leaf{l} Nodes=n[{}-{}]\n", l * 100, l * 100 + 99);
    }
    let layer = SwitchLayer::Slurm(parse_slurm_topology(&conf).unwrap());
    let observations: Vec<Observation> = (0..MACHINES)
        .map(|r| Observation::unheard(&format!("n{r}")))
        .collect();
    let found = assemble(&observations, &layer).unwrap();
    assert_eq!(found.topology.size(), MACHINES);
    let last = &found.topology.machines()[MACHINES - 1];
    assert_eq!(found.topology.switches()[last.switch].name, "leaf399");
}

/// Seed 002's multi-lane trees on 3,000 machines, well past the 128 senders the swap matching
/// weighs per receiver (its window; the release build plans 100k machines in ~3 s). Smaller
/// than the others: the matching evaluates 128 switch paths per receiver, slow in a debug build.
#[test]
fn multilane_plans_beyond_its_matching_window() {
    let t = gen::random_cluster(30, 3_000, 3);
    let p = plan::build(&t, 5, &TreeKind::Multilane, None).unwrap();
    assert_eq!((p.lanes.len(), p.size()), (2, 3_000));
    for lane in &p.lanes {
        assert_eq!(lane.root(), Some(5));
        assert!(lane.parents.iter().filter(|p| p.is_none()).count() == 1);
    }
}
