//! Cross-memory attach: reading another process's memory with `process_vm_readv(2)`, the
//! single copy of the shared-memory link. The kernel allows it when this process may ptrace
//! the other (same user and Yama's `ptrace_scope` 0, or CAP_SYS_PTRACE); containers' seccomp
//! profiles and Yama often refuse it, which the link detects at setup with a probe.

use std::io;

/// Copies `dst.len()` bytes from address `addr` of process `pid` into `dst`.
pub fn read(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` describes the live, exclusively borrowed rest of `dst`; the kernel
        // writes at most `iov_len` bytes there. `remote` is only an address in the other
        // process, checked by the kernel (EFAULT when unmapped), never dereferenced here.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "process {pid} has no readable memory at {:#x}",
                    addr + done as u64
                ),
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether this process can read `expect.len()` bytes at `addr` of `pid` and finds `expect`
/// there: `Err` says why not.
pub fn probe(pid: i32, addr: u64, expect: &[u8]) -> Result<(), String> {
    let mut got = vec![0u8; expect.len()];
    match read(pid, addr, &mut got) {
        Ok(()) if got == expect => Ok(()),
        Ok(()) => Err(format!(
            "process {pid} holds other bytes at the probe address (a different PID namespace?)"
        )),
        Err(e) => Err(format!("process_vm_readv of process {pid}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_memory() {
        let src = crate::testing::pattern(100_000, 0);
        let mut dst = vec![0u8; src.len()];
        read(std::process::id() as i32, src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(dst, src);
        probe(std::process::id() as i32, src.as_ptr() as u64, &src[..16]).unwrap();
        let e = probe(std::process::id() as i32, src.as_ptr() as u64, &[1; 16]).unwrap_err();
        assert!(e.contains("other bytes"), "{e}");
        assert!(read(std::process::id() as i32, 8, &mut dst[..4]).is_err());
    }
}
