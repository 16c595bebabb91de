//! Batched sends and receives through io_uring: one `io_uring_enter` serves every ready
//! connection.
//!
//! Each connection's frames go out as one `IORING_OP_SENDMSG` with `MSG_DONTWAIT |
//! MSG_NOSIGNAL`, so a full socket buffer gives a short count or `EAGAIN` (never a blocked
//! ring) and a dead peer never raises SIGPIPE. `send_batch` waits for every completion before
//! returning, so the iovecs and buffers it was given are never used after it returns.

use std::io::{self, IoSlice};
use std::os::fd::RawFd;

/// Most sends per batch (the ring's size).
pub const BATCH: usize = 64;

/// Where one receive goes: socket and up to two (destination, room) pieces (a piece of room
/// 0 is skipped).
pub type RecvTarget = (RawFd, [(*mut u8, usize); 2]);

pub struct Ring {
    ring: io_uring::IoUring,
}

impl Ring {
    /// A ring, or the reason io_uring is unavailable (then use plain `sendmsg`).
    pub fn new() -> io::Result<Ring> {
        Ok(Ring {
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
        self.reap(n, batch.len())
    }
}

impl Ring {
    /// Receives on each fd into its target (one `IORING_OP_RECV` with `MSG_DONTWAIT` each, all
    /// in one submission); returns one result per entry. Entries beyond [`BATCH`] are not
    /// attempted (`WouldBlock`). An `Err` means the ring failed: drop it.
    ///
    /// # Safety
    /// Every target must be valid for writes of its length, and the targets pairwise
    /// disjoint and not otherwise accessed, until this function returns.
    pub unsafe fn recv_batch(
        &mut self,
        batch: &[RecvTarget],
    ) -> io::Result<Vec<io::Result<usize>>> {
        let n = batch.len().min(BATCH);
        let iovecs: Vec<[libc::iovec; 2]> = batch[..n]
            .iter()
            .map(|(_, pieces)| {
                pieces.map(|(ptr, len)| libc::iovec {
                    iov_base: ptr.cast(),
                    iov_len: len,
                })
            })
            .collect();
        let mut headers: Vec<libc::msghdr> = iovecs
            .iter()
            .map(|iov| {
                // SAFETY: an all-zero msghdr is valid (no name, no control data).
                let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                m.msg_iov = iov.as_ptr() as *mut libc::iovec;
                m.msg_iovlen = if iov[1].iov_len == 0 { 1 } else { 2 };
                m
            })
            .collect();
        {
            let mut sq = self.ring.submission();
            for (i, (&(fd, _), header)) in batch[..n].iter().zip(headers.iter_mut()).enumerate() {
                let sqe = io_uring::opcode::RecvMsg::new(io_uring::types::Fd(fd), header)
                    .flags(libc::MSG_DONTWAIT as u32)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the caller guarantees the targets stay valid and exclusive until we
                // return; `iovecs` and `headers` live (unmoved) until then too, and we return
                // only after reaping every completion.
                unsafe { sq.push(&sqe) }
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
        }
        self.reap(n, batch.len())
    }

    /// Submits and waits until `n` completions are reaped; pads to `total` with WouldBlock.
    fn reap(&mut self, n: usize, total: usize) -> io::Result<Vec<io::Result<usize>>> {
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
        out.extend((n..total).map(|_| Err(io::ErrorKind::WouldBlock.into())));
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
        let Ok(mut ring) = Ring::new() else {
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
        // And back, batched receives into two buffers.
        use std::io::Write;
        a_peer.write_all(b"xyz").unwrap();
        b_peer.write_all(b"q").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (mut ra, mut rb) = ([0u8; 8], [0u8; 8]);
        let targets = [
            (
                a.as_raw_fd(),
                [(ra.as_mut_ptr(), 2), (ra[2..].as_mut_ptr(), 6)],
            ),
            (
                b.as_raw_fd(),
                [(rb.as_mut_ptr(), rb.len()), (std::ptr::null_mut(), 0)],
            ),
        ];
        // SAFETY: two distinct live arrays, untouched until the call returns.
        let r = unsafe { ring.recv_batch(&targets) }.unwrap();
        assert_eq!(r[0].as_ref().unwrap(), &3);
        assert_eq!(r[1].as_ref().unwrap(), &1);
        assert_eq!(&ra[..3], b"xyz");
        assert_eq!(rb[0], b'q');
    }
}
