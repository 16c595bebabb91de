//! Lending the caller's buffer to the progress thread for the length of one operation.

use std::sync::{Arc, Condvar, Mutex};

#[derive(Default)]
struct Returned {
    done: Mutex<bool>,
    cv: Condvar,
}

/// Exclusive access to a caller's buffer from another thread. The lender (`lend`) does not
/// return before the loan is dropped, so the buffer outlives every use of it.
pub struct BufLoan {
    ptr: *mut u8,
    len: usize,
    returned: Arc<Returned>,
}

// SAFETY: a BufLoan is the only access path to the lent bytes while it lives (the lender holds
// the `&mut` borrow and blocks), so moving it to another thread is like moving a `&mut [u8]`.
unsafe impl Send for BufLoan {}

impl BufLoan {
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr/len come from a live `&mut [u8]` whose borrow `lend` holds until this
        // loan is dropped; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for BufLoan {
    fn drop(&mut self) {
        let mut done = self.returned.done.lock().unwrap_or_else(|e| e.into_inner());
        *done = true;
        self.returned.cv.notify_all();
    }
}

/// A caller's buffer given by pointer and length (the C API's nonblocking broadcast): the
/// caller promises it stays valid and untouched until pipecast is done with it.
pub struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the creator of a RawBuf promised exclusive access to the bytes until it is dropped
// (`RawBuf::new`), so moving it to another thread is like moving a `&mut [u8]`.
unsafe impl Send for RawBuf {}

impl RawBuf {
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes (or `len` 0), and nothing else
    /// may access those bytes until the returned value is dropped.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> RawBuf {
        RawBuf { ptr, len }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: valid and exclusive for `len` bytes until drop (the contract of `new`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// The bytes of one broadcast, whatever lent them.
pub enum Buffer {
    /// A blocking broadcast's buffer, lent for its duration.
    Loan(BufLoan),
    /// A nonblocking broadcast's own vector, handed back at completion.
    Owned(Vec<u8>),
    /// A nonblocking broadcast of the C API: the caller's bytes.
    Raw(RawBuf),
}

impl Buffer {
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Buffer::Loan(l) => l.as_mut_slice(),
            Buffer::Owned(v) => v,
            Buffer::Raw(r) => r.as_mut_slice(),
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        let (ptr, len) = match self {
            Buffer::Loan(l) => (l.ptr.cast_const(), l.len),
            Buffer::Owned(v) => return v,
            Buffer::Raw(r) => (r.ptr.cast_const(), r.len),
        };
        if len == 0 {
            return &[];
        }
        // SAFETY: a loan or raw buffer is valid and exclusively ours for `len` bytes while it
        // lives (their constructors' contracts); `&self` rules out a concurrent `&mut`.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vector of an owned buffer, handed back to its broadcaster.
    pub fn into_owned(self) -> Option<Vec<u8>> {
        match self {
            Buffer::Owned(v) => Some(v),
            _ => None,
        }
    }
}

/// The buffers of the broadcasts in flight, by sequence number. A link writes an arriving
/// segment into its broadcast's buffer and sends from it; a frame whose broadcast is over
/// (its buffer gone) goes out empty.
pub type Buffers = std::collections::BTreeMap<u64, Buffer>;

/// Where a held segment lands ([`Driver::held`](crate::engine::driver::Driver::held)): its
/// broadcast's lent buffer, or an error when that broadcast finished here.
impl crate::engine::driver::Memory for Buffers {
    fn buffer(&mut self, from: usize, seq: u64) -> crate::Result<&mut [u8]> {
        match self.get_mut(&seq) {
            Some(buf) => Ok(buf.as_mut_slice()),
            None => Err(super::gone_buffer(from, seq).into()),
        }
    }
}

/// Waits for the loan on drop, so that even a panic in the lender's closure cannot free the
/// buffer while another thread writes into it.
struct WaitForReturn(Arc<Returned>);

impl Drop for WaitForReturn {
    fn drop(&mut self) {
        let mut done = self.0.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = self.0.cv.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Calls `f` with a loan of `buf` and returns once `f` has returned and the loan was dropped
/// (wherever it went).
pub fn lend<R>(buf: &mut [u8], f: impl FnOnce(BufLoan) -> R) -> R {
    let returned = Arc::new(Returned::default());
    let _wait = WaitForReturn(returned.clone());
    f(BufLoan {
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
        returned,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loan_writes_land_in_the_buffer() {
        let mut buf = vec![0u8; 8];
        lend(&mut buf, |mut loan| {
            std::thread::spawn(move || loan.as_mut_slice()[3] = 7)
                .join()
                .unwrap();
        });
        assert_eq!(buf[3], 7);
    }
}
