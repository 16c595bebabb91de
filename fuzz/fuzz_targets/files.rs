//! Topology files, seed 004 platform files and calibration profiles from arbitrary text: a value
//! or an error that says what is wrong, never a panic. Whatever parses is planned on, which must
//! not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::hetero::parse_platform;
use pipecast::model::Profile;
use pipecast::plan::{self, TreeKind};
use pipecast::topology::parse_topology;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(t) = parse_topology(&text) {
        if t.size() <= 64 {
            for tree in [TreeKind::Linear, TreeKind::Binary, TreeKind::KBinomial(Some(2)), TreeKind::Multilane] {
                if let Ok(p) = plan::build(&t, 0, &tree, Some(4)) {
                    let _ = plan::check(&p, &t);
                }
            }
        }
    }
    let _ = parse_platform(&text);
    let _ = Profile::parse(&text);
});
