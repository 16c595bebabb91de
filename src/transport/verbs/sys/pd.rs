//! The protection domain: memory regions and queue pairs live in it.

use super::super::ops::VerbsError;
use super::device::{errno, Context};
use rdma_sys as ib;
use std::sync::Arc;

pub struct Pd {
    pub(super) ptr: *mut ib::ibv_pd,
    _ctx: Arc<Context>,
}

// SAFETY: protection domains are used through thread-safe verbs; freed only in `Drop`.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub fn new(ctx: &Arc<Context>) -> Result<Pd, VerbsError> {
        // SAFETY: a live context.
        let ptr = unsafe { ib::ibv_alloc_pd(ctx.ptr) };
        if ptr.is_null() {
            return Err(VerbsError::Call {
                call: "ibv_alloc_pd",
                detail: errno(),
            });
        }
        Ok(Pd {
            ptr,
            _ctx: ctx.clone(),
        })
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once; regions and queue pairs hold an `Arc<Pd>`.
        unsafe { ib::ibv_dealloc_pd(self.ptr) };
    }
}
