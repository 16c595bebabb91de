//! `pipecast demo` in a reduced form (4 machines on 2 switches, two sizes): as root (with LLDP
//! discovery) and, through `setpriv`, as `nobody` (a lab in a user namespace, the topology from
//! the file). Each run must verify every byte at every rank and leave no namespace, lab
//! directory or process behind — also when interrupted by Ctrl-C in the middle of the
//! broadcasts. Timing decides nothing here.

// The demo builds its own lab: this file uses only the users and helpers of `lab`.
mod common;
#[allow(dead_code, unused_macros, unused_imports)]
mod lab;

use lab::{as_each_user, text, User, EXE};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const SMALL: [&str; 8] = [
    "demo",
    "--machines",
    "4",
    "--switches",
    "2",
    "--sizes",
    "64K,100003",
    "--iters",
];

fn demo_args(svg: &str) -> Vec<&str> {
    let mut args = SMALL.to_vec();
    args.extend(["2", "--svg", svg]);
    args
}

/// The lab name the demo announces ("building lab NAME: …").
fn lab_name(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("building lab "))
        .and_then(|l| l.split(':').next())
        .unwrap_or_else(|| panic!("no lab announced: {stdout}"))
        .to_string()
}

/// Where `user`'s labs keep their state.
fn lab_root(user: User) -> PathBuf {
    match user {
        User::Me => pipecast::lab::run_root(),
        User::Nobody => PathBuf::from("/tmp/pipecast-lab-65534"),
    }
}

/// Nothing of lab `name` is left: no namespace (root's), no lab directory, no process whose
/// command line names the lab's directory (its ranks, its keeper's children).
fn assert_nothing_left(user: User, name: &str) {
    let dir = lab_root(user).join(name);
    assert!(!dir.exists(), "{} is left", dir.display());
    if user == User::Me && pipecast::lab::is_root() {
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&out.stdout);
        assert!(
            !list.contains(&format!("{name}-")),
            "namespaces left: {list}"
        );
    }
    let needle = dir.display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie =
            std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|s| s.contains(") Z "));
        assert!(
            !cmdline.contains(&needle) || zombie,
            "process {:?} of lab {name} is left: {cmdline}",
            entry.file_name()
        );
    }
}

fn scratch(user: User, tag: &str) -> PathBuf {
    let dir = lab::scratch_dir(&lab::unique_name(tag));
    user.own(&dir);
    dir
}

#[test]
fn a_small_demo_verifies_every_byte_and_tears_down() {
    as_each_user(|user| {
        let dir = scratch(user, if user == User::Me { "dm" } else { "dmn" });
        let svg = dir.join("plan.svg");
        let out = user
            .command(EXE)
            .args(demo_args(svg.to_str().unwrap()))
            .current_dir(&dir)
            .output()
            .unwrap();
        let all = text(&out);
        assert!(out.status.success(), "{user:?}: {all}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("every byte verified at every rank: yes"),
            "{all}"
        );
        for tree in ["auto", "naive-linear", "binomial", "scatter-allgather"] {
            assert!(stdout.contains(tree), "{tree} missing: {all}");
        }
        assert!(stdout.contains("contention-free"), "no plan table: {all}");
        if user == User::Me && pipecast::lab::is_root() {
            assert!(stdout.contains("learned over LLDP"), "{all}");
            assert!(stdout.contains("the lab as built"), "{all}");
        } else {
            assert!(stdout.contains("from the file"), "{all}");
        }
        let name = lab_name(&stdout);
        assert!(stdout.contains(&format!("lab {name} removed")), "{all}");
        assert_nothing_left(user, &name);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn ctrl_c_during_the_broadcasts_removes_the_lab() {
    as_each_user(|user| {
        let dir = scratch(user, if user == User::Me { "dc" } else { "dcn" });
        let svg = dir.join("plan.svg");
        let mut args = SMALL.to_vec();
        // Enough broadcasts to be interrupted in the middle of them.
        args.extend(["50", "--svg", svg.to_str().unwrap()]);
        let mut child = user
            .command(EXE)
            .args(&args)
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut stdout = String::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for line in lines.by_ref() {
            let line = line.unwrap();
            stdout.push_str(&line);
            stdout.push('\n');
            if line.starts_with("broadcasting") {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        // Like a terminal's Ctrl-C: SIGINT to the demo's process group.
        let _ = Command::new("kill")
            .args(["-INT", "--", &format!("-{}", child.id())])
            .status();
        for line in lines {
            stdout.push_str(&line.unwrap());
            stdout.push('\n');
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = lab_name(&stdout);
        assert!(!out.status.success(), "{user:?}: {stdout}{stderr}");
        assert!(stderr.contains("interrupted"), "{user:?}: {stdout}{stderr}");
        assert!(
            stdout.contains(&format!("lab {name} removed")),
            "{stdout}{stderr}"
        );
        assert_nothing_left(user, &name);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// Issue 12: where user namespaces are refused, the demo says so in one line, naming the
/// setting, and runs the local benchmark instead, every byte verified. Made real as root: a
/// user namespace of our own (uids 0–65535 mapped, so `nobody` exists in it) whose
/// `user.max_user_namespaces` is 0, the demo run there as `nobody`.
#[test]
fn without_user_namespaces_the_demo_runs_the_local_benchmark() {
    if !pipecast::lab::is_root() {
        common::skip_or_fail(
            "root",
            "needs root (to map nobody into a user namespace that refuses more)",
        );
        return;
    }
    // The first shell waits for its uid map (written below, as root), then a PID namespace
    // with its own /proc lets the namespace's root set the limit before becoming nobody.
    let inner = "until grep -q . /proc/self/uid_map; do sleep 0.02; done; \
                 exec unshare --pid --fork --mount-proc sh -c \
                 'echo 0 > /proc/sys/user/max_user_namespaces && \
                  exec setpriv --reuid=65534 --regid=65534 --clear-groups -- \"$@\"' sh \"$@\"";
    let child = Command::new("unshare")
        .args(["--user", "sh", "-c", inner, "sh", EXE])
        .args([
            "demo",
            "--local",
            "2",
            "--sizes",
            "64K,100003",
            "--iters",
            "1",
        ])
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            common::skip_or_fail(
                "util-linux",
                format!("unshare (util-linux) cannot run: {e}"),
            );
            return;
        }
    };
    // The map can be written once the child is in its new user namespace.
    let ours = std::fs::read_link("/proc/self/ns/user").unwrap();
    let theirs = format!("/proc/{}/ns/user", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_link(&theirs).is_ok_and(|ns| ns == ours) {
        if child.try_wait().unwrap().is_some() || std::time::Instant::now() > deadline {
            let out = child.wait_with_output().unwrap();
            common::skip_or_fail(
                "userns",
                format!("no user namespace of our own: {}", text(&out)),
            );
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for map in ["uid_map", "gid_map"] {
        let path = format!("/proc/{}/{map}", child.id());
        std::fs::write(&path, "0 0 65536\n").unwrap_or_else(|e| panic!("write {path}: {e}"));
    }
    let out = child.wait_with_output().unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let notes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("note: no lab here"))
        .collect();
    assert_eq!(notes.len(), 1, "{all}");
    assert!(
        notes[0].contains("user.max_user_namespaces") && notes[0].contains("local benchmark"),
        "{all}"
    );
    assert!(
        stdout.contains("shm"),
        "the local benchmark runs over shared memory: {all}"
    );
    assert!(!stdout.contains("building lab"), "{all}");
    // The table's `ok` column (every byte verified), found by its header: columns after it
    // (the broadcast timed alone, where the ranks share a clock) come and go.
    let ok = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("bytes"))
        .and_then(|h| h.split_whitespace().position(|c| c == "ok"))
        .unwrap_or_else(|| panic!("no `ok` column in the table's header: {all}"));
    for size in ["65536", "100003"] {
        let rows: Vec<&str> = stdout
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(size))
            .collect();
        assert_eq!(rows.len(), 4, "four trees at {size}: {all}");
        assert!(
            rows.iter()
                .all(|r| r.split_whitespace().nth(ok) == Some("yes")),
            "{all}"
        );
    }
}
