//! Communicators as views of one engine (`Comm::view`), in real processes (this test binary
//! runs itself as the ranks, over real TCP and shared memory): dup, halves, the odd ranks, a
//! reversed order, a view of a view and 64 permuted views; every root, sizes 0, 1, odd, not
//! a multiple of the segment and large, byte-exact at every rank; blocking and nonblocking
//! broadcasts mixed, several views' broadcasts in flight at once and posted in different
//! interleavings at different ranks; views made and dropped while others run, an id used
//! again; and a process's threads and descriptors do not grow with the number of views.
//! A rank that dies fails every communicator's broadcast with an error naming it.

mod common;
use common::pattern;

use pipecast::comm::{Comm, Config, Request};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set in the ranks this binary starts: which body to run.
const CHILD: &str = "PIPECAST_VIEWS_TEST";

const SEGMENT: u64 = 4096;
/// 0, 1, odd, not a multiple of the segment, large.
const SIZES: [usize; 5] = [0, 1, 777, 3 * SEGMENT as usize + 5, (1 << 20) + 3];

/// Runs test `name` of this binary as `n` ranks on loopback with `env`; returns each rank's
/// exit status and stderr.
fn spawn_ranks(name: &str, n: usize, env: &[(&str, &str)]) -> Vec<(bool, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|rank| {
            Command::new(&exe)
                .args([name, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD, name)
                .env("PIPECAST_RANK", rank.to_string())
                .env("PIPECAST_SIZE", n.to_string())
                .env("PIPECAST_RENDEZVOUS", format!("127.0.0.1:{port}"))
                .env("PIPECAST_IP", "127.0.0.1")
                .env("PIPECAST_LOG", "warn")
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .collect()
}

fn all_ok(name: &str, n: usize, env: &[(&str, &str)]) {
    for (rank, (ok, stderr)) in spawn_ranks(name, n, env).into_iter().enumerate() {
        assert!(
            ok,
            "{name}, {n} ranks {env:?}: rank {rank} failed:\n{stderr}"
        );
    }
}

/// Whether this process is a rank started for test `name`.
fn child(name: &str) -> bool {
    std::env::var(CHILD).as_deref() == Ok(name)
}

fn config() -> Config {
    Config {
        segment: Some(SEGMENT),
        timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// The seed of broadcast `k` on view `id` from `root`: every broadcast its own pattern.
fn seed(id: u32, k: usize, root: usize) -> usize {
    id as usize * 1000 + k * 10 + root
}

/// This rank's buffer for a broadcast of `len` bytes from `root`: the pattern at the root.
fn buffer(comm: &Comm, len: usize, root: usize, seed: usize) -> Vec<u8> {
    if comm.rank() == root {
        pattern(len, seed)
    } else {
        vec![0xee; len]
    }
}

fn check(comm: &Comm, got: &[u8], len: usize, seed: usize, what: &str) {
    assert!(
        got == pattern(len, seed).as_slice(),
        "view {} rank {}: {what}: {len} bytes differ",
        comm.id(),
        comm.rank()
    );
}

/// Every root and size on `comm`, blocking.
fn every_root_blocking(comm: &mut Comm) {
    for root in 0..comm.size() {
        for (k, &len) in SIZES.iter().enumerate() {
            let s = seed(comm.id(), k, root);
            let mut buf = buffer(comm, len, root, s);
            comm.bcast(&mut buf, root).unwrap();
            check(comm, &buf, len, s, &format!("bcast root {root}"));
        }
    }
}

/// One nonblocking broadcast per view in `views` (root and size by `k`), posted in the
/// order `order` (a different one at each rank), then `k`'s blocking broadcast on `dup`
/// while they run, then all waited for in reverse posting order.
fn in_flight_together(views: &mut [&mut Comm], order: &[usize], dup: &mut Comm, k: usize) {
    let mut posted: Vec<(usize, usize, usize, Request)> = Vec::new();
    for &v in order {
        let comm = &mut *views[v];
        let root = k % comm.size();
        let len = SIZES[(k + v) % SIZES.len()];
        let s = seed(comm.id(), 50 + k, root);
        let req = comm.ibcast(buffer(comm, len, root, s), root).unwrap();
        posted.push((v, len, s, req));
    }
    let root = (k * 3) % dup.size();
    let len = SIZES[k % SIZES.len()];
    let s = seed(dup.id(), 60 + k, root);
    let mut buf = buffer(dup, len, root, s);
    dup.bcast(&mut buf, root).unwrap();
    check(dup, &buf, len, s, "bcast among ibcasts");
    for (v, len, s, req) in posted.into_iter().rev() {
        let (result, buf) = req.wait();
        result.unwrap();
        check(views[v], &buf.unwrap(), len, s, "ibcast");
    }
}

fn views_body() {
    let mut base = Comm::from_env(config()).unwrap();
    let (n, me) = (base.size(), base.rank());
    // Warm up: every pair of ranks talks (flat trees from every root), so that whatever
    // connections the links make on first use are made before the count.
    base.barrier().unwrap();
    let flat: pipecast::comm::Algorithm = "flat".parse().unwrap();
    for root in 0..n {
        let mut buf = buffer(&base, 100, root, root);
        base.bcast_with(&mut buf, root, &flat, None).unwrap();
        check(&base, &buf, 100, root, "warm-up");
    }
    base.barrier().unwrap();
    let (threads0, fds0) = (count("/proc/self/task"), count("/proc/self/fd"));

    every_root_blocking(&mut base);
    // dup (id 1), a reversed order (id 2), this rank's half (id 3 at both halves: ids need
    // only differ among one process's communicators), the odd ranks (id 4) at odd ranks.
    let mut dup = base.view(1, &(0..n).collect::<Vec<_>>()).unwrap();
    let mut reversed = base.view(2, &(0..n).rev().collect::<Vec<_>>()).unwrap();
    let half: Vec<usize> = if me < n / 2 {
        (0..n / 2).collect()
    } else {
        (n / 2..n).collect()
    };
    let mut half = base.view(3, &half).unwrap();
    let odd: Vec<usize> = (1..n).step_by(2).collect();
    let mut odd = (me % 2 == 1).then(|| base.view(4, &odd).unwrap());
    // A view of a view: the half's members in reverse.
    let mut half_rev = half
        .view(5, &(0..half.size()).rev().collect::<Vec<_>>())
        .unwrap();
    assert_eq!(half_rev.process(0), half.process(half.size() - 1));
    for comm in [&mut dup, &mut reversed, &mut half, &mut half_rev] {
        every_root_blocking(comm);
        comm.barrier().unwrap();
    }
    if let Some(odd) = odd.as_mut() {
        every_root_blocking(odd);
    }
    // A duplicate live id, a member twice, a rank out of range, a view without this rank.
    assert!(base.view(3, &[me]).is_err());
    assert!(base.view(90, &[me, me]).is_err());
    assert!(base.view(90, &[me, n]).is_err());
    if n > 1 {
        assert!(base.view(90, &[(me + 1) % n]).is_err());
    }

    // Several views' broadcasts in flight at once, posted in an order that differs by rank.
    for k in 0..6 {
        let mut views: Vec<&mut Comm> = vec![&mut reversed, &mut half, &mut half_rev, &mut base];
        let m = views.len();
        let order: Vec<usize> = (0..m).map(|i| (i + me + k) % m).collect();
        in_flight_together(&mut views, &order, &mut dup, k);
    }

    // Views made and dropped while others run: a request outlives its view.
    let len = SIZES[4];
    let s = seed(2, 99, 0);
    let pending = reversed.ibcast(buffer(&reversed, len, 0, s), 0).unwrap();
    let mut short = base.view(6, &(0..n).collect::<Vec<_>>()).unwrap();
    every_root_blocking(&mut short);
    drop(short);
    drop(reversed);
    let (result, buf) = pending.wait();
    result.unwrap();
    assert_eq!(buf.unwrap(), pattern(len, s), "the dropped view's ibcast");
    // Once every member is done with view 6, its id may name a new view.
    dup.barrier().unwrap();
    let mut again = dup.view(6, &(0..n).rev().collect::<Vec<_>>()).unwrap();
    every_root_blocking(&mut again);

    // 64 views, each a permutation of the ranks, broadcasts round robin, some nonblocking.
    let mut many: Vec<Comm> = (0..64u32)
        .map(|i| {
            let members: Vec<usize> = (0..n).map(|r| (r * 5 + i as usize) % n).collect();
            let members = if n % 5 == 0 {
                (0..n).map(|r| (r + i as usize) % n).collect()
            } else {
                members
            };
            base.view(100 + i, &members).unwrap()
        })
        .collect();
    for round in 0..2 {
        let mut reqs = Vec::new();
        for (i, comm) in many.iter_mut().enumerate() {
            let root = (i + round) % n;
            let len = SIZES[(i + round) % SIZES.len()];
            let s = seed(comm.id(), round, root);
            if (i + me) % 3 == 0 {
                reqs.push((
                    i,
                    len,
                    s,
                    comm.ibcast(buffer(comm, len, root, s), root).unwrap(),
                ));
            } else {
                let mut buf = buffer(comm, len, root, s);
                comm.bcast(&mut buf, root).unwrap();
                check(comm, &buf, len, s, "one of 64");
            }
        }
        for (i, len, s, req) in reqs {
            let (result, buf) = req.wait();
            result.unwrap();
            check(&many[i], &buf.unwrap(), len, s, "ibcast on one of 64");
        }
    }
    let (threads1, fds1) = (count("/proc/self/task"), count("/proc/self/fd"));
    assert!(
        threads1 <= threads0,
        "rank {me}: {threads0} threads before the views, {threads1} with {} views",
        many.len() + 6
    );
    assert!(
        fds1 <= fds0,
        "rank {me}: {fds0} descriptors before the views, {fds1} with {} views",
        many.len() + 6
    );
    // The base goes first; the views still work.
    many[0].barrier().unwrap();
    drop(base);
    every_root_blocking(&mut many[1]);
    drop(many);
    dup.barrier().unwrap();
}

#[test]
fn views_in_processes() {
    if child("views_in_processes") {
        views_body();
        return;
    }
    all_ok("views_in_processes", 2, &[]);
    all_ok("views_in_processes", 5, &[("PIPECAST_SHM", "off")]);
    all_ok("views_in_processes", 8, &[]);
}

fn failure_body() {
    let mut base = Comm::from_env(config()).unwrap();
    let (n, me) = (base.size(), base.rank());
    let dead = n - 1;
    let mut all = base.view(1, &(0..n).rev().collect::<Vec<_>>()).unwrap();
    let others: Vec<usize> = (0..dead).collect();
    let mut without = (me != dead).then(|| base.view(2, &others).unwrap());
    base.barrier().unwrap();
    if me == dead {
        // Its progress thread finishes the barrier's last messages meanwhile; the others'
        // broadcasts cannot complete without this rank whenever it goes.
        std::thread::sleep(Duration::from_secs(1));
        std::process::exit(0);
    }
    // Every communicator's broadcast ends. A broadcast may complete where it needs nothing
    // of the dead rank (a root whose children all received); a barrier needs every rank,
    // so it fails; from then on every communicator of the engine fails, the view without the
    // dead rank too (never a wait for a rank not in its tree). Each error names the dead
    // rank, or the peer that closed its links when it failed because of it.
    let named = |e: &pipecast::Error, what: &str| {
        let e = e.to_string();
        assert!(
            e.contains(&format!("rank {dead}")) || e.contains("closed its connection"),
            "rank {me}: {what}: {e}"
        );
    };
    let len = 1 << 20;
    let req = all.ibcast(buffer(&all, len, 1, 7), 1).unwrap();
    let e = base.barrier().unwrap_err();
    named(&e, "barrier");
    match req.wait() {
        (Ok(()), buf) => check(&all, &buf.unwrap(), len, 7, "ibcast before the failure"),
        (Err(e), _) => named(&e, "ibcast"),
    }
    let mut buf = buffer(&all, 10, 0, 8);
    named(
        &all.bcast(&mut buf, 0).unwrap_err(),
        "the view after the failure",
    );
    let without = without.as_mut().unwrap();
    let mut buf = buffer(without, 1000, 0, 9);
    named(
        &without.bcast(&mut buf, 0).unwrap_err(),
        "the view without the dead rank",
    );
    eprintln!("rank {me}: done");
}

#[test]
fn a_dead_rank_fails_every_communicator() {
    if child("a_dead_rank_fails_every_communicator") {
        failure_body();
        return;
    }
    for env in [&[("PIPECAST_SHM", "off")][..], &[]] {
        let ranks = spawn_ranks("a_dead_rank_fails_every_communicator", 3, env);
        for (rank, (ok, stderr)) in ranks.iter().enumerate() {
            assert!(ok, "{env:?}: rank {rank} failed:\n{stderr}");
        }
    }
}
