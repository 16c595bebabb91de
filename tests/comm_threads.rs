//! The communicator API in one process: ranks as threads, a custom in-process bootstrap
//! (showing the `Bootstrap` trait is object-safe and all the communicator needs), every root,
//! barriers, and a bad topology.

use pipecast::comm::{Algorithm, Bootstrap, Comm, CommError, Config};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

/// One slot per rank, and a barrier to take turns.
type Board = Arc<(Mutex<Vec<Option<Vec<u8>>>>, Barrier)>;

/// Allgather through shared memory.
struct Shared {
    rank: usize,
    board: Board,
}

impl Bootstrap for Shared {
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

fn run_ranks<T: Send + 'static>(
    n: usize,
    config: Config,
    body: impl Fn(&mut Comm) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let board = Arc::new((Mutex::new(vec![None; n]), Barrier::new(n)));
    let body = Arc::new(body);
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let (board, body, config) = (board.clone(), body.clone(), config.clone());
            std::thread::spawn(move || {
                let boot = Box::new(Shared { rank, board });
                let mut comm = Comm::new(rank, n, boot, config).unwrap();
                body(&mut comm)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn pattern(len: usize, root: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i * 31 + root * 7 + i / 251) as u8)
        .collect()
}

#[test]
fn every_root_and_tree_delivers_exact_bytes() {
    let n = 5;
    let config = Config {
        segment: Some(1000),
        timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let results = run_ranks(n, config, move |comm| {
        let mut ok = true;
        for tree in [
            "auto",
            "flat",
            "naive-linear",
            "binomial",
            "scatter-allgather",
        ] {
            let tree: Algorithm = tree.parse().unwrap();
            for root in 0..n {
                for len in [0, 1, 999, 1001, 12_345] {
                    let want = pattern(len, root);
                    let mut buf = if comm.rank() == root {
                        want.clone()
                    } else {
                        vec![0; len]
                    };
                    comm.bcast_with(&mut buf, root, &tree, None).unwrap();
                    ok &= buf == want;
                }
                comm.barrier().unwrap();
            }
        }
        ok
    });
    assert!(results.iter().all(|&ok| ok));
}

#[test]
fn topology_size_must_match() {
    let board = Arc::new((Mutex::new(vec![None; 1]), Barrier::new(1)));
    let config = Config {
        topology: Some(pipecast::topology::Topology::single_switch(3)),
        ..Config::default()
    };
    let err = Comm::new(0, 2, Box::new(Shared { rank: 0, board }), config)
        .err()
        .expect("size mismatch");
    assert!(err.to_string().contains("3 machines"), "{err}");
}

#[test]
fn bad_root_is_an_error() {
    let results = run_ranks(2, Config::default(), |comm| {
        let mut buf = vec![0u8; 10];
        comm.bcast(&mut buf, 5).is_err()
    });
    assert!(results.iter().all(|&e| e));
}

#[test]
fn mismatched_roots_fail_instead_of_hanging() {
    let config = Config {
        timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let results = run_ranks(2, config, |comm| {
        let mut buf = vec![1u8; 100];
        let root = comm.rank(); // each rank believes it is the root
        let err = comm.bcast(&mut buf, root).err().map(|e| e.to_string());
        // A failed communicator refuses further work.
        let again = comm.barrier().is_err();
        (err, again)
    });
    for (err, again) in results {
        let err = err.expect("a root mismatch is an error");
        assert!(err.contains("root") || err.contains("closed"), "{err}");
        assert!(again);
    }
}
