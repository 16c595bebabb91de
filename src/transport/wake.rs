//! Waking the progress thread: an `eventfd` that the links wait on beside their sockets, so a
//! broadcast posted while the thread waits for the network starts at once; and [`spin`], the
//! bounded polling every waiter does before it sleeps.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Tries `ready` until it gives `Some` or `budget` has passed, yielding the CPU between tries;
/// `None` when the budget ran out (then sleep on the real wait).
///
/// Why: a wake-up through the kernel (futex, `poll`) costs a context switch, 5–50 µs, and a
/// broadcast between the ranks of one host pays several in a row (the caller hands over to its
/// progress thread, each hop wakes the next rank, the progress thread hands back), which is
/// the fixed cost that made pipecast defer small broadcasts on one host (docs/shm.md). MPIs
/// poll shared memory instead of sleeping; so do we, for a bounded time (`PIPECAST_POLL_US`).
/// Yielding between tries keeps an oversubscribed host (more threads than cores, as on a
/// laptop or a 2-core CI machine) running the very threads the waiter waits for.
pub fn spin<T>(budget: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    if let Some(t) = ready() {
        return Some(t);
    }
    if budget.is_zero() {
        return None;
    }
    let start = Instant::now();
    loop {
        std::thread::yield_now();
        if let Some(t) = ready() {
            return Some(t);
        }
        if start.elapsed() >= budget {
            return None;
        }
    }
}

#[derive(Debug)]
pub struct Wake {
    fd: OwnedFd,
    /// Notifies begun ([`Wake::notify`] counts before it writes 1) and the sum of what
    /// [`Wake::clear`] read: equal, nothing is or will be readable that a clear would take,
    /// and the clear makes no system call. The progress thread clears once per round, and a
    /// `read(2)` that found nothing was one system call per round for nothing (a multicast
    /// receiver runs ~90 rounds per 16 MiB broadcast: docs/multicast.md, "Receivers' CPU:
    /// wake-ups and acks"). Counted, not a flag: a notifier preempted between its write and
    /// a flag's store (its write wakes the waiter, which may take its CPU) left the
    /// descriptor readable and unread, and the progress thread spun on it for a time slice.
    notified: AtomicU64,
    taken: AtomicU64,
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
            notified: AtomicU64::new(0),
            taken: AtomicU64::new(0),
        })
    }

    /// Makes the descriptor readable (wakes a `poll` that includes it).
    pub fn notify(&self) {
        // Before the write: whenever the descriptor is readable, `notified` is ahead of
        // `taken`, so the next clear reads. A clear between the two reads nothing (and reads
        // again next time).
        self.notified.fetch_add(1, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an open eventfd; a full counter (never
        // reached: the reader drains it) would only give EAGAIN.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Makes it unreadable again: reads it unless every notify's write was read already
    /// (nothing else writes to it).
    pub fn clear(&self) {
        if self.notified.load(Ordering::SeqCst) == self.taken.load(Ordering::SeqCst) {
            return;
        }
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from an open non-blocking eventfd.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            // The writes read (each wrote 1); a write still to come is read next time.
            self.taken.fetch_add(v, Ordering::SeqCst);
        }
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An epoll descriptor, level-triggered, readable while any of `fds` is.
pub fn epoll_of(fds: &[RawFd]) -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new descriptor.
    let e = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if e < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `e` is fresh and owned by nobody else.
    let e = unsafe { OwnedFd::from_raw_fd(e) };
    for &fd in fds {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a live epoll_event; `fd` is open (owned by whoever made this
        // epoll, who keeps it no longer than those descriptors live).
        if unsafe { libc::epoll_ctl(e.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_returns_the_first_ready_value_or_gives_up_after_its_budget() {
        let mut tries = 0;
        let got = spin(Duration::from_secs(5), || {
            tries += 1;
            (tries == 3).then_some(tries)
        });
        assert_eq!(got, Some(3));
        assert_eq!(spin(Duration::ZERO, || None::<()>), None);
        let start = Instant::now();
        assert_eq!(spin(Duration::from_millis(2), || None::<()>), None);
        assert!(start.elapsed() >= Duration::from_millis(2));
    }

    /// Whether a poll finds the descriptor readable now.
    fn ready(w: &Wake) -> bool {
        let mut p = libc::pollfd {
            fd: w.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd for an open descriptor.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn notify_wakes_a_poll_and_clear_rearms() {
        let w = Wake::new().unwrap();
        assert!(!ready(&w));
        w.notify();
        w.notify();
        assert!(ready(&w));
        w.clear();
        assert!(!ready(&w));
        // A clear with nothing notified leaves it so; the next notify wakes again.
        w.clear();
        assert!(!ready(&w));
        w.notify();
        assert!(ready(&w));
        w.clear();
        assert!(!ready(&w));
    }

    /// Notifies from other threads while this one clears and polls: once every notifier is
    /// done and one last clear ran, the descriptor is unreadable; a notify that came after a
    /// clear is always seen (readable) before the next clear.
    #[test]
    fn concurrent_notifies_are_never_lost_and_a_last_clear_empties_it() {
        use std::sync::Arc;
        let w = Arc::new(Wake::new().unwrap());
        for _ in 0..20 {
            let notifiers: Vec<_> = (0..2)
                .map(|_| {
                    let w = w.clone();
                    std::thread::spawn(move || {
                        for _ in 0..500 {
                            w.notify();
                        }
                    })
                })
                .collect();
            for _ in 0..500 {
                w.clear();
            }
            for n in notifiers {
                n.join().unwrap();
            }
            w.notify();
            assert!(ready(&w), "a notify after every clear is seen");
            // Every notifier's write and flag are done: one clear empties it.
            w.clear();
            assert!(!ready(&w));
        }
    }
}
