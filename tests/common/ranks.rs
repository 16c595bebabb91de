//! Ranks of a test: as threads of this process, with an allgather through its memory
//! ([`InProcess`]), or as processes this test binary starts, killed mid-broadcast
//! ([`kill_the_last_once_posted`]).

use pipecast::comm::{Bootstrap, Comm, CommError};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// One slot per rank, and a barrier to take turns.
pub type Board = Arc<(Mutex<Vec<Option<Vec<u8>>>>, Barrier)>;

/// A board for `n` ranks.
pub fn board(n: usize) -> Board {
    Arc::new((Mutex::new(vec![None; n]), Barrier::new(n)))
}

/// Allgather through this process's memory (ranks as threads): all a communicator needs of
/// a bootstrap.
pub struct InProcess {
    pub rank: usize,
    pub board: Board,
}

impl Bootstrap for InProcess {
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        let (slots, barrier) = &*self.board;
        slots.lock().unwrap()[self.rank] = Some(mine.to_vec());
        barrier.wait();
        let all = slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.clone().unwrap())
            .collect();
        barrier.wait();
        Ok(all)
    }
}

/// A rank process's outcome: whether it exited with success, and its stderr.
pub fn output(c: Child) -> (bool, String) {
    let out = c.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The file a rank process creates in `dir` once its broadcasts are posted.
pub fn marker(dir: &str, rank: usize) -> PathBuf {
    Path::new(dir).join(format!("posted.{rank}"))
}

/// Waits until every rank but the last has posted its broadcasts (its [`marker`] in `dir`,
/// at most 120 s), gives them 300 ms to be under way, kills the last rank, and waits for the
/// survivors to exit (at most 15 s: longer is a hang). Returns the time from the kill to the
/// last survivor's exit. `what` names the run in a failure.
pub fn kill_the_last_once_posted(ranks: &mut Vec<Child>, dir: &str, what: &str) -> Duration {
    let survivors = ranks.len() - 1;
    let posted = |r| marker(dir, r).exists();
    let until = Instant::now() + Duration::from_secs(120);
    while !(0..survivors).all(posted) {
        if Instant::now() > until || ranks.iter_mut().any(|c| c.try_wait().unwrap().is_some()) {
            ranks.iter_mut().for_each(|c| drop(c.kill()));
            let outs: Vec<_> = ranks.drain(..).map(output).collect();
            panic!("{what}: the survivors did not post their broadcasts: {outs:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Their broadcasts are posted; give them a moment to be under way, then kill.
    std::thread::sleep(Duration::from_millis(300));
    let mut victim = ranks.pop().unwrap();
    victim.kill().unwrap();
    victim.wait().unwrap();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(15);
    for (r, c) in ranks.iter_mut().enumerate() {
        while c.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                c.kill().ok();
                panic!("{what}: rank {r} hangs after the kill");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    killed.elapsed()
}

/// This rank's buffer for a broadcast of `len` bytes from `root`: the seeded pattern at the
/// root, a filler elsewhere.
pub fn buffer(comm: &Comm, len: usize, root: usize, seed: usize) -> Vec<u8> {
    if comm.rank() == root {
        super::pattern(len, seed)
    } else {
        vec![0xee; len]
    }
}

/// Checks that `got` is the seeded pattern, byte for byte.
pub fn check(comm: &Comm, got: &[u8], len: usize, seed: usize, what: &str) {
    assert!(
        got == super::pattern(len, seed).as_slice(),
        "communicator {:#x} rank {}: {what}: {len} bytes differ",
        comm.id(),
        comm.rank()
    );
}
