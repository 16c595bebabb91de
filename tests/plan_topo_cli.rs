//! `pipecast topo` end to end: generate, check, and fail clearly on bad input.

mod common;
use common::{pipecast, EXE};

use std::process::Command;

#[test]
fn generate_then_check() {
    let dir = std::env::temp_dir().join(format!("pipecast-topo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("random.json");
    let file = file.to_str().unwrap();
    let out = pipecast(&[
        "topo",
        "gen",
        "random",
        "--switches",
        "5",
        "--machines",
        "40",
        "--seed",
        "3",
        "-o",
        file,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = pipecast(&["topo", "check", file]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("5 switches, 4 links, 40 machines"), "{text}");
    // Same seed, same file on stdout.
    let out = pipecast(&[
        "topo",
        "gen",
        "random",
        "--switches",
        "5",
        "--machines",
        "40",
        "--seed",
        "3",
    ]);
    assert_eq!(out.stdout, std::fs::read(file).unwrap());
    let out = pipecast(&[
        "topo",
        "gen",
        "hub",
        "--edges",
        "2",
        "--per-switch",
        "3",
        "--interleaved",
    ]);
    let t = pipecast::topology::parse_topology(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(t.size(), 9);
    assert_eq!(t.switch_of(4), 1);
    let out = pipecast(&["topo", "gen", "single", "--machines", "6"]);
    let t = pipecast::topology::parse_topology(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!((t.size(), t.switches().len()), (6, 1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_fails_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("pipecast-topo-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cycle.json");
    std::fs::write(
        &file,
        r#"{"switches":["a","b","c"],"links":[["a","b"],["b","c"],["c","a"]],
            "machines":[{"name":"x","switch":"a"}]}"#,
    )
    .unwrap();
    let out = pipecast(&["topo", "check", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cycle") && err.contains("cycle.json"), "{err}");
    let out = pipecast(&[
        "topo",
        "gen",
        "random",
        "--switches",
        "0",
        "--machines",
        "4",
    ]);
    assert!(!out.status.success());
    let out = pipecast(&["topo", "check", dir.join("missing.json").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 14: a switch name of 70,000 bytes made `topo check` panic (a column width above
/// 65535 in `format!`); it is checked and printed like any other.
#[test]
fn a_very_long_switch_name_is_checked_without_a_panic() {
    let dir = std::env::temp_dir().join(format!("pipecast-longname-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.json");
    let name = "s".repeat(70_000);
    std::fs::write(
        &path,
        format!(
            r#"{{"switches": ["{name}"], "machines": [{{"name": "n0", "switch": "{name}"}}]}}"#
        ),
    )
    .unwrap();
    let out = pipecast(&["topo", "check", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 14: `pipecast plan … | head -1` panicked on the broken pipe; it now exits quietly
/// with the shell's SIGPIPE status, as `ls` does.
#[test]
fn a_closed_stdout_ends_the_tool_quietly() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(EXE)
        .args([
            "topo",
            "gen",
            "random",
            "--machines",
            "20000",
            "--switches",
            "500",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one line, then close the pipe, like `head -1`.
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    std::io::Read::read_exact(&mut out, &mut first).unwrap();
    drop(out);
    let result = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        result.status.success() || result.status.code() == Some(141),
        "{:?}: {stderr}",
        result.status
    );
}

/// Issue 14: `topo check /dev/zero` read 5.7 GB; input files are read with a limit that the
/// message names, with the variable that raises it.
#[test]
fn an_oversized_input_file_is_refused_with_the_limit() {
    let out = pipecast(&["topo", "check", "/dev/zero"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("/dev/zero") && stderr.contains("PIPECAST_MAX_INPUT_BYTES"),
        "{stderr}"
    );
    let dir = std::env::temp_dir().join(format!("pipecast-limit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.json");
    std::fs::write(
        &path,
        r#"{"switches": ["s0"], "machines": [{"name": "n0", "switch": "s0"}]}"#,
    )
    .unwrap();
    let check = |limit: &str| {
        Command::new(EXE)
            .args(["topo", "check", path.to_str().unwrap()])
            .env("PIPECAST_MAX_INPUT_BYTES", limit)
            .output()
            .unwrap()
    };
    let small = check("16");
    assert!(!small.status.success());
    assert!(String::from_utf8_lossy(&small.stderr).contains("16 bytes"));
    assert!(check("1K").status.success());
    let bad = check("lots");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("PIPECAST_MAX_INPUT_BYTES=\"lots\""));
    for profile_or_platform in [
        vec![
            "plan",
            "--topology",
            path.to_str().unwrap(),
            "--profile",
            "/dev/zero",
            "--msize",
            "1M",
        ],
        vec!["hetero", "--platform", "/dev/zero"],
    ] {
        let out = pipecast(&profile_or_platform);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("PIPECAST_MAX_INPUT_BYTES"),
            "{profile_or_platform:?}: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 16: machines with two NICs (rails): `topo check` names the rails and `plan` puts
/// multilane's lane i on rail i, contention-free, and `auto` picks it for large messages.
#[test]
fn rails_are_checked_and_planned() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/rails2x4.json");
    let out = pipecast(&["topo", "check", file]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "2 NICs per machine, NIC i on rail i (rail 0: a0 a1 a2 a3; rail 1: b0 b1 b2 b3)"
        ),
        "{text}"
    );
    let out = pipecast(&[
        "plan",
        "--topology",
        file,
        "--tree",
        "multilane",
        "--root",
        "5",
        "--msize",
        "4194304",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tree"], "multilane");
    assert_eq!(v["contention_free"], true);
    let lanes = v["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), 2);
    for (i, lane) in lanes.iter().enumerate() {
        assert_eq!(lane["rail"], i);
    }
    let out = pipecast(&["plan", "--topology", file, "--tree", "multilane"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("lane 1 (rail 1: NIC 1 of every machine)"),
        "{text}"
    );
    assert!(text.contains(" b3 "), "{text}");
}
