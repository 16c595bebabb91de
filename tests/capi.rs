//! The C ABI as C sees it: `tests/c/capi_test.c` is compiled against `include/pipecast.h` and
//! the shared library cargo built for this test run, then run (4 threads as 4 ranks over TCP).

mod common;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_program_uses_the_api() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib_dir = common::built_lib_dir();
    let out = common::artifact_dir("capi").join("capi-test");
    let status = Command::new("cc")
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-g",
        ])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("tests/c/capi_test.c"))
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-lpipecast", "-lpthread"])
        .status()
        .expect("run the C compiler (cc)");
    assert!(status.success(), "the C test program does not compile");
    let run = Command::new(&out)
        .env_remove("PIPECAST_LOG")
        .output()
        .expect("run the C test program");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "C test failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("all checks passed"), "{stdout}");
    assert!(
        !stderr.contains("joined"),
        "no log without PIPECAST_LOG:\n{stderr}"
    );
    // Inside a C (or MPI) program the library writes its own log when PIPECAST_LOG asks.
    let run = Command::new(&out)
        .env("PIPECAST_LOG", "pipecast=info")
        .output()
        .expect("run the C test program");
    let _ = std::fs::remove_file(&out);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "C test failed with PIPECAST_LOG:\n{stderr}"
    );
    assert!(
        stderr.contains("joined"),
        "the library logs at info:\n{stderr}"
    );
}
