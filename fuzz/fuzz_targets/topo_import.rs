//! `pipecast topo import` from arbitrary text: MPICH's coordinates file and Slurm's
//! topology.conf, parsed and turned into topologies. Errors, never panics; whatever imports is
//! a valid topology that plans.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::plan::{self, TreeKind};
use pipecast::topology::{mpich_coords, slurm, Topology};

fn planned(t: &Topology) {
    if t.ranks() <= 64 {
        if let Ok(p) = plan::build(t, 0, &TreeKind::Binary, Some(4)) {
            let _ = plan::check(&p, t);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok((t, _notes)) = mpich_coords::import_mpich_coords(&text) {
        planned(&t);
    }
    if let Ok(conf) = slurm::parse_slurm_topology(&text) {
        if let Ok(t) = conf.to_topology() {
            planned(&t);
        }
    }
});
