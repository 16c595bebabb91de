//! Communicators joined on existing engines (`Comm::join_on`, issue 30 "One engine per
//! process"): two jobs, each with its own engine, make a communicator over their union; it
//! runs on each process's engine (no thread more), its broadcasts interleave and run at once
//! with the old communicators', byte-exact at every rank; a member whose engine cannot take
//! it makes every member fall back to its own engine; with shared memory on, processes of
//! different engines on one host fall back too, but only while every process keeps at most 2
//! engines; a killed process ends the joined communicator's broadcasts with an error.

mod common;
use common::ranks::{board, buffer, check, kill_the_last_once_posted, marker, output, InProcess};

use pipecast::comm::{Comm, Config, TcpRendezvous};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

const SEGMENT: u64 = 4096;
/// 0, 1, odd, not a multiple of the segment, large.
const SIZES: [usize; 5] = [0, 1, 777, 3 * SEGMENT as usize + 5, (1 << 20) + 3];
const CHILD: &str = "PIPECAST_JOIN_ON_CHILD";

/// The thread tests count this process's threads: one at a time.
static COUNTING: Mutex<()> = Mutex::new(());

fn config() -> Config {
    Config {
        segment: Some(SEGMENT),
        timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

/// [`config`] on a machine named `machine` (PIPECAST_MACHINE): two jobs on this host named
/// apart join their engines with shared memory on; on one machine they would fall back (an
/// engine of their own gives them shared memory, joined they would talk over TCP).
fn config_on(machine: &str) -> Config {
    Config {
        machine: Some(machine.into()),
        ..config()
    }
}

/// This process's pipecast progress threads (`pipecast-progress-R`, 15 characters kept).
fn progress_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("pipecast-progr"))
        .count()
}

/// The seed of broadcast `k` from `root` on communicator `tag`.
fn seed(tag: usize, k: usize, root: usize) -> usize {
    tag * 1000 + k * 10 + root
}

/// Every root and size on `joined`, blocking, each followed by one on `base` (interleaved),
/// then nonblocking ones on both in flight at once.
fn interleaved(joined: &mut Comm, base: &mut Comm) {
    for root in 0..joined.size() {
        for (k, &len) in SIZES.iter().enumerate() {
            let s = seed(1, k, root);
            let mut buf = buffer(joined, len, root, s);
            joined.bcast(&mut buf, root).unwrap();
            check(joined, &buf, len, s, "blocking");
            let broot = (root + k) % base.size();
            let s = seed(2, k, broot);
            let mut buf = buffer(base, len, broot, s);
            base.bcast(&mut buf, broot).unwrap();
            check(base, &buf, len, s, "blocking, old communicator");
        }
    }
    for round in 0..2 {
        let mut reqs = Vec::new();
        for (k, &len) in SIZES.iter().enumerate() {
            let jroot = (k + round) % joined.size();
            let s = seed(3 + round, k, jroot);
            let r = joined.ibcast(buffer(joined, len, jroot, s), jroot).unwrap();
            reqs.push((true, r, len, s));
            let broot = (k + round + 1) % base.size();
            let s = seed(5 + round, k, broot);
            let r = base.ibcast(buffer(base, len, broot, s), broot).unwrap();
            reqs.push((false, r, len, s));
        }
        for (on_joined, r, len, s) in reqs {
            let (res, buf) = r.wait();
            res.unwrap();
            let comm = if on_joined { &*joined } else { &*base };
            check(
                comm,
                &buf.unwrap(),
                len,
                s,
                "nonblocking, in flight together",
            );
        }
    }
}

/// Job A's ranks and job B's as threads: `a` and `b` ranks, the union ordered A0, B0, A1, B1,
/// … (so that no process has the same number in both), each thread a process of its own
/// engine. `b_config` is job B's engine's config; every rank asks `join_config` for the union.
/// Returns, per union rank, whether it joined its engine.
/// Jobs of `a` and `b` threads (each its engine, with `a_config` and `b_config`) make their
/// union with `join_config` on each job's machine; `joins`: whether they are expected to join
/// the engines (else every member falls back to an engine of its own).
fn two_jobs(
    a: usize,
    b: usize,
    a_config: Config,
    b_config: Config,
    join_config: Config,
    joins: bool,
) -> Vec<bool> {
    let _one = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let n = a + b;
    let mut order: Vec<(char, usize)> = Vec::new();
    for i in 0..a.max(b) {
        if i < a {
            order.push(('a', i));
        }
        if i < b {
            order.push(('b', i));
        }
    }
    let (board_a, board_b, board_u) = (board(a), board(b), board(n));
    let sync = Arc::new(Barrier::new(n + 1));
    let before = progress_threads();
    let threads: Vec<_> = order
        .iter()
        .enumerate()
        .map(|(urank, &(job, rank))| {
            let (gsize, board, config) = match job {
                'a' => (a, board_a.clone(), a_config.clone()),
                _ => (b, board_b.clone(), b_config.clone()),
            };
            let join_config = Config {
                machine: config.machine.clone(),
                ..join_config.clone()
            };
            let (board_u, sync) = (board_u.clone(), sync.clone());
            std::thread::spawn(move || {
                let boot = Box::new(InProcess { rank, board });
                let mut base = Comm::new(rank, gsize, boot, config).unwrap();
                base.barrier().unwrap();
                sync.wait(); // the main thread counts the engines' threads
                sync.wait();
                let boot = Box::new(InProcess {
                    rank: urank,
                    board: board_u,
                });
                let mut joined =
                    Comm::join_on(Some(&base), 9, urank, n, boot, Ok(join_config)).unwrap();
                let shared = joined.same_engine(&base);
                if shared {
                    assert_eq!(joined.id(), 9);
                    // The other job's processes are reached over TCP, and it says so.
                    assert!(
                        joined.transport().starts_with("tcp"),
                        "{} on an engine of {}",
                        joined.transport(),
                        base.transport()
                    );
                    assert_eq!(joined.engine_processes(), n, "union rank {urank}");
                } else {
                    assert_eq!(joined.id(), 0);
                    assert_eq!(base.engine_processes(), gsize);
                }
                sync.wait(); // counted again
                sync.wait();
                interleaved(&mut joined, &mut base);
                // A view of the joined communicator (its last rank, rank 0 and rank 2): it
                // restricts the joined communicator's own topology.
                let members = [n - 1, 0, 2];
                if members.contains(&urank) {
                    let mut view = joined.view(21, &members).unwrap();
                    for root in 0..members.len() {
                        for (k, &len) in SIZES.iter().enumerate() {
                            let s = seed(8, k, root);
                            let mut buf = buffer(&view, len, root, s);
                            view.bcast(&mut buf, root).unwrap();
                            check(&view, &buf, len, s, "view of the joined communicator");
                        }
                    }
                }
                joined.barrier().unwrap();
                drop(joined);
                // The old communicator still runs once the joined one is gone.
                let s = seed(9, 0, 0);
                let mut buf = buffer(&base, 5000, 0, s);
                base.bcast(&mut buf, 0).unwrap();
                check(&base, &buf, 5000, s, "after the joined communicator");
                shared
            })
        })
        .collect();
    // A thread names itself once it runs: a count may need a moment to settle.
    let settled = |want: usize| {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let got = progress_threads() - before;
            if got == want || Instant::now() > until {
                return got;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    sync.wait();
    let engines = settled(n);
    sync.wait();
    sync.wait();
    // The fallback makes an engine per member, joining makes none.
    let own = if joins { 0 } else { n };
    let after = settled(n + own);
    sync.wait();
    let shared: Vec<bool> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        engines, n,
        "one engine per process (thread) before the union"
    );
    assert_eq!(own, shared.iter().filter(|&&s| !s).count());
    assert_eq!(
        after,
        n + own,
        "the union joined {} engines and made {own}",
        n - own
    );
    shared
}

/// Two jobs (2 and 3 processes, each its own engine) make a communicator over their union on
/// their engines: no thread more, every process's table of 5, broadcasts on the old and new
/// communicators interleaved and in flight at once, byte-exact at every rank; over shared
/// memory between a job's processes and TCP between the jobs (all on this host).
#[test]
fn two_jobs_join_on_their_engines() {
    let shared = two_jobs(2, 3, config_on("a"), config_on("b"), config(), true);
    assert!(shared.iter().all(|&s| s), "{shared:?}");
}

/// Job B's engine has another window than the union asks: its engine cannot take the
/// communicator, so every member (not B's alone) makes it with its own engine, as before;
/// its broadcasts are byte-exact too.
#[test]
fn a_member_whose_engine_differs_makes_every_member_fall_back() {
    let mut b = config_on("b");
    b.engine.window += 2;
    let shared = two_jobs(2, 2, config_on("a"), b, config(), false);
    assert!(shared.iter().all(|&s| !s), "{shared:?}");
}

/// Both jobs on one machine with shared memory on, their ranks threads of this one process:
/// the fallback to engines of their own (shared memory between the jobs' processes) would
/// leave the process with one engine more per rank, and it already holds 4 (at most 2 per
/// process, `grow::MAX_ENGINES`), so they join the engines over TCP; as with shared memory
/// off. The fallback itself, between processes of one engine each:
/// `three_jobs_on_one_machine_hold_at_most_two_engines_per_process`.
#[test]
fn two_jobs_on_one_machine_in_one_process_join_the_engines() {
    let shared = two_jobs(2, 2, config(), config(), config(), true);
    assert!(shared.iter().all(|&s| s), "{shared:?}");
    let off = Config {
        shm: pipecast::transport::shm::ShmMode::Off,
        ..config()
    };
    let shared = two_jobs(2, 2, off.clone(), off.clone(), off, true);
    assert!(shared.iter().all(|&s| s), "{shared:?}");
}

/// Starts test `name` of this binary as job A (`a` processes) and job B (`b`), each with its
/// own rendezvous, and a third one for their union (A0, B0, A1, B1, …).
fn start_jobs(name: &str, a: usize, b: usize, env: &[(&str, &str)]) -> Vec<Child> {
    let (pa, pb, pu) = (free_port(), free_port(), free_port());
    let mut order = Vec::new();
    for i in 0..a.max(b) {
        if i < a {
            order.push((pa, a, i));
        }
        if i < b {
            order.push((pb, b, i));
        }
    }
    order
        .iter()
        .enumerate()
        .map(|(urank, &(p, size, rank))| {
            rank_command(name, rank, size, p)
                .env("UNION_RANK", urank.to_string())
                .env("UNION_SIZE", (a + b).to_string())
                .env("UNION_RENDEZVOUS", format!("127.0.0.1:{pu}"))
                .env("PIPECAST_IP", "127.0.0.1")
                // Each job on its own machine name: on one machine, with shared memory on,
                // the union would fall back (three_jobs_on_one_machine_…).
                .env("PIPECAST_MACHINE", if p == pa { "job-a" } else { "job-b" })
                .env("PIPECAST_LOG", "warn")
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// A free port of loopback, for a rendezvous.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// This test binary as rank `rank` of a job of `size` processes whose rendezvous listens at
/// loopback's `port`, running test `name`'s child body.
fn rank_command(name: &str, rank: usize, size: usize, port: u16) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .env("PIPECAST_RANK", rank.to_string())
        .env("PIPECAST_SIZE", size.to_string())
        .env("PIPECAST_RENDEZVOUS", format!("127.0.0.1:{port}"));
    cmd
}

fn child(name: &str) -> bool {
    std::env::var(CHILD).as_deref() == Ok(name)
}

/// This process's job communicator and the union's, joined on its engine.
fn join_union(config: Config) -> (Comm, Comm) {
    let base = Comm::from_env(config.clone()).unwrap();
    let var = |k: &str| std::env::var(k).unwrap();
    let (urank, usize_): (usize, usize) = (
        var("UNION_RANK").parse().unwrap(),
        var("UNION_SIZE").parse().unwrap(),
    );
    let boot = TcpRendezvous::new(
        urank,
        usize_,
        &var("UNION_RENDEZVOUS"),
        Duration::from_secs(60),
    )
    .unwrap();
    // The settings the job's engine took from the environment (PIPECAST_SHM, …).
    drop(config);
    let config = base.config().clone();
    let joined = Comm::join_on(Some(&base), 5, urank, usize_, Box::new(boot), Ok(config)).unwrap();
    assert!(joined.same_engine(&base));
    assert_eq!(joined.engine_processes(), usize_);
    (base, joined)
}

fn processes_body() {
    let (mut base, mut joined) = join_union(config());
    interleaved(&mut joined, &mut base);
    joined.barrier().unwrap();
    eprintln!("rank {}: done", joined.rank());
}

/// The same as processes: jobs of 2 and 2 processes (each its own engine and rendezvous),
/// their union joined on the engines, over shared memory within a job and TCP between, and
/// over TCP alone.
#[test]
fn two_jobs_of_processes_join_on_their_engines() {
    let name = "two_jobs_of_processes_join_on_their_engines";
    if child(name) {
        processes_body();
        return;
    }
    for env in [&[][..], &[("PIPECAST_SHM", "off")][..]] {
        let outs: Vec<_> = start_jobs(name, 2, 2, env)
            .into_iter()
            .map(output)
            .collect();
        for (r, (ok, stderr)) in outs.iter().enumerate() {
            assert!(ok, "{env:?}: union rank {r} failed:\n{stderr}");
            assert!(stderr.contains(&format!("rank {r}: done")), "{stderr}");
        }
    }
}

/// This process's progress threads once they number `want` (a thread names itself once it
/// runs), or what they number after 10 s.
fn threads_settled(want: usize) -> usize {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let got = progress_threads();
        if got == want || Instant::now() > until {
            return got;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The union `name` (`AB` or `AC`) of this process's job with another, asked on its engine
/// with id `id`.
fn union_on(base: &Comm, name: &str, id: u32) -> Comm {
    let var = |k: &str| std::env::var(format!("{name}_{k}")).unwrap();
    let (rank, size): (usize, usize) = (var("RANK").parse().unwrap(), var("SIZE").parse().unwrap());
    let boot = TcpRendezvous::new(rank, size, &var("RENDEZVOUS"), Duration::from_secs(60)).unwrap();
    Comm::join_on(
        Some(base),
        id,
        rank,
        size,
        Box::new(boot),
        Ok(base.config().clone()),
    )
    .unwrap()
}

/// Job A's process: the union with B falls back to an engine of its own (shared memory with
/// B's processes: every process held 1 engine), then the union with C joins the engines (A's
/// processes hold 2: a third would break the bound); job B's and C's: their one union each.
/// At every step: the engines and progress threads this process holds, broadcasts of every
/// root and size on the union and the job's own communicator, byte-exact.
fn three_jobs_body() {
    let job = std::env::var("JOB").unwrap();
    let mut base = Comm::from_env(config()).unwrap();
    assert_eq!((pipecast::comm::live_engines(), threads_settled(1)), (1, 1));
    let mut ab = None;
    if job != "c" {
        let mut u = union_on(&base, "AB", 5);
        assert!(!u.same_engine(&base), "A + B: an engine of its own");
        assert_eq!(u.id(), 0);
        assert_eq!(base.engine_processes(), 2);
        assert_eq!(
            u.transport(),
            "shm:cma",
            "shared memory between A's and B's"
        );
        assert_eq!((pipecast::comm::live_engines(), threads_settled(2)), (2, 2));
        interleaved(&mut u, &mut base);
        u.barrier().unwrap();
        ab = Some(u);
    }
    if job != "b" {
        let mut u = union_on(&base, "AC", 6);
        assert!(u.same_engine(&base), "A + C: joined on the engines");
        assert_eq!((u.id(), u.engine_processes()), (6, 4));
        assert!(u.transport().starts_with("tcp"), "{}", u.transport());
        let held = if job == "a" { 2 } else { 1 };
        assert_eq!(
            (pipecast::comm::live_engines(), threads_settled(held)),
            (held, held),
            "job {job}: no engine more"
        );
        interleaved(&mut u, &mut base);
        u.barrier().unwrap();
    }
    let threads = progress_threads();
    assert!(threads <= 2, "job {job}: {threads} pipecast threads");
    drop(ab);
    eprintln!("job {job}: done, {threads} pipecast threads");
}

/// Three jobs of 2 processes on one machine, shared memory on (the defaults): A + B fall back
/// to engines of their own (shared memory between them; every process held one engine), then
/// A + C join the engines (A's processes hold two: a third would break "at most 2 pipecast
/// threads per process"; they talk over TCP); byte-exact broadcasts of every root and size on
/// each union and each job's communicator, interleaved; at most 2 pipecast engines (threads)
/// in every process, counted in /proc and by `live_engines`.
#[test]
fn three_jobs_on_one_machine_hold_at_most_two_engines_per_process() {
    let name = "three_jobs_on_one_machine_hold_at_most_two_engines_per_process";
    if child(name) {
        three_jobs_body();
        return;
    }
    let jobs = [("a", free_port()), ("b", free_port()), ("c", free_port())];
    let (ab, ac) = (free_port(), free_port());
    let ranks: Vec<(String, Child)> = jobs
        .iter()
        .flat_map(|&(job, p)| (0..2).map(move |rank| (job, p, rank)))
        .map(|(job, p, rank)| {
            let mut cmd = rank_command(name, rank, 2, p);
            cmd.env("JOB", job)
                .env("PIPECAST_IP", "127.0.0.1")
                .env("PIPECAST_LOG", "warn")
                .env_remove("PIPECAST_MACHINE")
                .env_remove("PIPECAST_SHM")
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            // Each union ordered A0, X0, A1, X1.
            for (union, other, up) in [("AB", "b", ab), ("AC", "c", ac)] {
                if job == "a" || job == other {
                    let urank = 2 * rank + usize::from(job != "a");
                    cmd.env(format!("{union}_RANK"), urank.to_string())
                        .env(format!("{union}_SIZE"), "4")
                        .env(format!("{union}_RENDEZVOUS"), format!("127.0.0.1:{up}"));
                }
            }
            (format!("{job}{rank}"), cmd.spawn().unwrap())
        })
        .collect();
    for (who, c) in ranks {
        let (ok, stderr) = output(c);
        assert!(ok, "{who} failed:\n{stderr}");
        let job = &who[..1];
        assert!(stderr.contains(&format!("job {job}: done")), "{stderr}");
        let threads = if job == "c" { 1 } else { 2 };
        assert!(
            stderr.contains(&format!("done, {threads} pipecast threads")),
            "{who}: {stderr}"
        );
    }
}

const MARKS: &str = "PIPECAST_JOIN_ON_MARKS";

/// The union's last rank (job B's) is killed while a broadcast from it is in flight on the
/// joined communicator and one on each job's own: every survivor's ends with an error.
fn killed_body() {
    let config = Config {
        timeout: Duration::from_secs(2),
        ..config()
    };
    let (mut base, mut joined) = join_union(config);
    let (n, me) = (joined.size(), joined.rank());
    let victim = n - 1;
    // Connections to the other job's processes are made: one broadcast over the union first.
    let s = seed(1, 0, 0);
    let mut buf = buffer(&joined, 9999, 0, s);
    joined.bcast(&mut buf, 0).unwrap();
    check(&joined, &buf, 9999, s, "before the kill");
    if me == victim {
        std::thread::sleep(Duration::from_secs(120));
        panic!("the victim was not killed");
    }
    let len = (1 << 20) + 3;
    let req = joined
        .ibcast(buffer(&joined, len, victim, 5), victim)
        .unwrap();
    std::fs::write(marker(&std::env::var(MARKS).unwrap(), me), b"").unwrap();
    let e = req.wait().0.unwrap_err();
    eprintln!("rank {me} joined: {e}");
    let mut buf = vec![0u8; 10];
    let e = joined.bcast(&mut buf, 0).unwrap_err();
    eprintln!("rank {me} joined later: {e}");
    // The engine failed: its other communicators fail too (their peers see it close).
    let mut buf = vec![0u8; 10];
    assert!(base.bcast(&mut buf, 0).is_err());
    eprintln!("rank {me}: done");
}

/// A killed process (SIGKILL) ends the joined communicator's broadcast in flight at every
/// survivor with an error within the timeout (2 s, plus slack for a loaded machine: no hang).
#[test]
fn a_killed_process_ends_the_joined_communicators_broadcast() {
    let name = "a_killed_process_ends_the_joined_communicators_broadcast";
    if child(name) {
        killed_body();
        return;
    }
    let (a, b) = (2, 2);
    let dir = std::env::temp_dir().join(format!("pipecast-join-on-killed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_s = dir.to_str().unwrap().to_string();
    let mut ranks = start_jobs(name, a, b, &[(MARKS, &dir_s)]);
    let took = kill_the_last_once_posted(&mut ranks, &dir_s, "union");
    for (r, (ok, stderr)) in ranks.into_iter().map(output).enumerate() {
        assert!(ok, "union rank {r} failed:\n{stderr}");
        assert!(stderr.contains(&format!("rank {r}: done")), "{stderr}");
    }
    eprintln!(
        "every survivor ended {} ms after the kill",
        took.as_millis()
    );
    std::fs::remove_dir_all(&dir).ok();
}
