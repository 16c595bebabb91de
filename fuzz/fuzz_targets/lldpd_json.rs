//! lldpcli JSON, Slurm topology.conf and hostlists from arbitrary text: errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::topology::{lldpd, slurm};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = lldpd::parse_neighbors(&text);
    let _ = slurm::parse_slurm_topology(&text);
    let _ = slurm::expand_hostlist(&text);
});
