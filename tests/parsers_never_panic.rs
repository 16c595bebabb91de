//! Topology files, seed 004 platform files and calibration profiles: arbitrary and
//! almost-valid text gives a value or an error, never a panic (the fuzz target `files` does the
//! same at scale). Link rates too (`input::parse_rate`; the fuzz target `names` at scale).

use pipecast::hetero::parse_platform;
use pipecast::input::{parse_rate, rate_name};
use pipecast::model::Profile;
use pipecast::plan::{self, TreeKind};
use pipecast::topology::{hosts, parse_topology};
use proptest::prelude::*;

/// JSON-shaped text built from the formats' own words, so that the parsers get past the syntax.
fn jsonish() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        Just("\"switches\"".to_string()),
        Just("\"links\"".to_string()),
        Just("\"machines\"".to_string()),
        Just("\"name\"".to_string()),
        Just("\"switch\"".to_string()),
        Just("\"gbps\"".to_string()),
        Just("\"ranks\"".to_string()),
        Just("\"nodes\"".to_string()),
        Just("\"source\"".to_string()),
        Just("\"edges\"".to_string()),
        Just("\"from\"".to_string()),
        Just("\"to\"".to_string()),
        Just("\"time\"".to_string()),
        Just("\"points\"".to_string()),
        Just("\"bytes\"".to_string()),
        Just("\"L_us\"".to_string()),
        Just("\"g_us\"".to_string()),
        Just("\"s0\"".to_string()),
        Just("\"s1\"".to_string()),
        Just("\"n0\"".to_string()),
        Just("\"p0\"".to_string()),
        Just("\"p1\"".to_string()),
        "-?[0-9]{1,3}(\\.[0-9])?".prop_map(|s| s),
        Just("null".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just(":".to_string()),
        Just(",".to_string()),
    ];
    proptest::collection::vec(word, 0..60).prop_map(|w| w.concat())
}

fn exercise(text: &str) {
    if let Ok(file) = parse_topology(text) {
        // Machines with several `ranks` become two-level plans (`hosts::expand`).
        // (It may refuse a file whose names clash with its own `host:N` / `N:rR` names.)
        if let Some(t) = (file.ranks() <= 64)
            .then(|| hosts::expand(&file, None).ok())
            .flatten()
        {
            for tree in [TreeKind::Linear, TreeKind::Binary, TreeKind::Multilane] {
                if let Ok(p) = plan::build(&t, 0, &tree, Some(4)) {
                    assert!(plan::check(&p, &t).spanning);
                }
            }
        }
    }
    let _ = parse_platform(text);
    let _ = Profile::parse(text);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_text(text in ".{0,300}") {
        exercise(&text);
    }

    #[test]
    fn json_shaped_text(text in jsonish()) {
        exercise(&text);
    }

    #[test]
    fn rates(text in ".{0,80}|[ 0-9.]{0,70}(|bit|kbit|mbit|gbit|tbit|kibit|tibit|bps|gbps|e3)") {
        if let Some(bits) = parse_rate(&text) {
            prop_assert!(bits > 0);
            prop_assert_eq!(parse_rate(&rate_name(bits)), Some(bits));
        }
    }

    #[test]
    fn machines_with_ranks(ranks in proptest::collection::vec("0|-?[1-9][0-9]{0,4}(\\.5)?|null|\"2\"", 1..5)) {
        let machines: Vec<String> = ranks
            .iter()
            .enumerate()
            .map(|(i, k)| format!(r#"{{"name": "n{i}", "switch": "s0", "ranks": {k}}}"#))
            .collect();
        let text = format!(r#"{{"switches": ["s0"], "machines": [{}]}}"#, machines.join(","));
        exercise(&text);
        if let Err(e) = parse_topology(&text) {
            prop_assert!(e.to_string().contains("\"ranks\" must be a whole number"), "{}", e);
        }
    }
}
