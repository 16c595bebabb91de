//! One descriptor that stands for everything the verbs link waits on: its completion
//! channel, its queue pair handshake side channel (the listener and each connection: readable,
//! or writable while its TCP connect is under way), and a flag the link raises while it holds
//! completions it has not handled. The link waits on it itself, and gives it as its
//! [`Link::wait_fd`](crate::transport::Link::wait_fd), so that under a
//! [`Router`](crate::transport::router::Router) whose waiting link is another one, a peer's
//! handshake or a completion still ends that link's wait (never a round's full wait per step).

use crate::transport::Wake;
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An epoll descriptor (level-triggered) over the side channel's descriptors, kept in step
/// with them by [`WaitSet::sync`], plus a fixed set of descriptors and the pending flag.
pub struct WaitSet {
    epoll: OwnedFd,
    /// Readable while [`WaitSet::raise`] was called and [`WaitSet::lower`] not.
    pending: Wake,
    raised: bool,
    /// The side channel's descriptors in the set: fd → (identity, epoll events). The
    /// identity tells a new connection that got a closed one's number from it (closing a
    /// descriptor takes it out of the epoll set, so that one must be added again).
    have: BTreeMap<RawFd, (u64, u32)>,
}

impl WaitSet {
    /// A set holding `fixed` (readable; the completion channel) and the pending flag.
    pub fn new(fixed: &[RawFd]) -> io::Result<WaitSet> {
        // SAFETY: no pointers; a non-negative result is a new descriptor we own.
        let e = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if e < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `e` is fresh and owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(e) };
        let pending = Wake::new()?;
        let set = WaitSet {
            epoll,
            pending,
            raised: false,
            have: BTreeMap::new(),
        };
        for &fd in fixed.iter().chain([&set.pending.raw()]) {
            set.ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32)?;
        }
        Ok(set)
    }

    /// The descriptor: readable while any descriptor of the set is ready or the flag is
    /// raised.
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Makes the set's side-channel part exactly `want`: (descriptor, `POLLIN` or
    /// `POLLOUT`, identity). Only changes cost system calls.
    pub fn sync(&mut self, want: &[(RawFd, i16, u64)]) -> io::Result<()> {
        let wanted: BTreeMap<RawFd, (u64, u32)> = want
            .iter()
            .map(|&(fd, events, id)| (fd, (id, epoll_events(events))))
            .collect();
        let gone: Vec<RawFd> = self
            .have
            .keys()
            .filter(|fd| !wanted.contains_key(fd))
            .copied()
            .collect();
        for fd in gone {
            self.have.remove(&fd);
            // Already out of the set if it was closed (ENOENT/EBADF): nothing to undo.
            self.ctl(libc::EPOLL_CTL_DEL, fd, 0).ok();
        }
        for (&fd, &(id, events)) in &wanted {
            match self.have.get(&fd) {
                Some(&(had, was)) if had == id && was == events => continue,
                Some(&(had, _)) if had == id => self.ctl(libc::EPOLL_CTL_MOD, fd, events)?,
                // New, or a new descriptor with a closed one's number (no longer in the set).
                _ => match self.ctl(libc::EPOLL_CTL_ADD, fd, events) {
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                        self.ctl(libc::EPOLL_CTL_MOD, fd, events)?
                    }
                    r => r?,
                },
            }
            self.have.insert(fd, (id, events));
        }
        Ok(())
    }

    /// Raises the flag: the link holds completions it has not handled.
    pub fn raise(&mut self) {
        if self.raised {
            return;
        }
        self.pending.notify();
        self.raised = true;
    }

    /// Lowers the flag.
    pub fn lower(&mut self) {
        if !self.raised {
            return;
        }
        self.pending.clear();
        self.raised = false;
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a live epoll_event; `fd` is open (the caller's), or, for a
        // deletion, possibly closed already, which the kernel reports as an error.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn epoll_events(poll: i16) -> u32 {
    let mut e = 0;
    if poll & libc::POLLIN != 0 {
        e |= libc::EPOLLIN as u32;
    }
    if poll & libc::POLLOUT != 0 {
        e |= libc::EPOLLOUT as u32;
    }
    e
}

/// Whether `fd` is readable now (no wait): for tests.
#[cfg(test)]
pub(crate) fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    /// The set follows the descriptors it is given (added, changed, removed, and a
    /// descriptor number reused by a new connection), and the flag.
    #[test]
    fn the_set_is_readable_when_what_it_holds_is() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut set = WaitSet::new(&[]).unwrap();
        assert!(!readable(set.fd()));
        set.raise();
        assert!(readable(set.fd()));
        set.lower();
        assert!(!readable(set.fd()));
        set.sync(&[(l.as_raw_fd(), libc::POLLIN, 0)]).unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(readable(set.fd()), "a connection waits on the listener");
        let (a, _) = l.accept().unwrap();
        assert!(!readable(set.fd()));
        // Writable-while-connecting becomes readable-only.
        set.sync(&[
            (l.as_raw_fd(), libc::POLLIN, 0),
            (a.as_raw_fd(), libc::POLLOUT, 1),
        ])
        .unwrap();
        assert!(readable(set.fd()), "a connected socket is writable");
        set.sync(&[
            (l.as_raw_fd(), libc::POLLIN, 0),
            (a.as_raw_fd(), libc::POLLIN, 1),
        ])
        .unwrap();
        assert!(!readable(set.fd()));
        c.write_all(b"x").unwrap();
        assert!(readable(set.fd()), "a frame arrives");
        // The connection is closed and a new one takes its place (usually with its number:
        // the lowest free one, unless another test's thread took it meanwhile): it is in
        // the set.
        drop(a);
        let mut c2 = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        set.sync(&[
            (l.as_raw_fd(), libc::POLLIN, 0),
            (b.as_raw_fd(), libc::POLLIN, 2),
        ])
        .unwrap();
        assert!(!readable(set.fd()));
        c2.write_all(b"y").unwrap();
        assert!(readable(set.fd()), "the new connection's frame");
        set.sync(&[]).unwrap();
        assert!(!readable(set.fd()));
        drop((c, b));
    }
}
