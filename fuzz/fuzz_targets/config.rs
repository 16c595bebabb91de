//! The C API's configuration (`capi/config.rs`): fields given as arbitrary bytes (split at
//! 0xff; each ends at its first NUL, as a C string does), turned into settings and applied to
//! a communicator configuration. Bad values are errors naming the field, never a panic. The
//! topology and profile fields name files and are left out (the `files` target covers them).
//! A fifth field is the `PIPECAST_NAME=value` settings text of `pipecast_comm_create_with`,
//! parsed and applied the same way (topology and profile assignments skipped, as above).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::capi::{pipecast_config, validate_config};
use std::ffi::CString;

fuzz_target!(|data: &[u8]| {
    let mut fields = data.split(|&b| b == 0xff).map(|f| {
        let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
        CString::new(&f[..end]).expect("no NUL before the end")
    });
    let (transport, tree, iface) = (fields.next(), fields.next(), fields.next());
    let numbers: Vec<u8> = fields.next().map(|f| f.into_bytes()).unwrap_or_default();
    let word = |i: usize| {
        numbers
            .get(i..i + 8)
            .map_or(0, |w| u64::from_le_bytes(w.try_into().expect("8")))
    };
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    let config = pipecast_config {
        transport: ptr(&transport),
        tree: ptr(&tree),
        segment_bytes: word(0),
        topology: std::ptr::null(),
        timeout_ms: word(8) as u32,
        profile: std::ptr::null(),
        iface: ptr(&iface),
    };
    // SAFETY: every pointer is NULL or a NUL-terminated string that outlives the call.
    let _ = unsafe { validate_config(&config) };
    if let Some(text) = fields.next().and_then(|f| f.into_string().ok()) {
        if let Ok(mut settings) = pipecast::comm::Settings::parse_assignments(&text) {
            settings.topology = None;
            settings.profile = None;
            settings.tree_dump = None;
            let _ = settings.apply(&mut pipecast::comm::Config::default());
        }
    }
});
