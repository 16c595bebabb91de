//! The C ABI: `include/pipecast.h` is generated from this module by cbindgen (`cbindgen.toml`),
//! and `tests/capi_header.rs` fails when the committed header drifts from it.
//!
//! Conventions (after rustls-ffi, `../shared/STYLE.md`): opaque handles; every exported function
//! runs inside [`boundary`], which turns a panic into [`pipecast_result::PIPECAST_ERR_PANIC`];
//! NULL pointers are checked; out-parameters are written only on success; one result enum, with
//! [`pipecast_strerror`] for its meaning and [`pipecast_last_error`] for the detailed message of
//! the calling thread's last failure.
#![allow(non_camel_case_types)]

mod config;
mod glue;
mod handle;
mod request;

pub use config::{
    pipecast_config, pipecast_config_default, pipecast_config_from_env, validate_config,
};
pub use glue::{
    pipecast_glue_settings, pipecast_glue_settings_check, pipecast_glue_settings_default,
    pipecast_glue_settings_from_env,
};
pub use handle::{
    pipecast_allgather_fn, pipecast_bcast_bytes, pipecast_comm, pipecast_comm_create,
    pipecast_comm_create_on, pipecast_comm_free, pipecast_comm_link, pipecast_comm_same_engine,
    pipecast_comm_view, pipecast_plan_json,
};
pub use request::{
    pipecast_ibcast_bytes, pipecast_progress_fn, pipecast_request, pipecast_test,
    pipecast_test_within, pipecast_wait, pipecast_wait_progressing,
};

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Outcome of a pipecast C call.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum pipecast_result {
    PIPECAST_OK = 0,
    /// A required pointer argument was NULL.
    PIPECAST_ERR_NULL_ARGUMENT = 1,
    /// An argument was out of range (rank, size, root, length).
    PIPECAST_ERR_INVALID_ARGUMENT = 2,
    /// The configuration (struct or PIPECAST_* variables) is not valid.
    PIPECAST_ERR_CONFIG = 3,
    /// The address exchange (allgather callback) or connection setup failed.
    PIPECAST_ERR_BOOTSTRAP = 4,
    /// A transport error (socket, connection lost).
    PIPECAST_ERR_TRANSPORT = 5,
    /// A peer made no progress within the timeout.
    PIPECAST_ERR_TIMEOUT = 6,
    /// Ranks disagree on the broadcast (size or root).
    PIPECAST_ERR_MISMATCH = 7,
    /// Not supported here (e.g. a transport not built in).
    PIPECAST_ERR_UNSUPPORTED = 8,
    /// A bug: pipecast panicked; the panic was stopped at the C boundary.
    PIPECAST_ERR_PANIC = 9,
    /// Any other error; see pipecast_last_error.
    PIPECAST_ERR_OTHER = 10,
}

use pipecast_result::*;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records the detailed message of a failure for [`pipecast_last_error`] and returns its code.
pub(crate) fn fail(code: pipecast_result, message: impl Into<String>) -> pipecast_result {
    let message = message.into();
    tracing::debug!(?code, %message, "C call failed");
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
    code
}

/// Copies `text` into `buf` (NUL-terminated, truncated to `len` bytes) and returns its full
/// length: the convention of every C call that returns a string.
///
/// # Safety
/// `buf` must be NULL or point to `len` writable bytes.
pub(crate) unsafe fn copy_out(text: &str, buf: *mut c_char, len: usize) -> usize {
    if !buf.is_null() && len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: `buf` has `len` writable bytes (caller contract) and `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}

/// Inside an MPI program nobody installs a log subscriber: the first communicator installs
/// one that writes `PIPECAST_LOG` (same syntax as the tool's: `info`, `pipecast=debug`, …)
/// to stderr, unless the variable is unset or the program has a subscriber of its own.
pub(crate) fn init_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = crate::comm::settings::log_filter()
            .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok());
        if let Some(filter) = filter {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .try_init();
        }
    });
}

/// Runs `f` behind the panic boundary of every exported function.
pub(crate) fn boundary(f: impl FnOnce() -> pipecast_result) -> pipecast_result {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            fail(
                PIPECAST_ERR_PANIC,
                format!("internal error (panic): {what}"),
            )
        }
    }
}

/// The library version, a static NUL-terminated string such as `"0.1.0"`.
#[no_mangle]
pub extern "C" fn pipecast_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A static NUL-terminated description of a result code.
#[no_mangle]
pub extern "C" fn pipecast_strerror(result: pipecast_result) -> *const c_char {
    let text: &'static str = match result {
        PIPECAST_OK => "success\0",
        PIPECAST_ERR_NULL_ARGUMENT => "a required pointer argument is NULL\0",
        PIPECAST_ERR_INVALID_ARGUMENT => "an argument is out of range\0",
        PIPECAST_ERR_CONFIG => "invalid pipecast configuration\0",
        PIPECAST_ERR_BOOTSTRAP => "address exchange or connection setup failed\0",
        PIPECAST_ERR_TRANSPORT => "transport error\0",
        PIPECAST_ERR_TIMEOUT => "a peer made no progress within the timeout\0",
        PIPECAST_ERR_MISMATCH => "ranks disagree on the broadcast (size or root)\0",
        PIPECAST_ERR_UNSUPPORTED => "not supported by this build or machine\0",
        PIPECAST_ERR_PANIC => "internal error in pipecast (panic)\0",
        PIPECAST_ERR_OTHER => "pipecast error\0",
    };
    text.as_ptr().cast()
}

/// Copies the calling thread's last error message into `buf` (NUL-terminated, truncated to
/// `len` bytes) and returns the message's full length. `buf` may be NULL when `len` is 0.
///
/// # Safety
/// `buf` must be NULL or point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pipecast_last_error(buf: *mut c_char, len: usize) -> usize {
    let message = LAST_ERROR.with(|e| e.borrow().clone());
    // SAFETY: forwarded caller contract.
    unsafe { copy_out(&message, buf, len) }
}
