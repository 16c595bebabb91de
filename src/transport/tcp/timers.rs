//! TCP's minimum retransmission timeout and delayed-ack ceiling on a LAN, per socket.
//!
//! Linux never retransmits a lost segment sooner than `rto_min` (200 ms, `TCP_RTO_MIN`) after
//! it left, and a tail loss probe for a lone segment in flight waits 2·SRTT + `rto_min` too.
//! On a LAN whose round trip is well under a millisecond that floor is the whole stall: one
//! lost segment of a barrier, a tree's last segment or a tree's small message costs 200 ms.
//! Since Linux 6.15 a socket may lower it for itself, without privilege (`TCP_RTO_MIN_US`,
//! option 45), as data-centre stacks do for their whole host (`ip route … rto_min 5ms`).
//!
//! The receiving side must not delay its acks as long as that: an ack held by the peer's
//! delayed-ack timer (up to 200 ms, `TCP_DELACK_MAX`) past the sender's RTO makes the sender
//! retransmit what had arrived (a spurious retransmission: the segment again, and the
//! congestion window cut until the duplicate's DSACK undoes it). So each socket also caps its
//! own delayed acks (`TCP_DELACK_MAX_US`, option 46) at half the RTO floor asked for: every
//! pipecast socket sets both, so both ends of every connection ack before the other's
//! retransmission timer could fire. (Linux also caps the delayed-ack timer at the socket's own
//! `rto_min`; the explicit ceiling keeps the margin where it does not.) Both values are
//! rounded up to the kernel's clock ticks (4 ms at HZ=250) and must be over one tick.
//!
//! Where the kernel refuses (older than 6.15: `ENOPROTOOPT`; a value outside its range:
//! `EINVAL`), the socket keeps the kernel's defaults, said once at debug level; `pipecast
//! doctor` reports what a socket gets here ([`probe`]).
//!
//! **Off by default** (`PIPECAST_TCP_RTO_MIN_US` unset or 0): on the 16-machine lab with 1 % of
//! every link's TCP segments dropped, a floor of 5 ms (8 ms here) or 50 ms made one connection
//! of the job fail with `ETIMEDOUT` after 80-105 s in each of three runs (the kernel's abort,
//! `TCPAbortOnTimeout`; the kernel's 200 ms never did), while with the keepalive the
//! communicator sets from `PIPECAST_TIMEOUT_MS` raised (5 s: probes after 1 s idle, every 1 s,
//! 3 of them; 60 s: 20 s, 10 s) it ran through and the trees were 1.5-7 × faster. Until that
//! interaction is understood a job opts in (docs/multicast.md, "TCP's minimum RTO on a LAN").

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `TCP_RTO_MIN_US` (linux/tcp.h, since 6.15).
const TCP_RTO_MIN_US: libc::c_int = 45;
/// `TCP_DELACK_MAX_US` (linux/tcp.h, since 6.15).
const TCP_DELACK_MAX_US: libc::c_int = 46;

/// The LAN's minimum RTO as data-centre stacks set it, 5 ms (8 ms at HZ=250, two ticks): the
/// value measured in docs/multicast.md, "TCP's minimum RTO on a LAN (helper rto33)", and the
/// one `pipecast doctor` probes when `PIPECAST_TCP_RTO_MIN_US` is not set. Not the default.
pub const RTO_MIN: Duration = Duration::from_millis(5);

/// The largest `PIPECAST_TCP_RTO_MIN_US`: the kernel's own default, 200 ms (pipecast never
/// raises it).
pub const RTO_MIN_LIMIT: Duration = Duration::from_millis(200);

/// The timers a socket got: its minimum RTO and delayed-ack ceiling as the kernel reads them
/// back (µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    pub rto_min_us: u32,
    pub delack_max_us: u32,
}

/// Said once per process: the kernel refused the timers, sockets keep its defaults.
static REFUSED: AtomicBool = AtomicBool::new(false);

fn set(fd: BorrowedFd<'_>, name: libc::c_int, us: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(us).unwrap_or(libc::c_int::MAX);
    // SAFETY: the fd is open for the borrow; `value` is a live c_int and the length passed is
    // its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get(fd: BorrowedFd<'_>, name: libc::c_int) -> io::Result<u32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the fd is open for the borrow; `value` and `len` are live and `len` says
    // `value`'s size, which the kernel does not write past.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u32::try_from(value).unwrap_or(0))
}

/// Sets `rto_min` as the socket's minimum RTO and half of it (at least the kernel's least,
/// else `rto_min` itself) as its delayed-ack ceiling. An error is the kernel's refusal: the
/// socket is as it was, but for a delayed-ack ceiling set before the RTO was refused (never
/// above the kernel's default, so harmless).
pub fn apply(fd: BorrowedFd<'_>, rto_min: Duration) -> io::Result<()> {
    let us = u32::try_from(rto_min.as_micros()).unwrap_or(u32::MAX);
    // The ceiling first: a socket never has an RTO floor under its own delayed acks.
    match set(fd, TCP_DELACK_MAX_US, us / 2) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => set(fd, TCP_DELACK_MAX_US, us)?,
        Err(e) => return Err(e),
    }
    set(fd, TCP_RTO_MIN_US, us)
}

/// What the socket's timers are now (the kernel's rounding shows: 5 ms reads back 8 ms at
/// HZ=250). An error where the kernel has neither option.
pub fn read(fd: BorrowedFd<'_>) -> io::Result<Timers> {
    Ok(Timers {
        rto_min_us: get(fd, TCP_RTO_MIN_US)?,
        delack_max_us: get(fd, TCP_DELACK_MAX_US)?,
    })
}

/// [`apply`] on a pipecast connection when `rto_min` is given (`None`: the kernel's defaults,
/// `PIPECAST_TCP_RTO_MIN_US=0`). A refusal is never an error: the connection keeps the kernel's
/// defaults, and the first refusal in the process is logged at debug level.
pub(super) fn lan(stream: &impl AsFd, rto_min: Option<Duration>) {
    let Some(rto_min) = rto_min else {
        return;
    };
    if let Err(e) = apply(stream.as_fd(), rto_min) {
        if !REFUSED.swap(true, Ordering::Relaxed) {
            tracing::debug!(
                error = %e,
                rto_min_us = rto_min.as_micros() as u64,
                "tcp: the kernel refused TCP_RTO_MIN_US/TCP_DELACK_MAX_US: connections keep its 200 ms minimum RTO"
            );
        }
    }
}

/// What a new TCP socket of this host gets with `rto_min` (for `pipecast doctor`): the timers
/// read back, or the kernel's refusal.
pub fn probe(rto_min: Duration) -> io::Result<Timers> {
    // SAFETY: socket(2) takes no pointers; the new descriptor is owned at once below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    apply(owned.as_fd(), rto_min)?;
    read(owned.as_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel has the options: what is set reads back (rounded up to its ticks),
    /// the delayed-ack ceiling never above the floor; a value the kernel refuses (above its
    /// 200 ms) is an error, not a panic, and `lan` swallows it.
    #[test]
    fn set_read_back_and_refused() {
        let t = match probe(RTO_MIN) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("skipped: the kernel refuses TCP_RTO_MIN_US ({e})");
                return;
            }
        };
        assert!((5000..200_000).contains(&t.rto_min_us), "{t:?}");
        assert!(t.delack_max_us <= t.rto_min_us, "{t:?}");
        let big = probe(Duration::from_millis(100)).unwrap();
        assert_eq!(big.rto_min_us, 100_000);
        assert!(big.delack_max_us <= 52_000, "{big:?}");
        assert!(probe(Duration::from_millis(300)).is_err());
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        lan(&s, Some(Duration::from_millis(300)));
        lan(&s, None);
    }
}
