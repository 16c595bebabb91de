//! Every tree of [`TreeKind`], `hetero:NAME` included: the trees of `plan/` come from
//! [`plan::build`] and [`model::plan_for`], seed 004's heuristics (§3 and §4 of
//! `../shared/seeds/004_8086033551961233.txt`) from [`plan_on_topology`]. This is the one place
//! that joins the two, so that plan never depends on hetero; the communicator and the
//! `pipecast plan` command plan through it.

use super::cluster::plan_on_topology;
use crate::model::{self, Choice, ModelError, Profile};
use crate::plan::{self, Plan, PlanError, TreeKind};
use crate::topology::{MachineId, Topology};

/// Slice size for which `hetero:NAME` trees are built (the heuristics compare edge times, which
/// scale with it alike, so the tree rarely depends on it).
pub const PLAN_SLICE: u64 = 64 * 1024;

/// [`plan::build`] for every tree: `hetero:NAME` is heuristic NAME's tree for slices of
/// [`PLAN_SLICE`] bytes, as one lane — between the hosts' leaders when ranks share hosts
/// (`plan::two_level`).
pub fn build_plan(
    topology: &Topology,
    root: MachineId,
    tree: &TreeKind,
    segments: Option<u64>,
) -> Result<Plan, PlanError> {
    let TreeKind::Hetero(name) = tree else {
        return plan::build(topology, root, tree, segments);
    };
    let size = topology.size();
    if root >= size {
        return Err(PlanError::BadRoot { root, size });
    }
    if let Some(hosts) = topology.hosts() {
        let network = build_plan(hosts.network(), hosts.host_of(root), tree, segments)?;
        return Ok(plan::two_level::expand(
            hosts, root, &network, tree, segments,
        ));
    }
    let (lane, _) =
        plan_on_topology(topology, root, name, PLAN_SLICE).map_err(|e| PlanError::Hetero {
            name: name.clone(),
            reason: e.to_string(),
        })?;
    Ok(Plan::one_lane(tree.clone(), root, lane))
}

/// [`model::plan_for`] for every tree: `hetero:NAME` is built by [`build_plan`] and priced by
/// [`model::price`].
pub fn plan_for(
    topology: &Topology,
    root: MachineId,
    tree: &TreeKind,
    profile: &Profile,
    msize: u64,
) -> Result<Choice, ModelError> {
    if !matches!(tree, TreeKind::Hetero(_)) {
        return model::plan_for(topology, root, tree, profile, msize);
    }
    profile.validate()?;
    let plan = build_plan(topology, root, tree, None)?;
    Ok(model::price(plan, topology, profile, msize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gen;

    #[test]
    fn plan_refuses_hetero_trees_and_hetero_builds_them() {
        let t = gen::random_cluster(3, 6, 1);
        let grow: TreeKind = "hetero:grow".parse().unwrap();
        assert_eq!(
            plan::build(&t, 0, &grow, None),
            Err(PlanError::BuiltByHetero("grow".into()))
        );
        let p = build_plan(&t, 2, &grow, None).unwrap();
        assert_eq!(
            (p.tree.clone(), p.root, p.lanes.len()),
            (grow.clone(), 2, 1)
        );
        assert_eq!(p.lanes[0].root(), Some(2));
        assert!(matches!(
            build_plan(&t, 6, &grow, None),
            Err(PlanError::BadRoot { root: 6, size: 6 })
        ));
        let linear = build_plan(&t, 0, &TreeKind::Linear, None).unwrap();
        assert_eq!(linear, plan::build(&t, 0, &TreeKind::Linear, None).unwrap());
        let c = plan_for(&t, 0, &grow, &Profile::builtin("1gbit").unwrap(), 1 << 20).unwrap();
        assert_eq!(c.plan.tree, grow);
        assert!(c.segment_bytes > 0 && c.predicted_us > 0.0);
    }
}
