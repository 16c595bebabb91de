//! The completion queue, with its completion channel (a descriptor to wait on).

use super::super::ops::VerbsError;
use super::device::{errno, Context};
use rdma_sys as ib;
use std::os::fd::RawFd;
use std::sync::Arc;

pub struct Cq {
    pub(super) ptr: *mut ib::ibv_cq,
    channel: *mut ib::ibv_comp_channel,
    _ctx: Arc<Context>,
}

// SAFETY: polled and armed only by the thread that owns the link's `DeviceVerbs` (through
// its `&mut self`); the queue pairs' clones only keep it alive. Freed only in `Drop`.
unsafe impl Send for Cq {}
// SAFETY: as above: no two threads call into it.
unsafe impl Sync for Cq {}

impl Cq {
    /// A queue of `entries` completions, with a non-blocking completion channel.
    pub fn new(ctx: &Arc<Context>, entries: i32) -> Result<Cq, VerbsError> {
        // SAFETY: a live context.
        let channel = unsafe { ib::ibv_create_comp_channel(ctx.ptr) };
        if channel.is_null() {
            return Err(VerbsError::Call {
                call: "ibv_create_comp_channel",
                detail: errno(),
            });
        }
        // SAFETY: the channel was just created; its descriptor is ours to configure.
        let fd = unsafe { (*channel).fd };
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            )
        };
        // SAFETY: a live context and channel.
        let ptr = unsafe { ib::ibv_create_cq(ctx.ptr, entries, std::ptr::null_mut(), channel, 0) };
        if ptr.is_null() {
            let detail = errno();
            // SAFETY: created above, destroyed once.
            unsafe { ib::ibv_destroy_comp_channel(channel) };
            return Err(VerbsError::Call {
                call: "ibv_create_cq",
                detail: format!("{entries} entries: {detail}"),
            });
        }
        Ok(Cq {
            ptr,
            channel,
            _ctx: ctx.clone(),
        })
    }

    /// How many completions it holds (at least what was asked: devices round up).
    pub fn entries(&self) -> usize {
        // SAFETY: a live completion queue; `cqe` is its current capacity.
        unsafe { (*self.ptr).cqe }.max(0) as usize
    }

    /// Resizes it to at least `entries` completions (grows or shrinks it), keeping those
    /// it holds.
    pub fn resize(&self, entries: i32) -> Result<(), VerbsError> {
        // SAFETY: a live completion queue, polled only by this link's thread (which is
        // the caller), so no poll runs concurrently.
        let rc = unsafe { ib::ibv_resize_cq(self.ptr, entries) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_resize_cq",
                detail: format!(
                    "{entries} entries: {}",
                    std::io::Error::from_raw_os_error(rc)
                ),
            });
        }
        Ok(())
    }

    pub fn fd(&self) -> RawFd {
        // SAFETY: a live channel.
        unsafe { (*self.channel).fd }
    }

    /// Takes the channel's pending events and asks for the next completion's.
    pub fn arm(&self) -> Result<(), VerbsError> {
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        let mut taken = 0;
        // SAFETY: a live, non-blocking channel; out-parameters valid. It fails (EAGAIN)
        // when no event is pending.
        while unsafe { ib::ibv_get_cq_event(self.channel, &mut cq, &mut ctx) } == 0 {
            taken += 1;
        }
        if taken > 0 {
            // SAFETY: acknowledges exactly the events taken.
            unsafe { ib::ibv_ack_cq_events(self.ptr, taken) };
        }
        // SAFETY: a live completion queue.
        let rc = unsafe { ib::ibv_req_notify_cq(self.ptr, 0) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_req_notify_cq",
                detail: std::io::Error::from_raw_os_error(rc).to_string(),
            });
        }
        Ok(())
    }

    /// Up to `wc.len()` completions into `wc`; how many.
    pub fn poll(&self, wc: &mut [ib::ibv_wc]) -> Result<usize, VerbsError> {
        // SAFETY: a live completion queue and room for `wc.len()` entries.
        let n = unsafe { ib::ibv_poll_cq(self.ptr, wc.len() as i32, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::Call {
                call: "ibv_poll_cq",
                detail: format!("returned {n}"),
            });
        }
        Ok(n as usize)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: queue pairs using this queue hold an `Arc<Cq>`, so none is alive; events
        // taken were acknowledged in `arm`. Destroyed once, queue before channel.
        unsafe {
            ib::ibv_destroy_cq(self.ptr);
            ib::ibv_destroy_comp_channel(self.channel);
        }
    }
}
