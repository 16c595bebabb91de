//! `include/pipecast.h` is generated from `src/capi` by cbindgen; this fails when the committed
//! header and the code disagree (regenerate with `cbindgen -o include/pipecast.h`, or run this test with
//! `PIPECAST_BLESS_HEADER=1`).

#[test]
fn committed_header_matches_the_code() {
    let root = env!("CARGO_MANIFEST_DIR");
    let config =
        cbindgen::Config::from_file(format!("{root}/cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = format!("{root}/include/pipecast.h");
    if std::env::var_os("PIPECAST_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write include/pipecast.h");
    }
    let committed = std::fs::read_to_string(&path).expect("include/pipecast.h");
    assert!(
        generated == committed,
        "include/pipecast.h is out of date: run `cbindgen -o include/pipecast.h` (cargo install cbindgen)\n--- generated ---\n{generated}"
    );
}
