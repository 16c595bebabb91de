//! Seed 003 Table 3 (`../shared/seeds/003_f72e5e0868946953.txt` §5.1): optimal segment sizes
//! predicted by the extended parameterized LogP model for P = 32, message sizes 8 KB … 2 MB,
//! on both built-in profiles (seed 003 Table 2), printed next to the paper's own numbers.
//!
//! Linear tree: formula (1) depends on P only, so this is directly comparable with the paper's
//! "Model" column. Binary tree: formula (2) depends on the tree's shape; the paper's tree came
//! from Algorithm 2 on its topology (4), which we do not have, so we use a balanced heap-shaped
//! binary tree over 32 ranks as a stand-in and label it so.
//!
//! Run: `cargo run --release --example table3_segments`

use pipecast::model::{self, Profile};
use pipecast::plan::{self, Lane, Plan, TreeKind};
use pipecast::topology::Topology;

/// The paper's Table 3 (topology (4)), copied verbatim as reference data:
/// (message size, [100M linear model, actual, 100M binary model, actual,
///                 1G linear model, actual, 1G binary model, actual]).
const PAPER_TABLE3: [(u64, [u64; 8]); 9] = [
    (8 << 10, [256, 256, 256, 512, 256, 512, 512, 1024]),
    (16 << 10, [256, 512, 512, 512, 256, 512, 1024, 2048]),
    (32 << 10, [256, 512, 1024, 1024, 512, 2048, 2048, 2048]),
    (64 << 10, [256, 512, 1024, 1024, 1024, 2048, 4096, 4096]),
    (128 << 10, [512, 512, 1024, 1024, 1024, 2048, 4096, 8192]),
    (256 << 10, [512, 1024, 1024, 2048, 2048, 2048, 4096, 8192]),
    (512 << 10, [1024, 1024, 1024, 4096, 4096, 2048, 8192, 8192]),
    (1 << 20, [1024, 2048, 2048, 4096, 4096, 4096, 8192, 16384]),
    (2 << 20, [1024, 1024, 4096, 4096, 4096, 4096, 8192, 16384]),
];

const P: usize = 32;

fn heap_binary() -> Plan {
    let children = (0..P)
        .map(|i| (2 * i + 1..=2 * i + 2).filter(|&c| c < P).collect())
        .collect();
    Plan {
        tree: TreeKind::Binary,
        root: 0,
        lanes: vec![Lane::from_children(children)],
        rails: Vec::new(),
    }
}

fn size(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{}MB", b >> 20)
    } else if b >= 1 << 10 {
        format!("{}KB", b >> 10)
    } else {
        format!("{b}B")
    }
}

fn main() {
    let topology = Topology::single_switch(P);
    let linear = plan::build(&topology, 0, &TreeKind::Linear, None).expect("linear plan");
    let binary = heap_binary();
    let profiles = [
        ("100 Mbit/s", Profile::builtin("100mbit").unwrap(), 0),
        ("1 Gbit/s", Profile::builtin("1gbit").unwrap(), 4),
    ];
    for (name, profile, col) in &profiles {
        println!("\n{name} (seed 003 Table 2 profile), P = {P}");
        println!(
            "| msize | linear: ours | paper model | paper actual | predicted µs | binary*: ours | paper model | paper actual |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        let (mut agree_lin, mut agree_bin) = (0, 0);
        for (msize, paper) in PAPER_TABLE3 {
            let (seg_l, t_l) = model::choose_segment(&linear, profile, msize);
            let (seg_b, _) = model::choose_segment(&binary, profile, msize);
            agree_lin += usize::from(seg_l == paper[*col]);
            agree_bin += usize::from(seg_b == paper[col + 2]);
            println!(
                "| {} | {} | {} | {} | {:.0} | {} | {} | {} |",
                size(msize),
                size(seg_l),
                size(paper[*col]),
                size(paper[col + 1]),
                t_l,
                size(seg_b),
                size(paper[col + 2]),
                size(paper[col + 3]),
            );
        }
        println!(
            "linear: ours = paper's model in {agree_lin}/9 rows; binary* (heap-shaped stand-in): {agree_bin}/9"
        );
    }
}
