//! The two-copy fallback of the shared-memory link: a ring in an anonymous shared file
//! (`memfd_create`) that the writer fills and the reader maps read-only. The descriptor
//! travels once over the pair's Unix socket (`SCM_RIGHTS`); nothing has a name in the file
//! system or in /dev/shm, so nothing outlives the two processes, however they end.
//!
//! Positions grow without bound (`u64`); a position's place in the ring is `pos % size`. The
//! writer never lets a chunk wrap (it skips to the next turn instead) and never overwrites
//! bytes below what the reader said it freed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// A mapped ring.
pub struct Ring {
    ptr: *mut u8,
    size: usize,
    /// The writer's file, which it sends to its readers; a reader closes its copy once
    /// mapped (the mapping keeps the file), so a peer costs it no descriptor.
    fd: Option<OwnedFd>,
    writable: bool,
    /// Every page is in this mapping already ([`Ring::populate`]).
    populated: bool,
}

// SAFETY: the mapping belongs to this value alone (unmapped on drop); moving it to the
// progress thread moves the only handle to it.
unsafe impl Send for Ring {}

impl Ring {
    /// A new ring of `size` bytes that this process writes.
    pub fn create(size: usize) -> io::Result<Ring> {
        // SAFETY: the name is a NUL-terminated literal; a non-negative result is a new fd.
        let fd = unsafe { libc::memfd_create(c"pipecast-ring".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is fresh and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our own open memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ring::map(fd, size, true)
    }

    /// Maps a ring received from its writer, read-only; fails unless the file holds `size`
    /// bytes.
    pub fn open(fd: OwnedFd, size: usize) -> io::Result<Ring> {
        // SAFETY: `st` is a live stat buffer for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on an open descriptor into a live struct.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_size < 0 || (st.st_size as u64) < size as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the peer's ring holds {} bytes, it announced {size}",
                    st.st_size
                ),
            ));
        }
        Ring::map(fd, size, false)
    }

    fn map(fd: OwnedFd, size: usize, writable: bool) -> io::Result<Ring> {
        if size == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty ring"));
        }
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // SAFETY: a new shared mapping of an open file of at least `size` bytes; the kernel
        // picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring {
            ptr: ptr.cast(),
            size,
            fd: writable.then_some(fd),
            writable,
            populated: false,
        })
    }

    /// Maps every page of the ring at once (the writer: allocates them), the first time a
    /// ring is used; later calls do nothing. Page by page, the first use of a writer's ring
    /// costs one fault per 4 KiB at the writer (each zeroing a page) and more at every reader
    /// (2,000–19,000 faults per 64 MiB broadcast among 8 ranks, measured); at setup, the 8 MiB
    /// would be taken from every rank of a job that may never broadcast enough to need it.
    /// Only a cost: a kernel without `MADV_POPULATE_*` (before 5.14) faults page by page.
    pub fn populate(&mut self) {
        if self.populated {
            return;
        }
        self.populated = true;
        let advice = if self.writable {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        // SAFETY: our own mapping of `size` bytes; populating changes no byte of it.
        unsafe { libc::madvise(self.ptr.cast(), self.size, advice) };
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// The writer's file (-1 for a reader's mapping, which keeps none).
    pub fn fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    /// Copies `src` to ring offset `off`.
    pub fn write(&mut self, off: usize, src: &[u8]) {
        assert!(
            off <= self.size && src.len() <= self.size - off,
            "chunk inside the ring"
        );
        // SAFETY: `off + src.len() <= size` (checked above), inside our writable mapping; the
        // reader only reads this range after our record announcing it, so no reference to
        // these bytes exists on our side.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) };
    }

    /// Copies ring offset `off..off + dst.len()` into `dst`, when that lies inside the ring;
    /// `streaming`: with stores that bypass the cache ([`stream`](super::stream)).
    pub fn read(&self, off: u64, dst: &mut [u8], streaming: bool) -> Result<(), String> {
        let end = off.checked_add(dst.len() as u64);
        if end.is_none_or(|e| e > self.size as u64) {
            return Err(format!(
                "a chunk of {} bytes at ring offset {off} does not fit a ring of {} bytes",
                dst.len(),
                self.size
            ));
        }
        // SAFETY: the range is inside the mapping (checked above), which no `&mut` of ours
        // overlaps. The writer may (if it misbehaves) write these bytes concurrently; we copy
        // raw bytes without forming a reference to the shared memory, so that can only
        // garble the copy, not our memory.
        unsafe {
            let src = self.ptr.add(off as usize);
            if streaming {
                super::stream::copy(src, dst);
            } else {
                super::stream::copy_plain(src, dst);
            }
        }
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`size` are our mapping, unmapped once here.
        unsafe { libc::munmap(self.ptr.cast(), self.size) };
    }
}

/// Sends `record` with descriptor `fd` attached (`SCM_RIGHTS`).
pub fn send_with_fd(stream: &UnixStream, record: &[u8], fd: RawFd) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: record.as_ptr() as *mut libc::c_void,
        iov_len: record.len(),
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: a zeroed msghdr is valid; we fill its pointers with live buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `control`, which has room for one cmsg with one fd
    // (CMSG_SPACE); CMSG_FIRSTHDR/CMSG_DATA stay inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` and everything it points to live across the call; the record is only read.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != record.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short send of a record with a descriptor",
        ));
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes and the descriptor attached to them, if any.
pub fn recv_with_fd(stream: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32 * 4) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: a zeroed msghdr is valid; pointers set below to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at live buffers of the stated sizes for the call's duration.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut got = None;
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG_* macros walk it
    // within those bounds, and each SCM_RIGHTS descriptor is a new one now owned by us.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let count = ((*c).cmsg_len as usize - (data as usize - c as usize))
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    let owned = OwnedFd::from_raw_fd(fd);
                    // Keep the first; close any extra a confused peer sent.
                    if got.is_none() {
                        got = Some(owned);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, got))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_passed_over_a_socket_shows_the_writers_bytes() {
        let mut w = Ring::create(1 << 16).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        send_with_fd(&a, &[9u8; 64], w.fd()).unwrap();
        let mut buf = [0u8; 64];
        let (n, fd) = recv_with_fd(&b, &mut buf).unwrap();
        assert_eq!((n, buf), (64, [9u8; 64]));
        let r = Ring::open(fd.expect("a descriptor"), 1 << 16).unwrap();
        w.write(100, b"hello");
        let mut out = [0u8; 5];
        r.read(100, &mut out, false).unwrap();
        assert_eq!(&out, b"hello");
        assert!(r.read((1 << 16) - 2, &mut out, true).is_err());
        assert!(r.read(u64::MAX, &mut out, false).is_err());
        let big = Ring::open(
            Ring::create(4096)
                .map(|r| r.fd.as_ref().unwrap().try_clone().unwrap())
                .unwrap(),
            1 << 20,
        );
        assert!(big.is_err(), "a ring smaller than announced is refused");
    }

    /// A real refusal named: a ring larger than the address space may hold (`ftruncate` or
    /// `mmap` of 2^62 bytes fails whatever `ulimit -v` says; no limit of this process is
    /// changed, so the other tests are not disturbed).
    #[test]
    fn a_ring_too_large_for_the_address_space_is_named() {
        let bytes = 1usize << 62;
        let e = match Ring::create(bytes) {
            Ok(_) => {
                eprintln!("skipped: a 2^62-byte ring was mapped");
                return;
            }
            Err(e) => e,
        };
        let m = crate::transport::limits::memory("the staging ring", &e, bytes as u64);
        assert!(
            m.contains("ulimit -v") && m.contains(&bytes.to_string()),
            "{m}"
        );
    }
}
