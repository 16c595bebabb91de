//! Waking the progress thread: an `eventfd` that the links wait on beside their sockets, so a
//! broadcast posted while the thread waits for the network starts at once.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub struct Wake {
    fd: OwnedFd,
}

impl Wake {
    pub fn new() -> io::Result<Wake> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor that
        // we own from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        Ok(Wake {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Makes the descriptor readable (wakes a `poll` that includes it).
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an open eventfd; a full counter (never
        // reached: the reader drains it) would only give EAGAIN.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Makes it unreadable again.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from an open non-blocking eventfd.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_wakes_a_poll_and_clear_rearms() {
        let w = Wake::new().unwrap();
        let ready = |w: &Wake| {
            let mut p = libc::pollfd {
                fd: w.raw(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd for an open descriptor.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        assert!(!ready(&w));
        w.notify();
        w.notify();
        assert!(ready(&w));
        w.clear();
        assert!(!ready(&w));
    }
}
