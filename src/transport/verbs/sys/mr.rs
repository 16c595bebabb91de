//! A registered memory region.

use super::super::ops::VerbsError;
use super::device::errno;
use super::pd::Pd;
use rdma_sys as ib;
use std::sync::Arc;

pub struct MemoryRegion {
    ptr: *mut ib::ibv_mr,
    _pd: Arc<Pd>,
}

// SAFETY: a region is only deregistered in `Drop`; its keys are plain integers.
unsafe impl Send for MemoryRegion {}

impl MemoryRegion {
    /// Registers `len` bytes at `addr` for local writes and remote writes.
    ///
    /// # Safety
    /// The bytes must stay allocated until the region is dropped (the device writes into
    /// them whenever a peer's RDMA WRITE arrives).
    pub unsafe fn new(pd: &Arc<Pd>, addr: *mut u8, len: usize) -> Result<MemoryRegion, VerbsError> {
        let access = ib::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ib::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        // SAFETY: a live protection domain; the caller keeps the bytes allocated.
        let ptr = unsafe { ib::ibv_reg_mr(pd.ptr, addr.cast(), len, access.0 as i32) };
        if ptr.is_null() {
            return Err(VerbsError::Register {
                len,
                detail: format!(
                    "ibv_reg_mr: {} (the locked-memory limit, `ulimit -l`, may be too low)",
                    errno()
                ),
            });
        }
        Ok(MemoryRegion {
            ptr,
            _pd: pd.clone(),
        })
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: a live region.
        unsafe { (*self.ptr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: a live region.
        unsafe { (*self.ptr).rkey }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, deregistered once.
        unsafe { ib::ibv_dereg_mr(self.ptr) };
    }
}
