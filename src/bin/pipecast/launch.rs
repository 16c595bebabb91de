//! The local process launcher of `pipecast bench --local` and `pipecast calibrate --local`:
//! runs the same command as N ranks on loopback and reports how each ended.

use crate::CliResult;

/// Runs this same command as `n` local ranks on loopback: picks a free rendezvous port,
/// spawns `n` copies of the current executable with PIPECAST_RANK/SIZE/RENDEZVOUS set (and
/// the `--local N` argument removed), waits for all, and fails if any failed.
pub fn spawn_local(n: usize, flag: &str, flag_takes_value: bool) -> CliResult {
    if n > MAX_LOCAL_RANKS {
        return Err(format!(
            "{flag} {n}: at most {MAX_LOCAL_RANKS} local ranks (each rank opens a connection to \
             every other and runs its own threads); for more, start ranks with a launcher \
             (PIPECAST_RANK, PIPECAST_SIZE, PIPECAST_RENDEZVOUS)"
        )
        .into());
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let exe = std::env::current_exe()?;
    let mut args: Vec<String> = Vec::new();
    let mut skip = false;
    for a in std::env::args().skip(1) {
        if skip {
            skip = false;
        } else if a == flag {
            skip = flag_takes_value;
        } else if !a.starts_with(&format!("{flag}=")) {
            args.push(a);
        }
    }
    let mut children = Vec::with_capacity(n);
    for rank in 0..n {
        let child = std::process::Command::new(&exe)
            .args(&args)
            .env("PIPECAST_RANK", rank.to_string())
            .env("PIPECAST_SIZE", n.to_string())
            .env("PIPECAST_RENDEZVOUS", format!("127.0.0.1:{port}"))
            .env("PIPECAST_IP", "127.0.0.1")
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                for mut c in children {
                    c.kill().ok();
                    c.wait().ok();
                }
                return Err(format!("cannot start rank {rank} ({}): {e}", exe.display()).into());
            }
        }
    }
    let mut failed = Vec::new();
    let mut killed = Vec::new();
    for (rank, mut c) in children.into_iter().enumerate() {
        let status = c.wait()?;
        match std::os::unix::process::ExitStatusExt::signal(&status) {
            Some(sig) => killed.push(format!(
                "rank {rank} was killed by signal {sig}{}",
                signal_hint(sig)
            )),
            None if !status.success() => failed.push(rank),
            None => {}
        }
    }
    let mut why = killed;
    if !failed.is_empty() {
        why.push(format!("ranks {failed:?} failed (their errors are above)"));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("; ").into())
    }
}

/// Most ranks `--local` starts.
pub const MAX_LOCAL_RANKS: usize = 256;

/// What a signal that ended a rank usually means.
fn signal_hint(sig: i32) -> &'static str {
    match sig {
        9 => " (SIGKILL: killed, e.g. by the kernel's out-of-memory killer — see dmesg)",
        11 => " (SIGSEGV: a crash)",
        6 => " (SIGABRT)",
        15 => " (SIGTERM)",
        2 => " (SIGINT)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_local_ranks_is_a_clear_error() {
        let e = spawn_local(MAX_LOCAL_RANKS + 1, "--local", true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 256 local ranks"), "{e}");
        assert!(signal_hint(9).contains("out-of-memory"));
    }
}
