//! `pipecast doctor` as this user and, through `setpriv`, as `nobody`: the JSON report parses,
//! holds every check with a known status, and the exit status follows the rule of
//! docs/doctor.md (0 unless a check failed). A component built for another Open MPI release
//! and a named interface that does not exist are failures with a fix.

mod common;

use serde_json::Value;
use std::process::{Command, Output};

use common::EXE;
const CHECKS: [&str; 10] = [
    "open-mpi",
    "cap-net-raw",
    "lldp",
    "mtu",
    "io-uring",
    "tcp-rto-min",
    "user-namespaces",
    "cross-memory-attach",
    "shared-memory",
    "rdma",
];

/// The report of a run, checked for shape and for the exit-status rule.
fn report(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}):\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let checks = v["checks"].as_array().expect("checks");
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, CHECKS, "{v}");
    for c in checks {
        let status = c["status"].as_str().unwrap();
        assert!(["ok", "warn", "fail"].contains(&status), "{c}");
        assert!(!c["detail"].as_str().unwrap().is_empty(), "{c}");
        // Every problem comes with its fix.
        assert_eq!(status == "ok", c["fix"].is_null(), "{c}");
    }
    let failed = v["summary"]["fail"].as_u64().unwrap();
    assert_eq!(out.status.code(), Some(i32::from(failed > 0)), "{v}");
    v
}

fn status<'a>(v: &'a Value, name: &str) -> &'a str {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["status"].as_str())
        .unwrap()
}

#[test]
fn doctor_reports_as_this_user() {
    let out = Command::new(EXE)
        .args(["doctor", "--json", "--lldp-seconds", "0"])
        .output()
        .unwrap();
    let v = report(&out);
    // The probes pipecast itself relies on work on any Linux this suite runs on.
    assert_eq!(status(&v, "shared-memory"), "ok", "{v}");
    // The table has one line per check and the summary.
    let out = Command::new(EXE)
        .args(["doctor", "--lldp-seconds", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for name in CHECKS {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert!(text.contains(" ok, ") && text.contains(" fail\n"), "{text}");
}

#[test]
fn doctor_reports_as_nobody() {
    let mut cmd = match common::as_nobody(EXE) {
        Ok(cmd) => cmd,
        Err(missing) => return missing.skip(),
    };
    let out = cmd
        .args(["doctor", "--json", "--lldp-seconds", "3"])
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    let v = report(&out);
    // Without any capability the packet socket is refused, and LLDP is not listened for.
    assert_eq!(status(&v, "cap-net-raw"), "warn", "{v}");
    assert_eq!(status(&v, "lldp"), "warn", "{v}");
}

#[test]
fn a_component_for_another_release_and_a_missing_interface_fail() {
    let dir = std::env::temp_dir().join(format!("pipecast-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("mca_coll_pipecast.so");
    std::fs::write(&fake, b"\x7fELF...pipecast-built-for-open-mpi 0.0.1\0...").unwrap();
    let out = Command::new(EXE)
        .args(["doctor", "--json", "--lldp-seconds", "0", "--component"])
        .arg(&fake)
        .output()
        .unwrap();
    let v = report(&out);
    let open_mpi = &v["checks"][0];
    if common::have("ompi_info", &["--version"]) {
        assert_eq!(open_mpi["status"], "fail", "{v}");
        let detail = open_mpi["detail"].as_str().unwrap();
        assert!(detail.contains("built for Open MPI 0.0.1"), "{detail}");
        assert!(
            open_mpi["fix"].as_str().unwrap().contains("make -C ffi"),
            "{v}"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("check failed"));
    } else {
        assert_eq!(open_mpi["status"], "warn", "{v}");
        common::skip_or_fail(
            "openmpi",
            "the component's check: `ompi_info` is not installed",
        );
    }
    let out = Command::new(EXE)
        .args([
            "doctor",
            "--json",
            "--lldp-seconds",
            "0",
            "--iface",
            "no-such-if0",
        ])
        .output()
        .unwrap();
    let v = report(&out);
    assert_eq!(v["interface"], "no-such-if0");
    for name in ["cap-net-raw", "lldp", "mtu"] {
        assert_eq!(status(&v, name), "fail", "{v}");
    }
    assert_eq!(out.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}
