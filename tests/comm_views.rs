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
use common::ranks::{buffer, check, kill_the_last_once_posted, marker, output};

use pipecast::comm::{Comm, Config, Request};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the ranks this binary starts: which body to run.
const CHILD: &str = "PIPECAST_VIEWS_TEST";

const SEGMENT: u64 = 4096;
/// 0, 1, odd, not a multiple of the segment, large.
const SIZES: [usize; 5] = [0, 1, 777, 3 * SEGMENT as usize + 5, (1 << 20) + 3];

/// Starts test `name` of this binary as `n` ranks on loopback with `env`.
fn start_ranks(name: &str, n: usize, env: &[(&str, &str)]) -> Vec<Child> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let exe = std::env::current_exe().unwrap();
    (0..n)
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
        .collect()
}

/// A rank's exit status and stderr.
/// Runs test `name` of this binary as `n` ranks on loopback with `env`; returns each rank's
/// exit status and stderr.
fn spawn_ranks(name: &str, n: usize, env: &[(&str, &str)]) -> Vec<(bool, String)> {
    start_ranks(name, n, env).into_iter().map(output).collect()
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
    // On a view the error names its ranks, with the communicator and the world rank: the
    // dead rank is view 1's rank 0 and no rank of view 2.
    let named_on = |id: u32, e: &pipecast::Error, what: &str| {
        let e = e.to_string();
        let dead_named = match id {
            0 => format!("rank {dead}"),
            1 => format!("rank 0 of communicator 0x1 (world rank {dead})"),
            _ => format!("world rank {dead} (not in communicator {id:#x})"),
        };
        assert!(
            e.contains(&dead_named) || e.contains("closed its connection"),
            "rank {me}: {what}: {e}"
        );
        if id != 0 {
            assert!(
                e.contains(&format!("communicator {id:#x}")),
                "rank {me}: {what}: {e}"
            );
        }
    };
    let named = |e: &pipecast::Error, what: &str| {
        let id = match what {
            "barrier" => 0,
            w if w.contains("without") => 2,
            _ => 1,
        };
        named_on(id, e, what)
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

/// The marker file rank `rank` writes once its broadcasts are in flight.
const MARKS: &str = "PIPECAST_VIEWS_MARKS";

/// Views 1 (every rank), 2 (reversed), 3 (the survivors, not at the victim) and 4 (victim and
/// rank 0), and one nonblocking broadcast in flight on each at every survivor, plus a
/// blocking one on the base: every view's broadcast with the victim as its root, view 3's
/// from rank 2, which never posts it, so none can complete. The test kills the victim; every
/// broadcast, and a later one on each view, ends with an error that names the view's ranks.
fn killed_body() {
    let config = Config {
        timeout: Duration::from_secs(2),
        ..config()
    };
    let mut base = Comm::from_env(config).unwrap();
    let (n, me) = (base.size(), base.rank());
    let victim = n - 1;
    let mut views = vec![
        (victim, base.view(1, &(0..n).collect::<Vec<_>>()).unwrap()),
        (0, base.view(2, &(0..n).rev().collect::<Vec<_>>()).unwrap()),
    ];
    if me != victim {
        views.push((2, base.view(3, &(0..victim).collect::<Vec<_>>()).unwrap()));
    }
    if me == 0 || me == victim {
        views.push((0, base.view(4, &[victim, 0]).unwrap()));
    }
    base.barrier().unwrap();
    if me == victim {
        std::thread::sleep(Duration::from_secs(120));
        panic!("the victim was not killed");
    }
    let len = (1 << 20) + 3;
    let mut reqs = Vec::new();
    for (root, view) in views.iter_mut() {
        if view.id() == 3 && me == 2 {
            continue;
        }
        let req = view.ibcast(buffer(view, len, *root, 5), *root).unwrap();
        reqs.push((view.id(), req));
    }
    std::fs::write(marker(&std::env::var(MARKS).unwrap(), me), b"").unwrap();
    let mut buf = buffer(&base, len, victim, 6);
    let e = base.bcast(&mut buf, victim).unwrap_err();
    eprintln!("rank {me} base: {e}");
    for (id, req) in reqs {
        let e = req.wait().0.unwrap_err().to_string();
        eprintln!("rank {me} view {id}: {e}");
        assert!(
            e.contains(&format!("communicator {id:#x}")),
            "rank {me} view {id}: {e}"
        );
    }
    for (root, view) in views.iter_mut() {
        let mut buf = buffer(view, 10, *root, 7);
        let e = view.bcast(&mut buf, *root).unwrap_err().to_string();
        let id = view.id();
        assert!(
            e.contains(&format!("communicator {id:#x}")),
            "rank {me} view {id} later: {e}"
        );
    }
    eprintln!("rank {me}: done");
}

/// A rank killed (SIGKILL) while broadcasts of every view are in flight ends every one of
/// them at every surviving rank with an error, within the timeout (2 s, plus slack for a
/// loaded machine: no hang), each naming peers in its view's ranks; over shared memory and
/// over TCP.
#[test]
fn a_killed_rank_ends_every_views_broadcast_in_flight() {
    if child("a_killed_rank_ends_every_views_broadcast_in_flight") {
        killed_body();
        return;
    }
    let n = 4;
    for env in [&[][..], &[("PIPECAST_SHM", "off")][..]] {
        let dir = std::env::temp_dir().join(format!(
            "pipecast-views-killed-{}-{}",
            std::process::id(),
            env.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let dir_s = dir.to_str().unwrap().to_string();
        let mut env = env.to_vec();
        env.push((MARKS, &dir_s));
        let mut ranks = start_ranks(
            "a_killed_rank_ends_every_views_broadcast_in_flight",
            n,
            &env,
        );
        let took = kill_the_last_once_posted(&mut ranks, &dir_s, &format!("{env:?}"));
        let outs: Vec<_> = ranks.into_iter().map(output).collect();
        let all: String = outs.iter().map(|(_, e)| e.as_str()).collect();
        for (r, (ok, stderr)) in outs.iter().enumerate() {
            assert!(ok, "{env:?}: rank {r} failed:\n{stderr}");
            assert!(stderr.contains(&format!("rank {r}: done")), "{stderr}");
        }
        // The first rank that noticed names the victim; every rank's errors carry that text,
        // so the reversed view names it as its rank 0.
        assert!(
            all.contains("rank 0 of communicator 0x2 (world rank 3)"),
            "{env:?}: the victim is not named in view 2's ranks:\n{all}"
        );
        eprintln!(
            "{env:?}: every survivor ended {} ms after the kill",
            took.as_millis()
        );
        eprintln!("{all}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

const LATE: &str = "PIPECAST_VIEWS_LATE";

/// Rank 1 comes LATE seconds after the others into broadcasts on views (the timeout is 2 s):
/// a nonblocking broadcast on the reversed view, a blocking one on the view of ranks 1 and 2
/// from rank 1, and one on the base, posted in different orders; all complete byte-exact.
fn late_body() {
    let config = Config {
        timeout: Duration::from_secs(2),
        ..config()
    };
    let mut base = Comm::from_env(config).unwrap();
    let (n, me) = (base.size(), base.rank());
    let late = 1;
    let mut reversed = base.view(1, &(0..n).rev().collect::<Vec<_>>()).unwrap();
    let mut pair = (me != 0).then(|| base.view(2, &[1, 2]).unwrap());
    base.barrier().unwrap();
    let t0 = Instant::now();
    if me == late {
        let secs: u64 = std::env::var(LATE).unwrap().parse().unwrap();
        std::thread::sleep(Duration::from_secs(secs));
    }
    let len = (1 << 20) + 3;
    let req = reversed.ibcast(buffer(&reversed, len, 0, 11), 0).unwrap();
    let on_base = |base: &mut Comm| {
        let mut buf = buffer(base, len, 0, 12);
        base.bcast(&mut buf, 0).unwrap();
        check(base, &buf, len, 12, "bcast on the base");
    };
    if me == 0 {
        on_base(&mut base);
    }
    if let Some(pair) = pair.as_mut() {
        let mut buf = buffer(pair, len, 0, 13);
        pair.bcast(&mut buf, 0).unwrap();
        check(pair, &buf, len, 13, "bcast on the pair");
    }
    if me != 0 {
        on_base(&mut base);
    }
    let (result, buf) = req.wait();
    result.unwrap();
    check(
        &reversed,
        &buf.unwrap(),
        len,
        11,
        "ibcast on the reversed view",
    );
    base.barrier().unwrap();
    eprintln!("rank {me}: done after {} ms", t0.elapsed().as_millis());
}

/// MPI has no timeouts: a rank late by 20 s (ten times the timeout) is waited for on views
/// as on the base, over shared memory and over TCP at once.
#[test]
fn a_rank_late_by_20_s_is_waited_for_on_views() {
    if child("a_rank_late_by_20_s_is_waited_for_on_views") {
        late_body();
        return;
    }
    let runs: Vec<_> = [&[][..], &[("PIPECAST_SHM", "off")][..]]
        .into_iter()
        .map(|env| {
            std::thread::spawn(move || {
                let mut env = env.to_vec();
                env.push((LATE, "20"));
                let name = "a_rank_late_by_20_s_is_waited_for_on_views";
                (env.clone(), spawn_ranks(name, 3, &env))
            })
        })
        .collect();
    for run in runs {
        let (env, outs) = run.join().unwrap();
        for (rank, (ok, stderr)) in outs.iter().enumerate() {
            assert!(ok, "{env:?}: rank {rank} failed:\n{stderr}");
            assert!(stderr.contains(&format!("rank {rank}: done")), "{stderr}");
        }
    }
}
