//! Nonblocking broadcasts of the C ABI: `pipecast_ibcast_bytes`, `pipecast_test`,
//! `pipecast_test_within`, `pipecast_wait`, `pipecast_wait_progressing`.

use super::handle::{check_root, code_of, pipecast_comm};
use super::{boundary, fail, pipecast_result};
use crate::comm::Request;
use crate::transport::RawBuf;
use pipecast_result::*;
use std::ffi::{c_int, c_void};

/// An opaque nonblocking broadcast in flight.
pub struct pipecast_request {
    request: Request,
}

/// Starts broadcasting `len` bytes at `buf` from `root` and returns at once; `*out` receives
/// the request, to be completed by `pipecast_test` or `pipecast_wait`. Collective: blocking
/// and nonblocking broadcasts on a communicator must be posted in the same order at every
/// rank; several may be in flight. The broadcast runs on pipecast's progress thread (it
/// overlaps with the caller's computation). `buf` may be NULL only when `len` is 0.
///
/// # Safety
/// `comm` must be a live handle used by one thread at a time; `buf` must point to `len`
/// writable bytes that nobody else touches until the request completes; `out` must be
/// writable.
#[no_mangle]
pub unsafe extern "C" fn pipecast_ibcast_bytes(
    comm: *mut pipecast_comm,
    buf: *mut c_void,
    len: usize,
    root: c_int,
    out: *mut *mut pipecast_request,
) -> pipecast_result {
    boundary(|| {
        // SAFETY: a live handle used by one thread (caller contract).
        let Some(handle) = (unsafe { comm.as_mut() }) else {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "comm is NULL");
        };
        if out.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "out is NULL");
        }
        if buf.is_null() && len > 0 {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "buf is NULL but len is not 0");
        }
        if let Err(code) = check_root(handle, root) {
            return code;
        }
        // SAFETY: `buf` has `len` writable bytes nobody else touches until the request
        // completes (caller contract); the request waits for completion even when dropped.
        let raw = unsafe { RawBuf::new(buf.cast::<u8>(), len) };
        match handle.comm.ibcast_raw(raw, root as usize) {
            Ok(request) => {
                let r = Box::into_raw(Box::new(pipecast_request { request }));
                // SAFETY: `out` is non-NULL (checked) and writable by the caller's contract.
                unsafe { out.write(r) };
                PIPECAST_OK
            }
            Err(e) => code_of(&e),
        }
    })
}

/// Whether `req` has completed: `*done` = 1 and the broadcast's result returned — the request
/// is then freed and must not be used again — or `*done` = 0 and `PIPECAST_OK` (still
/// running). Never blocks; may be called from any thread (one at a time per request).
///
/// # Safety
/// `req` must be a live request from `pipecast_ibcast_bytes`; `done` must be writable.
#[no_mangle]
pub unsafe extern "C" fn pipecast_test(
    req: *mut pipecast_request,
    done: *mut c_int,
) -> pipecast_result {
    // SAFETY: the caller's contract is test_for's.
    unsafe { test_for(req, None, done) }
}

/// As `pipecast_test`, but waits up to `usec` microseconds for `req` to complete (its
/// completion ends the wait at once): for an MPI layer whose own wait spins on its progress
/// engine, so that ranks sharing a core leave it to the threads moving the bytes (Open MPI's
/// component naps so while `MPI_Wait` spins on a nonblocking broadcast).
///
/// # Safety
/// As `pipecast_test`.
#[no_mangle]
pub unsafe extern "C" fn pipecast_test_within(
    req: *mut pipecast_request,
    usec: u32,
    done: *mut c_int,
) -> pipecast_result {
    let limit = std::time::Duration::from_micros(u64::from(usec));
    // SAFETY: the caller's contract is test_for's.
    unsafe { test_for(req, Some(limit), done) }
}

/// `pipecast_test` (`limit` None) and `pipecast_test_within`.
///
/// # Safety
/// `req` must be a live request from `pipecast_ibcast_bytes`; `done` must be writable.
unsafe fn test_for(
    req: *mut pipecast_request,
    limit: Option<std::time::Duration>,
    done: *mut c_int,
) -> pipecast_result {
    boundary(|| {
        if done.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "done is NULL");
        }
        // SAFETY: a live request (caller contract), used by one thread at a time.
        let Some(r) = (unsafe { req.as_mut() }) else {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "req is NULL");
        };
        let finished = match limit {
            None => r.request.test(),
            Some(limit) => r.request.test_within(limit),
        };
        if !finished {
            // SAFETY: non-NULL (checked) and writable (caller contract).
            unsafe { done.write(0) };
            return PIPECAST_OK;
        }
        // SAFETY: non-NULL (checked) and writable (caller contract).
        unsafe { done.write(1) };
        // SAFETY: from Box::into_raw in pipecast_ibcast_bytes; completed requests are freed
        // here once (the caller must not use it again).
        finish(*unsafe { Box::from_raw(req) })
    })
}

/// Waits until `req` completes, frees it and returns the broadcast's result.
///
/// # Safety
/// `req` must be a live request from `pipecast_ibcast_bytes`, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn pipecast_wait(req: *mut pipecast_request) -> pipecast_result {
    boundary(|| {
        if req.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "req is NULL");
        }
        // SAFETY: from Box::into_raw in pipecast_ibcast_bytes, freed once here (contract).
        finish(*unsafe { Box::from_raw(req) })
    })
}

/// A progress function of the caller's MPI (`opal_progress`, an `MPI_Iprobe`), called with
/// its argument.
pub type pipecast_progress_fn = Option<unsafe extern "C" fn(arg: *mut c_void)>;

/// Polls that yield the CPU before `pipecast_wait_progressing` sleeps between polls.
const YIELDING_POLLS: u32 = 64;
/// Its first sleep between polls after that; each next one twice as long, up to
/// [`LONGEST_SLEEP`]. A completion ends a sleep at once, so only the MPI's progress waits.
const FIRST_SLEEP: std::time::Duration = std::time::Duration::from_micros(20);
/// The longest sleep: the MPI's progress still runs 2000 times a second, and ranks sharing a
/// core leave it to the threads moving the bytes (with 4 ranks on 2 cores, fixed 20 µs naps
/// cost 14 % at 16 MiB against blocking outright).
const LONGEST_SLEEP: std::time::Duration = std::time::Duration::from_micros(500);

/// Waits until `req` completes, calling `progress(arg)` between polls, then frees it and
/// returns the broadcast's result. The way for an MPI layer to block in a broadcast: MPI has
/// no timeouts and a rank inside `MPI_Bcast` is inside MPI, so its own pending traffic must
/// keep moving (a rendezvous send of Open MPI's `btl tcp` or of MPICH over UCX moves only from
/// the sender's progress engine; a peer waiting for it would otherwise never join this
/// broadcast). Between polls the thread yields the CPU; after 64 polls it sleeps until the
/// broadcast ends or 20 µs pass, doubling up to 500 µs, so that ranks sharing a core leave
/// it to the threads moving the bytes (the end of the broadcast wakes it at once).
/// `progress` may be NULL.
///
/// # Safety
/// `req` must be a live request from `pipecast_ibcast_bytes`, not used again afterwards;
/// `progress`, when not NULL, must be safe to call with `arg` from this thread.
#[no_mangle]
pub unsafe extern "C" fn pipecast_wait_progressing(
    req: *mut pipecast_request,
    progress: pipecast_progress_fn,
    arg: *mut c_void,
) -> pipecast_result {
    boundary(|| {
        // SAFETY: a live request (caller contract), used by this thread only until freed.
        let Some(r) = (unsafe { req.as_mut() }) else {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "req is NULL");
        };
        let mut polls = 0u32;
        let mut sleep = FIRST_SLEEP;
        loop {
            let done = if polls < YIELDING_POLLS {
                polls += 1;
                r.request.test() || {
                    std::thread::yield_now();
                    false
                }
            } else {
                let done = r.request.test_within(sleep);
                sleep = (sleep * 2).min(LONGEST_SLEEP);
                done
            };
            if done {
                break;
            }
            if let Some(f) = progress {
                // SAFETY: callable with `arg` from this thread (caller contract).
                unsafe { f(arg) };
            }
        }
        // SAFETY: from Box::into_raw in pipecast_ibcast_bytes; completed requests are freed
        // here once (the caller must not use it again).
        finish(*unsafe { Box::from_raw(req) })
    })
}

fn finish(r: pipecast_request) -> pipecast_result {
    match r.request.wait().0 {
        Ok(()) => PIPECAST_OK,
        Err(e) => code_of(&e),
    }
}
