//! `make -C ffi install PREFIX=… DESTDIR=…` as a site would run it, into a temporary DESTDIR:
//! the library, header, `pipecast.pc`, and the MPI pieces whose MPI is installed land where
//! the Makefile says, and a C program built with `pkg-config --cflags --libs pipecast` does
//! real broadcasts (tests/c/install_test.c: two threads as two ranks, every byte checked).

mod common;
use common::requirements::tool;
use common::{have, require, skip_or_fail};

use std::path::Path;
use std::process::Command;

const PREFIX: &str = "/opt/pipecast";

#[test]
fn installed_library_builds_and_runs_a_c_program() {
    require!(tool("pkg-config", "pkg-config", &["--version"]));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let profile_dir = common::built_lib_dir();
    let work = std::env::temp_dir().join(format!("pipecast-install-{}", std::process::id()));
    let destdir = work.join("dest");
    let make = Command::new("make")
        .arg("-C")
        .arg(root.join("ffi"))
        .arg(format!(
            "PROFILE={}",
            profile_dir.file_name().unwrap().to_str().unwrap()
        ))
        .arg(format!(
            "TARGET_DIR={}",
            profile_dir.parent().unwrap().display()
        ))
        .arg("CARGO=true")
        .arg(format!("BUILD={}", work.join("build").display()))
        .arg(format!("PREFIX={PREFIX}"))
        .arg(format!("DESTDIR={}", destdir.display()))
        .arg("install")
        .output()
        .expect("run make");
    let make_log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&make.stdout),
        String::from_utf8_lossy(&make.stderr)
    );
    assert!(make.status.success(), "make install failed:\n{make_log}");

    let prefix = destdir.join(PREFIX.trim_start_matches('/'));
    for file in [
        "lib/libpipecast.so",
        "lib/libpipecast.a",
        "include/pipecast.h",
        "lib/pkgconfig/pipecast.pc",
    ] {
        assert!(
            prefix.join(file).is_file(),
            "{file} not installed:\n{make_log}"
        );
    }
    // Each MPI piece is installed exactly when its MPI is (else make says what it skipped).
    let pieces = [
        (
            "openmpi",
            "pkg-config",
            &["--exists", "ompi-c"][..],
            "lib/openmpi/mca_coll_pipecast.so",
        ),
        (
            "openmpi",
            "mpicc.openmpi",
            &["--version"][..],
            "lib/libpipecast_preload.so",
        ),
        (
            "mpich",
            "mpicc.mpich",
            &["--version"][..],
            "lib/libpipecast_preload_mpich.so",
        ),
    ];
    for (kind, tool, args, file) in pieces {
        let works = have(tool, args);
        assert_eq!(
            prefix.join(file).is_file(),
            works,
            "{file} installed iff {tool} works:\n{make_log}"
        );
        if !works {
            skip_or_fail(
                kind,
                format!("the {file} part: `{tool}` does not work here"),
            );
        }
    }
    let pc = std::fs::read_to_string(prefix.join("lib/pkgconfig/pipecast.pc")).unwrap();
    assert!(pc.contains(&format!("prefix={PREFIX}\n")), "{pc}");

    // pkg-config as a user of the DESTDIR tree sees it (the sysroot prefixes -I and -L).
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "pipecast"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .env("PKG_CONFIG_SYSROOT_DIR", &destdir)
        .output()
        .expect("run pkg-config");
    let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
    assert!(flags.contains("-lpipecast"), "pkg-config said: {flags}");
    let exe = work.join("install_test");
    let cc = Command::new("cc")
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
        ])
        .arg(root.join("tests/c/install_test.c"))
        .args(flags.split_whitespace())
        .arg("-lpthread")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C compiler (cc)");
    assert!(
        cc.status.success(),
        "install_test.c does not build with `{flags}`:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe)
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .env_remove("PIPECAST_LOG")
        .output()
        .expect("run the installed C program");
    let _ = std::fs::remove_dir_all(&work);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("install_test: pipecast"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
