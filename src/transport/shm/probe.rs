//! Probes of what the shared-memory link needs from the kernel, for `pipecast doctor`: a real
//! cross-memory attach between two sibling processes (as two ranks under one launcher are) and
//! a real `memfd` ring. Each answers `Ok` or the reason, as the link would meet it at setup.

use super::ring::Ring;
use std::io;

/// Bytes the probe reads from its sibling.
const PROBE_BYTES: usize = 4096;

/// The pattern the holding sibling keeps (the reading sibling holds other bytes at the same
/// address, so a read of its own memory cannot pass for a read of the other's).
fn pattern(i: usize) -> u8 {
    (i * 7 + 1) as u8
}

/// Whether one process may `process_vm_readv` a *sibling*: forks a holder, then a reader that
/// reads the holder's copy of a buffer. Yama's `ptrace_scope` 1 lets a parent read its
/// children but not siblings, so the probe mirrors two ranks started by one launcher. `Err`
/// holds the errno text (EPERM: Yama or a missing CAP_SYS_PTRACE; ENOSYS or EPERM: a seccomp
/// profile).
pub fn cross_memory_attach() -> Result<(), String> {
    let mut buf: Vec<u8> = (0..PROBE_BYTES).map(pattern).collect();
    let addr = buf.as_ptr() as u64;
    let mut got = vec![0u8; PROBE_BYTES];
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a live array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(format!("pipe: {}", io::Error::last_os_error()));
    }
    let (rd, wr) = (fds[0], fds[1]);
    let close_pipe = || {
        // SAFETY: both descriptors are ours and closed once, here.
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
    };
    // SAFETY: the child only calls async-signal-safe functions (alarm, pause, _exit) and
    // touches no lock or allocator: it is safe even if this process has other threads.
    let holder = unsafe { libc::fork() };
    if holder < 0 {
        close_pipe();
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if holder == 0 {
        // SAFETY: async-signal-safe calls only; the alarm ends the holder should the parent
        // die before killing it.
        unsafe {
            libc::alarm(30);
            loop {
                libc::pause();
            }
        }
    }
    // The reader's copy of the buffer differs from the holder's.
    buf.iter_mut().for_each(|b| *b = 0);
    // SAFETY: as for the holder; the reader uses only process_vm_readv, write and _exit on
    // memory allocated before the fork.
    let reader = unsafe { libc::fork() };
    if reader == 0 {
        let local = libc::iovec {
            iov_base: got.as_mut_ptr().cast(),
            iov_len: PROBE_BYTES,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: PROBE_BYTES,
        };
        // SAFETY: `local` is the reader's own live buffer of PROBE_BYTES bytes; `remote` is an
        // address in the holder, checked by the kernel; errno is read right after the call.
        let code: i32 = unsafe {
            let n = libc::process_vm_readv(holder, &local, 1, &remote, 1, 0);
            if n < 0 {
                *libc::__errno_location()
            } else if n as usize != PROBE_BYTES {
                -2
            } else {
                0
            }
        };
        // SAFETY: writes four bytes from a live local to the pipe, then leaves without
        // running any destructor (the parent owns everything).
        unsafe {
            libc::write(wr, (&code as *const i32).cast(), 4);
            libc::_exit(0);
        }
    }
    let mut code = [0u8; 4];
    let outcome = if reader < 0 {
        Err(format!("fork: {}", io::Error::last_os_error()))
    } else {
        // SAFETY: close our copy of the write end so that read sees EOF if the reader died.
        unsafe { libc::close(wr) };
        // SAFETY: reads at most four bytes into a live array.
        let n = unsafe { libc::read(rd, code.as_mut_ptr().cast(), 4) };
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(reader, std::ptr::null_mut(), 0) };
        if n == 4 {
            Ok(i32::from_ne_bytes(code))
        } else {
            Err("the probing process ended without an answer".to_string())
        }
    };
    // SAFETY: ends and reaps our own holder child; closes the read end (and the write end
    // when the reader was never forked).
    unsafe {
        libc::kill(holder, libc::SIGKILL);
        libc::waitpid(holder, std::ptr::null_mut(), 0);
        libc::close(rd);
        if reader < 0 {
            libc::close(wr);
        }
    }
    match outcome? {
        0 => Ok(()),
        -2 => Err("process_vm_readv between sibling processes read short".into()),
        errno => Err(format!(
            "process_vm_readv between sibling processes: {}",
            io::Error::from_raw_os_error(errno)
        )),
    }
}

/// Whether this process can create, size and map a `memfd` ring (the two-copy fallback of the
/// shared-memory link).
pub fn memfd_ring() -> Result<(), String> {
    Ring::create(PROBE_BYTES)
        .map(drop)
        .map_err(|e| format!("memfd_create and mmap of a {PROBE_BYTES}-byte ring: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_answer_without_hanging() {
        // Either answer is right on some machine; both must come back, and an error must say
        // which call failed.
        if let Err(e) = cross_memory_attach() {
            assert!(e.contains("process_vm_readv") || e.contains("fork"), "{e}");
        }
        memfd_ring().unwrap();
    }
}
