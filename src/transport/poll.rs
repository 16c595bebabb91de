//! Waiting on descriptors for a `Duration`, to the nanosecond: `ppoll(2)`.
//!
//! `poll(2)` takes whole milliseconds, and a link that waited `wait.as_millis()` turned every
//! wait under 1 ms into 0, a poll that returns at once: the multicast root, whose pacer
//! releases a segment every ~120 µs at 100 Mbit/s, spun through rounds while it waited
//! (measured on the 16-machine lab: its progress thread took a whole core for the length of
//! a broadcast, more CPU than the 15 receivers together; docs/multicast.md, "Receivers'
//! CPU").

use std::io;
use std::time::Duration;

/// Waits up to `wait` for an event on `fds` (a zero wait only looks); how many have one.
/// Interrupted by a signal: `Ok(0)`.
pub fn poll(fds: &mut [libc::pollfd], wait: Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: wait.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(wait.subsec_nanos() as i32),
    };
    // SAFETY: `fds` is a live, exclusively borrowed array of `fds.len()` pollfd structs (the
    // caller keeps their descriptors open for the call; -1 entries are ignored), `ts` a valid
    // timespec that the kernel only reads, and no signal mask is passed.
    let n = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_wait_under_a_millisecond_is_a_wait() {
        let mut fds = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        }];
        let t = Instant::now();
        for _ in 0..10 {
            assert_eq!(poll(&mut fds, Duration::from_micros(300)).unwrap(), 0);
        }
        // 10 × 300 µs: at least 3 ms (a poll(2) of `as_millis()` = 0 returns at once).
        assert!(t.elapsed() >= Duration::from_millis(3), "{:?}", t.elapsed());
        let t = Instant::now();
        assert_eq!(poll(&mut fds, Duration::ZERO).unwrap(), 0);
        assert!(t.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn a_ready_descriptor_ends_the_wait() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::io::Write;
        use std::os::fd::AsRawFd;
        (&b).write_all(b"x").unwrap();
        let mut fds = [libc::pollfd {
            fd: a.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let t = Instant::now();
        assert_eq!(poll(&mut fds, Duration::from_secs(10)).unwrap(), 1);
        assert!(fds[0].revents & libc::POLLIN != 0);
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
