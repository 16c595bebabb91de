//! The `pipecast plan --json` contract (DESIGN.md), written by this one function for the tool
//! (`pipecast plan`) and the C API (`pipecast_plan_json`, with the segment size the
//! communicator's broadcast really uses). When ranks share hosts (`Topology::hosts`) it adds
//! `"hosts"` after `contention_free`: every host's `name`, `leader` and `ranks` (docs/planner.md).

use crate::plan::{self, Lane, Plan, TreeKind};
use crate::topology::Topology;
use serde_json::{json, Value};

/// What the contract reports about one plan.
pub struct PlanReport<'a> {
    /// The schedule's name (`binary`, `kbinomial:3`, `scatter-allgather`, …).
    pub tree: String,
    pub root: usize,
    pub lanes: &'a [Lane],
    /// The rail of each lane (`Plan::rails`; empty when all are on rail 0).
    pub rails: &'a [usize],
    pub topology: &'a Topology,
    /// (segment bytes, predicted µs) when priced for a message size.
    pub priced: Option<(u64, Option<f64>)>,
    /// (slice bytes, slices/s) of a seed 004 heuristic.
    pub throughput: Option<(u64, f64)>,
}

/// One line of compact JSON, fields in the contract's order, ending in a newline.
pub fn plan_json(r: &PlanReport) -> String {
    let lanes: Vec<Value> = r
        .lanes
        .iter()
        .enumerate()
        .map(|(i, l)| match r.rails.get(i) {
            // Lanes on rails (multilane with several NICs): which NIC the lane's transfers use.
            Some(rail) => json!({"parents": l.parents, "children": l.children, "rail": rail}),
            None => json!({"parents": l.parents, "children": l.children}),
        })
        .collect();
    // The checker reads the root, the lanes and their rails only.
    let checked = Plan {
        tree: TreeKind::Linear,
        root: r.root,
        lanes: r.lanes.to_vec(),
        rails: r.rails.to_vec(),
    };
    let mut fields = vec![
        ("tree", json!(r.tree)),
        ("root", json!(r.root)),
        ("ranks", json!(checked.size())),
        ("lanes", json!(lanes)),
        ("height", json!(checked.height())),
        ("max_degree", json!(checked.max_degree())),
        (
            "contention_free",
            json!(plan::check(&checked, r.topology).contention_free),
        ),
    ];
    if let Some(hosts) = r.topology.hosts() {
        // Two-level plans (plan::two_level): which ranks share a host and who leads it.
        let list: Vec<Value> = (0..hosts.count())
            .map(|h| {
                json!({
                    "name": hosts.name(h),
                    "leader": hosts.leader(h, r.root),
                    "ranks": hosts.ranks(h),
                })
            })
            .collect();
        fields.push(("hosts", json!(list)));
    }
    if let Some((segment, predicted)) = r.priced {
        fields.push(("segment_bytes", json!(segment)));
        if let Some(us) = predicted {
            fields.push(("predicted_us", json!((us * 10.0).round() / 10.0)));
        }
    }
    if let Some((slice, throughput)) = r.throughput {
        // Seed 004's one-port throughput in slices per second, shared switch links ignored.
        fields.push(("throughput", json!(throughput)));
        fields.push(("slice_bytes", json!(slice)));
    }
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{}", json!(k), v))
        .collect();
    format!("{{{}}}\n", body.join(","))
}
