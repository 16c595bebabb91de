//! The communicator API in one process: ranks as threads, a custom in-process bootstrap
//! (showing the `Bootstrap` trait is object-safe and all the communicator needs), every root,
//! barriers, and a bad topology.

mod common;
use common::pattern;
use common::ranks::{board, InProcess};

use pipecast::comm::{Algorithm, Comm, Config};
use std::sync::Arc;
use std::time::Duration;

fn run_ranks<T: Send + 'static>(
    n: usize,
    config: Config,
    body: impl Fn(&mut Comm) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let board = board(n);
    let body = Arc::new(body);
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let (board, body, config) = (board.clone(), body.clone(), config.clone());
            std::thread::spawn(move || {
                let boot = Box::new(InProcess { rank, board });
                let mut comm = Comm::new(rank, n, boot, config).unwrap();
                body(&mut comm)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
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
    let board = board(1);
    let config = Config {
        topology: Some(pipecast::topology::Topology::single_switch(3)),
        ..Config::default()
    };
    let err = Comm::new(0, 2, Box::new(InProcess { rank: 0, board }), config)
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

/// Eight nonblocking broadcasts of different sizes and roots in flight at once, waited in
/// reverse order: every byte right at every rank.
#[test]
fn overlapping_ibcasts_waited_in_reverse_order() {
    let sizes = [0usize, 1, 7, 8191, 65537, 200_003, (1 << 20) + 3, 3];
    let results = run_ranks(4, Config::default(), move |comm| {
        let me = comm.rank();
        let mut requests = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            let root = (i * 3) % comm.size();
            let buf = if me == root {
                pattern(len, root + i)
            } else {
                vec![0xEE; len]
            };
            requests.push((i, root, comm.ibcast(buf, root).unwrap()));
        }
        let mut ok = true;
        while let Some((i, root, request)) = requests.pop() {
            let (result, buf) = request.wait();
            result.unwrap();
            ok &= buf.unwrap() == pattern(sizes[i], root + i);
        }
        // Blocking broadcasts after them still line up.
        let mut buf = if me == 1 {
            pattern(4096, 9)
        } else {
            vec![0; 4096]
        };
        comm.bcast(&mut buf, 1).unwrap();
        ok && buf == pattern(4096, 9)
    });
    assert!(results.iter().all(|&ok| ok));
}

/// A rank whose own settings are bad still takes part in the agreement: every rank gets the
/// same error naming it, and nobody hangs.
#[test]
fn a_bad_setting_on_one_rank_fails_every_rank_the_same_way() {
    let n = 3;
    let board = board(n);
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let board = board.clone();
            std::thread::spawn(move || {
                let boot = Box::new(InProcess { rank, board });
                let config = if rank == 2 {
                    let mut c = Config::default();
                    pipecast::comm::Settings {
                        iface: None,
                        window: Some("zero".into()),
                        ..Default::default()
                    }
                    .apply(&mut c)
                    .map(|()| c)
                    .map_err(Into::into)
                } else {
                    Ok(Config::default())
                };
                Comm::join(rank, n, boot, config)
                    .err()
                    .map(|e| e.to_string())
            })
        })
        .collect();
    let errors: Vec<String> = threads
        .into_iter()
        .map(|t| t.join().unwrap().expect("every rank fails"))
        .collect();
    assert!(errors.iter().all(|e| e == &errors[0]), "{errors:?}");
    assert!(
        errors[0].contains("rank 2") && errors[0].contains("PIPECAST_WINDOW"),
        "{}",
        errors[0]
    );
}

/// Ranks with different trees would build different plans: the agreement refuses.
#[test]
fn ranks_with_different_settings_fail_together() {
    let n = 2;
    let board = board(n);
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let board = board.clone();
            std::thread::spawn(move || {
                let config = Config {
                    algorithm: if rank == 0 { "linear" } else { "binary" }
                        .parse::<Algorithm>()
                        .unwrap(),
                    ..Config::default()
                };
                Comm::new(rank, n, Box::new(InProcess { rank, board }), config)
                    .err()
                    .map(|e| e.to_string())
            })
        })
        .collect();
    for t in threads {
        let e = t.join().unwrap().expect("both fail");
        assert!(e.contains("disagree on their settings"), "{e}");
    }
}

/// Every rank joins with the settings of its assignments (`Settings::parse_assignments`, as
/// the MPI glue passes them) and returns its outcome.
fn join_with(texts: &[&'static str]) -> Vec<Result<Comm, String>> {
    let n = texts.len();
    let board = board(n);
    let threads: Vec<_> = texts
        .iter()
        .copied()
        .enumerate()
        .map(|(rank, text)| {
            let board = board.clone();
            std::thread::spawn(move || {
                let mut c = Config {
                    timeout: Duration::from_secs(10),
                    ..Config::default()
                };
                let config = pipecast::comm::Settings::parse_assignments(text)
                    .unwrap()
                    .apply(&mut c)
                    .map(|()| c)
                    .map_err(Into::into);
                Comm::join(rank, n, Box::new(InProcess { rank, board }), config)
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// `PIPECAST_IO_URING` and `PIPECAST_MACHINE` are checked and agreed like the other settings
/// (issue 29): a bad value at one rank fails every rank with the same error naming it, ranks
/// that differ fail together, and ranks that agree broadcast.
#[test]
fn io_uring_and_machine_are_agreed() {
    for (texts, says) in [
        (
            ["PIPECAST_IO_URING=1", "PIPECAST_IO_URING=maybe"],
            "rank 1: environment variable PIPECAST_IO_URING: \"maybe\"",
        ),
        (
            ["PIPECAST_MACHINE=m0", "PIPECAST_MACHINE=m 1"],
            "rank 1: environment variable PIPECAST_MACHINE: \"m 1\"",
        ),
        (["", "PIPECAST_IO_URING=0"], "disagree on their settings"),
        (["PIPECAST_MACHINE=m0", ""], "disagree on their settings"),
    ] {
        let errors: Vec<String> = join_with(&texts)
            .into_iter()
            .map(|r| r.err().expect("every rank fails"))
            .collect();
        assert!(errors.iter().all(|e| e == &errors[0]), "{errors:?}");
        assert!(errors[0].contains(says), "{texts:?}: {}", errors[0]);
    }
    let joined = join_with(&[
        "PIPECAST_IO_URING=0;PIPECAST_MACHINE=m0",
        "PIPECAST_IO_URING=0;PIPECAST_MACHINE=m1",
        "PIPECAST_IO_URING=0;PIPECAST_MACHINE=m1",
    ]);
    let threads: Vec<_> = joined
        .into_iter()
        .map(|c| {
            let mut comm = c.unwrap();
            std::thread::spawn(move || {
                assert_eq!(comm.hosts(), 2);
                for root in 0..comm.size() {
                    for len in [0, 1, 999, 70_001, 1 << 20] {
                        let want = pattern(len, root);
                        let mut buf = if comm.rank() == root {
                            want.clone()
                        } else {
                            vec![0; len]
                        };
                        comm.bcast(&mut buf, root).unwrap();
                        assert!(buf == want, "rank {} root {root} len {len}", comm.rank());
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
