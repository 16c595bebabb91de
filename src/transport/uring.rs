//! Batched sends through io_uring: one `io_uring_enter` sends on every ready connection.
//!
//! Each connection's frames go out as one `IORING_OP_SENDMSG` with `MSG_DONTWAIT |
//! MSG_NOSIGNAL`, so a full socket buffer gives a short count or `EAGAIN` (never a blocked
//! ring) and a dead peer never raises SIGPIPE. `send_batch` waits for every completion before
//! returning, so the iovecs and buffers it was given are never used after it returns.

use std::io::{self, IoSlice};
use std::os::fd::RawFd;

/// Most sends per batch (the ring's size).
pub const BATCH: usize = 64;

pub struct SendRing {
    ring: io_uring::IoUring,
}

impl SendRing {
    /// A ring, or the reason io_uring is unavailable (then use plain `sendmsg`).
    pub fn new() -> io::Result<SendRing> {
        Ok(SendRing {
            ring: io_uring::IoUring::new(BATCH as u32)?,
        })
    }

    /// Sends `slices` on each fd; returns one result per entry (bytes sent or the error).
    /// Entries beyond [`BATCH`] are not attempted (reported as `WouldBlock`). An `Err` means
    /// the ring itself failed: drop it and fall back to plain syscalls.
    pub fn send_batch(
        &mut self,
        batch: &[(RawFd, Vec<IoSlice<'_>>)],
    ) -> io::Result<Vec<io::Result<usize>>> {
        let n = batch.len().min(BATCH);
        let headers: Vec<libc::msghdr> = batch[..n]
            .iter()
            .map(|(_, slices)| {
                // SAFETY: an all-zero msghdr is valid (no name, no control data).
                let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                // IoSlice is ABI-compatible with iovec on Unix.
                m.msg_iov = slices.as_ptr() as *mut libc::iovec;
                m.msg_iovlen = slices.len() as _;
                m
            })
            .collect();
        {
            let mut sq = self.ring.submission();
            for (i, (fd, _)) in batch[..n].iter().enumerate() {
                let sqe = io_uring::opcode::SendMsg::new(io_uring::types::Fd(*fd), &headers[i])
                    .flags((libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) as u32)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the msghdr, its iovecs and the bytes they point to outlive the
                // operation: this function does not return before its completion is reaped
                // (or, if the ring fails, the caller drops the ring and never submits again).
                unsafe { sq.push(&sqe) }
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
        }
        let mut results: Vec<Option<io::Result<usize>>> = (0..n).map(|_| None).collect();
        let mut reaped = 0;
        while reaped < n {
            match self.ring.submit_and_wait(n - reaped) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                Err(e) => return Err(e),
            }
            for cqe in self.ring.completion() {
                let r = cqe.result();
                let slot = &mut results[cqe.user_data() as usize];
                if slot.is_none() {
                    reaped += 1;
                }
                *slot = Some(if r < 0 {
                    Err(io::Error::from_raw_os_error(-r))
                } else {
                    Ok(r as usize)
                });
            }
        }
        let mut out: Vec<io::Result<usize>> = results
            .into_iter()
            .map(|r| r.expect("every completion reaped"))
            .collect();
        out.extend((n..batch.len()).map(|_| Err(io::ErrorKind::WouldBlock.into())));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn batch_sends_on_two_sockets() {
        let Ok(mut ring) = SendRing::new() else {
            eprintln!("io_uring unavailable here: nothing to test");
            return;
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut a_peer, _) = l.accept().unwrap();
        let b = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b_peer, _) = l.accept().unwrap();
        let batch = vec![
            (
                a.as_raw_fd(),
                vec![IoSlice::new(b"head"), IoSlice::new(b"-a")],
            ),
            (b.as_raw_fd(), vec![IoSlice::new(b"b")]),
        ];
        let r = ring.send_batch(&batch).unwrap();
        assert_eq!(r[0].as_ref().unwrap(), &6);
        assert_eq!(r[1].as_ref().unwrap(), &1);
        let mut got = [0u8; 6];
        a_peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"head-a");
        b_peer.read_exact(&mut got[..1]).unwrap();
        assert_eq!(got[0], b'b');
    }
}
