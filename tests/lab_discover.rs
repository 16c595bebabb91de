//! The lab end to end: build a multi-switch lab, run ranks in it, discover its topology over
//! LLDP and check that discovery reproduces the lab's own topology. Needs root and lldpd;
//! without them each test prints why it skips. Every lab is removed by a guard.

mod common;
mod lab;

use lab::{
    as_each_user, pipecast, pipecast_within, rank0_json, require_lab, scratch_dir, text,
    unique_name, Lab, User, EXE,
};
use pipecast::topology::{parse_topology, Topology};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Switch names, links as unordered name pairs, and machine → switch in rank order.
type Shape = (
    BTreeSet<String>,
    BTreeSet<(String, String)>,
    Vec<(String, String)>,
);

fn shape(t: &Topology) -> Shape {
    let name = |s: usize| t.switches()[s].name.clone();
    let switches = t.switches().iter().map(|s| s.name.clone()).collect();
    let links = t
        .links()
        .iter()
        .map(|l| {
            let (a, b) = (name(l.a), name(l.b));
            if a < b {
                (a, b)
            } else {
                (b, a)
            }
        })
        .collect();
    let machines = t
        .machines()
        .iter()
        .map(|m| (m.name.clone(), name(m.switch)))
        .collect();
    (switches, links, machines)
}

fn read(path: &Path) -> Topology {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_topology(&text).unwrap()
}

/// Hub s1 with edges s0 and s2, and s3 behind s2 (depth 2); ranks interleaved over switches.
const FOUR_SWITCHES: &str = r#"{
  "switches": ["s0", "s1", "s2", "s3"],
  "links": [["s1", "s0"], ["s1", "s2"], {"a": "s2", "b": "s3", "gbps": 0.2}],
  "machines": [
    {"name": "n0", "switch": "s2"}, {"name": "n1", "switch": "s0"},
    {"name": "n2", "switch": "s3"}, {"name": "n3", "switch": "s1"},
    {"name": "n4", "switch": "s2"}, {"name": "n5", "switch": "s0"}
  ]
}"#;

#[test]
fn discovery_reproduces_the_lab_topology() {
    require_lab!();
    let lab = Lab::up("d", FOUR_SWITCHES, &[]);
    // The switches' lldpd and the set-uid `lldpcli` run as `_lldpd`: root's run root and the
    // /run/pipecast above it must let them through (a fresh machine's 0700 made `lab up` wait
    // out its LLDP timeout).
    let run_root = pipecast::lab::run_root();
    let mut dirs = vec![run_root.as_path()];
    if std::env::var_os("PIPECAST_LAB_DIR").is_none() {
        dirs.extend(run_root.parent());
    }
    for dir in dirs {
        let mode = std::fs::metadata(dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o011, 0o011, "{} is {mode:o}", dir.display());
    }
    let expected = shape(&parse_topology(FOUR_SWITCHES).unwrap());
    let lldp = lab.dir().join("lldp");
    let out = pipecast(&[
        "lab",
        "lldp",
        "--name",
        lab.name(),
        "--out",
        lldp.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    for s in ["s0", "s1", "s2", "s3"] {
        assert!(lldp.join(format!("{s}.json")).is_file(), "no dump for {s}");
    }
    let found = lab.dir().join("found.json");
    let out = lab.run(&[
        EXE,
        "topo",
        "discover",
        "--switch-lldp",
        lldp.to_str().unwrap(),
        "--listen-seconds",
        "10",
        "-o",
        found.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let t = read(&found);
    assert_eq!(shape(&t), expected);
    // Ports and MACs come from LLDP and the NIC.
    assert_eq!(t.machines()[3].port.as_deref(), Some("n3"));
    assert!(t.machines().iter().all(|m| m.mac.is_some()));

    // The same from a Slurm topology.conf, written from the lab's topology.
    let slurm = lab.dir().join("topology.conf");
    std::fs::write(
        &slurm,
        "SwitchName=s1 Switches=s[0,2]\nSwitchName=s2 Switches=s3 Nodes=n[0,4]\n\
         SwitchName=s0 Nodes=n[1,5]\nSwitchName=s3 Nodes=n2\n",
    )
    .unwrap();
    let found = lab.dir().join("found-slurm.json");
    let out = lab.run(&[
        EXE,
        "topo",
        "discover",
        "--iface",
        "eth0",
        "--slurm",
        slurm.to_str().unwrap(),
        "-o",
        found.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(shape(&read(&found)), expected);

    // No switch layer: a valid topology with every attachment right, and the assumption said.
    let found = lab.dir().join("found-none.json");
    let out = lab.run(&[EXE, "topo", "discover", "-o", found.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("ASSUMING"), "{}", text(&out));
    let guessed = read(&found);
    assert_eq!(shape(&guessed).2, expected.2);
}

#[test]
fn run_sets_rank_environment_and_reports_failures() {
    as_each_user(rank_environment_and_failures);
}

fn rank_environment_and_failures(user: User) {
    let lab = Lab::up_as(
        user,
        if user == User::Me { "r" } else { "rn" },
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s1"}, {"name": "h2", "switch": "s1"}]}"#,
        &["--rate", "50mbit"],
    );
    let out = lab.run(&[
        "sh",
        "-c",
        "echo $PIPECAST_RANK/$PIPECAST_SIZE $PIPECAST_MACHINE $PIPECAST_RENDEZVOUS",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (r, m) in ["h0", "h1", "h2"].iter().enumerate() {
        let line = format!("[r{r}] {r}/3 {m} 198.18.0.1:47800");
        assert!(stdout.contains(&line), "missing {line:?} in {stdout}");
    }
    // Two ranks per machine, in blocks: ranks 2 and 3 on h1, all meeting at rank 0 on h0.
    let out = user.pipecast(&[
        "lab",
        "run",
        "--name",
        lab.name(),
        "--ranks-per-machine",
        "2",
        "--",
        "sh",
        "-c",
        "echo $PIPECAST_RANK/$PIPECAST_SIZE $PIPECAST_MACHINE $PIPECAST_RENDEZVOUS",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (r, m) in ["h0", "h0", "h1", "h1", "h2", "h2"].iter().enumerate() {
        let line = format!("[r{r}] {r}/6 {m} 198.18.0.1:47800");
        assert!(stdout.contains(&line), "missing {line:?} in {stdout}");
    }
    // Rank 1 fails: the run fails and names it.
    let out = lab.run(&["sh", "-c", "test $PIPECAST_RANK != 1"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("r1 (h1) exited with 1"),
        "{}",
        text(&out)
    );
    // A rank past the deadline is killed.
    let out = user.pipecast(&[
        "lab",
        "run",
        "--name",
        lab.name(),
        "--timeout",
        "1",
        "--",
        "sh",
        "-c",
        "if [ $PIPECAST_RANK = 2 ]; then sleep 30; fi",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("r2 (h2) killed at the 1 s deadline"),
        "{}",
        text(&out)
    );
    // Data crosses the switches (s0 -> s1), management addresses are reachable too.
    let out = lab.run(&[
        "sh",
        "-c",
        "if [ $PIPECAST_RANK = 0 ]; then cat /sys/class/net/eth0/mtu; ip -o addr show mgmt0; fi",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("[r0] 1500"), "{}", text(&out));
    assert!(text(&out).contains("198.19.0.1/16"), "{}", text(&out));
    // exec on one machine, and its exit code.
    let out = user.pipecast(&[
        "lab",
        "exec",
        "--name",
        lab.name(),
        "h2",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let out = user.pipecast(&["lab", "exec", "--name", lab.name(), "h9", "--", "true"]);
    assert!(text(&out).contains("no machine \"h9\""), "{}", text(&out));
}

#[test]
fn up_refuses_bad_input_and_leaves_nothing_behind() {
    require_lab!();
    let name = unique_name("b");
    let dir = scratch_dir(&name);
    let file = dir.join("t.json");
    // A machine name too long for an interface.
    std::fs::write(
        &file,
        r#"{"switches": ["s0"], "machines": [{"name": "machine-with-long-name", "switch": "s0"}]}"#,
    )
    .unwrap();
    let out = pipecast(&[
        "lab",
        "up",
        "--name",
        &name,
        "--topology",
        file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("cannot name a network interface"),
        "{}",
        text(&out)
    );
    let out = pipecast(&[
        "lab",
        "up",
        "--name",
        "bad-name",
        "--topology",
        file.to_str().unwrap(),
    ]);
    assert!(text(&out).contains("not usable"), "{}", text(&out));
    let out = pipecast(&[
        "lab",
        "up",
        "--name",
        &name,
        "--rate",
        "fast",
        "--topology",
        file.to_str().unwrap(),
    ]);
    assert!(text(&out).contains("not a rate"), "{}", text(&out));
    let out = pipecast(&["lab", "down", "--name", &name]);
    assert!(text(&out).contains("no lab named"), "{}", text(&out));
    let namespaces = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    assert!(!namespaces.contains(&format!("{name}-")), "{namespaces}");
    let _ = std::fs::remove_dir_all(&dir);

    // A second lab of the same name is refused while the first exists.
    let lab = Lab::up(
        "x",
        r#"{"switches": ["s0"], "machines": [{"name": "h0", "switch": "s0"}]}"#,
        &["--lldp-wait", "0"],
    );
    let file = lab.topology_file();
    let out = pipecast(&[
        "lab",
        "up",
        "--name",
        lab.name(),
        "--topology",
        file.to_str().unwrap(),
    ]);
    assert!(text(&out).contains("already exists"), "{}", text(&out));
}

/// The lab without root: `nobody` builds a lab in a user namespace of its own, broadcasts
/// byte-exact across it (sizes 0, 1, odd, not a multiple of a segment, 1 MiB; roots 0, 1,
/// 2), hears why no lldpd runs there, and `down` ends the user namespace's keeper.
#[test]
fn nobody_builds_uses_and_removes_a_lab() {
    let user = User::Nobody;
    common::require!(user.missing());
    let lab = Lab::up_as(
        user,
        "n",
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s1"}, {"name": "h2", "switch": "s1"}]}"#,
        &[],
    );
    let out = user.pipecast(&["lab", "status"]);
    assert!(text(&out).contains(lab.name()), "{}", text(&out));
    let out = lab.run(&["sh", "-c", "id -u; cat /proc/self/uid_map"]);
    assert!(out.status.success(), "{}", text(&out));
    // Root inside, nobody outside.
    assert!(text(&out).contains("[r2] 0"), "{}", text(&out));
    assert!(text(&out).contains("65534"), "{}", text(&out));
    let topology = lab.topology_file();
    let out = lab.run(&[
        EXE,
        "bench",
        "--json",
        "--topology",
        topology.to_str().unwrap(),
        "--sizes",
        "0,1,7,100003,1M",
        "--tree",
        "auto,linear,binomial",
        "--iters",
        "3",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.strip_prefix("[r0] ")
                .and_then(|j| serde_json::from_str(j).ok())
        })
        .unwrap_or_else(|| panic!("no report: {}", text(&out)));
    let rows = report["results"].as_array().unwrap();
    assert_eq!(rows.len(), 15, "{report}");
    assert!(rows.iter().all(|r| r["verified"] == true), "{report}");
    let out = user.pipecast(&[
        "lab",
        "lldp",
        "--name",
        lab.name(),
        "--out",
        lab.dir().join("lldp").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("setgroups"), "{}", text(&out));
    // Down ends the keeper of the user namespace (and with it every namespace) and removes
    // the lab's directory.
    let run_dir = Path::new("/tmp/pipecast-lab-65534").join(lab.name());
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("state.json")).unwrap())
            .unwrap();
    let keeper = state["owner"]["keeper"].as_u64().expect("a keeper");
    let out = user.pipecast(&["lab", "down", "--name", lab.name()]);
    assert!(out.status.success(), "{}", text(&out));
    let alive = std::fs::read_to_string(format!("/proc/{keeper}/stat"))
        .is_ok_and(|s| !s.contains(") Z ") && !s.contains(") X "));
    assert!(!alive, "keeper {keeper} survived lab down");
    assert!(!run_dir.exists());
}

/// Ranks start in the caller's working directory, so relative paths work in `lab run`: without
/// root they started in `/` (entering the keeper's mount namespace moved them there) and
/// `lab run -- ./pipecast bench --topology topology.json` failed at every rank with
/// `exec of "./pipecast" failed` (issue 28). As each user that can build a lab here, `nobody`
/// from root included, from the lab's scratch directory (owned by that user).
#[test]
fn ranks_start_in_the_callers_working_directory() {
    as_each_user(|user| {
        let lab = Lab::up_as(
            user,
            if user == User::Me { "w" } else { "wn" },
            r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
                "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s1"}]}"#,
            &["--lldp-wait", "0"],
        );
        std::os::unix::fs::symlink(EXE, lab.dir().join("pipecast")).unwrap();
        let run = |args: &[&str]| {
            let mut all = vec!["lab", "run", "--name", lab.name(), "--timeout", "30", "--"];
            all.extend_from_slice(args);
            user.command(EXE)
                .args(&all)
                .current_dir(lab.dir())
                .output()
                .unwrap()
        };
        let out = run(&["sh", "-c", "pwd"]);
        assert!(out.status.success(), "{user:?}: {}", text(&out));
        let dir = lab.dir().to_str().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        for r in 0..2 {
            assert!(
                stdout.contains(&format!("[r{r}] {dir}\n")),
                "{user:?}: rank {r} not in {dir}: {}",
                text(&out)
            );
        }
        let out = run(&[
            "./pipecast",
            "bench",
            "--json",
            "--topology",
            "topology.json",
            "--sizes",
            "1,100003",
            "--tree",
            "linear",
            "--iters",
            "2",
        ]);
        assert!(out.status.success(), "{user:?}: {}", text(&out));
        let rows = rank0_json(&out)["results"].as_array().unwrap().clone();
        assert_eq!(rows.len(), 2, "{user:?}: {}", text(&out));
        assert!(
            rows.iter().all(|r| r["verified"] == true),
            "{user:?}: {}",
            text(&out)
        );
    });
}

#[test]
fn mpirun_places_the_files_ranks_machine_by_machine() {
    require_lab!(pipecast::lab::find_tool("mpirun")
        .is_none()
        .then(|| common::missing(
            "openmpi",
            "mpirun not installed (apt-get install openmpi-bin)"
        )));
    let lab = Lab::up(
        "m",
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "h0", "switch": "s1"}, {"name": "h1", "switch": "s0", "ranks": 2},
                         {"name": "h2", "switch": "s1"}]}"#,
        &["--lldp-wait", "0"],
    );
    // Without --ranks-per-machine, the file's `ranks`: h0 rank 0, h1 ranks 1 and 2, h2 rank 3.
    let out = pipecast_within(
        240,
        &[
        "lab",
        "mpirun",
        "--name",
        lab.name(),
        "--",
        "sh",
        "-c",
        "echo mpi $OMPI_COMM_WORLD_RANK $(cat /sys/class/net/eth0/address) $(ip -o -4 addr show eth0)",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (r, m) in [0, 1, 1, 2].into_iter().enumerate() {
        let needle = format!("198.18.0.{}/16", m + 1);
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("mpi {r} ")) && l.contains(&needle)),
            "rank {r} not on machine {m}: {stdout}"
        );
    }
    assert!(!stdout.contains("mpi 4 "), "{stdout}");
}

#[test]
fn host_lldpd_is_asked_and_down_removes_everything() {
    require_lab!();
    let lab = Lab::up(
        "o",
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s1"}]}"#,
        &[],
    );
    // An lldpd of the host itself, with its own socket.
    let socket = lab.dir().join("h1.sock");
    let out = pipecast(&[
        "lab",
        "exec",
        "--name",
        lab.name(),
        "h1",
        "--",
        "lldpd",
        "-u",
        socket.to_str().unwrap(),
        "-p",
        lab.dir().join("h1.pid").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let found = lab.dir().join("h1.json");
    let mut last = String::new();
    for _ in 0..50 {
        let out = pipecast(&[
            "lab",
            "exec",
            "--name",
            lab.name(),
            "h1",
            "--",
            EXE,
            "topo",
            "discover",
            "--lldp",
            "lldpd",
            "--lldpd-socket",
            socket.to_str().unwrap(),
            "-o",
            found.to_str().unwrap(),
        ]);
        last = text(&out);
        if out.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let t = read(&found);
    assert_eq!(t.size(), 1, "{last}");
    assert_eq!(t.machines()[0].name, "h1");
    assert_eq!(t.switches()[t.switch_of(0)].name, "s1");
    assert_eq!(t.machines()[0].port.as_deref(), Some("h1"));

    // Down stops every lldpd (switches' and the host's) and deletes every namespace.
    let run_dir = pipecast::lab::load(lab.name()).unwrap().run_dir;
    let pids: Vec<String> = ["s0.pid", "s1.pid"]
        .iter()
        .map(|f| Path::new(&run_dir).join(f))
        .chain([lab.dir().join("h1.pid")])
        .map(|p| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .map(|s| s.trim().to_string())
        .collect();
    let out = pipecast(&["lab", "down", "--name", lab.name()]);
    assert!(out.status.success(), "{}", text(&out));
    for pid in pids {
        let alive =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
        assert!(!alive, "lldpd {pid} survived lab down");
    }
    let namespaces = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    assert!(
        !namespaces.contains(&format!("{}-", lab.name())),
        "{namespaces}"
    );
    assert!(!Path::new(&run_dir).exists());
}

#[test]
fn ctrl_c_during_up_leaves_nothing_half_built() {
    require_lab!();
    use std::os::unix::process::CommandExt;
    let name = unique_name("c");
    let dir = scratch_dir(&name);
    let file = dir.join("t.json");
    std::fs::write(&file, FOUR_SWITCHES).unwrap();
    let child = Command::new(EXE)
        .args([
            "lab",
            "up",
            "--name",
            &name,
            "--topology",
            file.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    // Like a terminal's Ctrl-C: SIGINT to the whole process group (pipecast and its ip/tc).
    let _ = Command::new("kill")
        .args(["-INT", "--", &format!("-{}", child.id())])
        .status();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let namespaces = || {
        String::from_utf8_lossy(
            &Command::new("ip")
                .args(["netns", "list"])
                .output()
                .unwrap()
                .stdout,
        )
        .lines()
        .filter(|l| l.starts_with(&format!("{name}-")))
        .count()
    };
    match pipecast::lab::load(&name) {
        // The signal came after the build: a complete lab, removed normally.
        Ok(state) => {
            assert!(out.status.success() && state.complete, "{stderr}");
            assert!(pipecast(&["lab", "down", "--name", &name]).status.success());
        }
        Err(_) => assert!(stderr.contains("interrupted"), "{stderr}"),
    }
    assert_eq!(namespaces(), 0, "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
