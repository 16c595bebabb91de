//! `pipecast topo import --format mpich-coords|slurm FILE`: the written topology passes
//! `topo check` and plans; bad files and endless ones end with a message naming the file.

mod common;
use common::{pipecast, EXE};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pipecast-import-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn mpich_coordinates_become_a_topology_that_plans() {
    let dir = scratch("coords");
    let coords = dir.join("coords");
    // Two dragonfly groups of two switches, two ranks per port on one of them.
    let mut text = String::from("# rank: group id, switch id, port number\n");
    for r in 0..8 {
        text += &format!(
            "{r}: {} {} {}\n",
            r / 4,
            r / 2 % 2,
            if r < 2 { 3 } else { -1 }
        );
    }
    std::fs::write(&coords, text).unwrap();
    let topo = dir.join("t.json");
    ok(&pipecast(&[
        "topo",
        "import",
        "--format",
        "mpich-coords",
        path(&coords),
        "-o",
        path(&topo),
    ]));
    let check = ok(&pipecast(&["topo", "check", path(&topo)]));
    assert!(
        check.contains("7 switches, 6 links, 7 machines") && check.contains("8 ranks"),
        "{check}"
    );
    let plan = ok(&pipecast(&[
        "plan",
        "--topology",
        path(&topo),
        "--tree",
        "binary",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(v["ranks"], 8, "{plan}");
    // stdout without -o is the same file.
    let printed = ok(&pipecast(&[
        "topo",
        "import",
        "--format",
        "mpich-coords",
        path(&coords),
    ]));
    assert_eq!(printed, std::fs::read_to_string(&topo).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn slurm_topology_conf_becomes_a_topology() {
    let dir = scratch("slurm");
    let conf = dir.join("topology.conf");
    std::fs::write(
        &conf,
        "# two leaves\nSwitchName=s0 Switches=s[1-2]\nSwitchName=s1 Nodes=n[0-3]\nSwitchName=s2 Nodes=n[4-7]\n",
    )
    .unwrap();
    let out = ok(&pipecast(&[
        "topo",
        "import",
        "--format",
        "slurm",
        path(&conf),
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["switches"], serde_json::json!(["s0", "s1", "s2"]));
    assert_eq!(v["machines"][4]["name"], "n4");
    assert_eq!(v["machines"][4]["switch"], "s2");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_and_endless_files_end_with_a_message() {
    let dir = scratch("bad");
    let bad = dir.join("coords");
    std::fs::write(&bad, "# header\n0: 1 7\n").unwrap();
    for format in ["mpich-coords", "slurm"] {
        let out = pipecast(&["topo", "import", "--format", format, path(&bad)]);
        assert!(!out.status.success());
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains(path(&bad)) && e.contains("line 2"),
            "{format}: {e}"
        );
    }
    let out = Command::new(EXE)
        .args(["topo", "import", "--format", "mpich-coords", "/dev/zero"])
        .env("PIPECAST_MAX_INPUT_BYTES", "1M")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("input limit"), "{e}");
    let out = pipecast(&["topo", "import", "--format", "cray", path(&bad)]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}
