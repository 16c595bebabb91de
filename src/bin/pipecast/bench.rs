//! `pipecast bench`: time real broadcasts between processes (seed 003 §5, Fig. 10 method:
//! barrier, then iterations of broadcast + barrier), verify the data at every rank, and
//! compare with the point-to-point time of the whole message measured in the same run.

mod fds;
mod floor;
mod usage;

use crate::CliResult;
use pipecast::comm::{Algorithm, Comm, Config, Transport};
use pipecast::transport::clock::{monotonic_identity, monotonic_ns};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use usage::Usage;

#[derive(clap::Args)]
pub struct Args {
    /// Spawn N local ranks on loopback (otherwise join the job given by PIPECAST_RANK,
    /// PIPECAST_SIZE and PIPECAST_RENDEZVOUS).
    #[arg(long, value_name = "N")]
    local: Option<usize>,
    /// Message sizes: comma list with K/M/G suffixes (binary units).
    #[arg(long, default_value = "1K,4K,16K,64K,256K,1M,4M,16M,64M")]
    sizes: String,
    /// Schedules: comma list of trees of `pipecast plan` or scatter-allgather.
    #[arg(
        long,
        default_value = "auto,flat,binomial,naive-linear,naive-binary,scatter-allgather"
    )]
    tree: String,
    /// Iterations per size and tree, at least 1 (default: 20, fewer for large messages, at
    /// least 2).
    #[arg(long, value_parser = at_least_one)]
    iters: Option<usize>,
    /// Untimed broadcasts before the timed ones, per size and schedule (OSU's skip
    /// iterations), from every root the timed ones use (with rotating roots, this many per
    /// root): the first broadcast of a schedule from a root sets things up (connections,
    /// rings, first-touch pages). Their bytes are verified too.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Root of every broadcast (default: iteration i uses root i mod N).
    #[arg(long)]
    root: Option<usize>,
    /// Transport: tcp, raweth, raweth:IFACE, verbs or auto (default: PIPECAST_TRANSPORT, else tcp).
    /// raweth needs CAP_NET_RAW and one interface per host (e.g. `pipecast lab run`); verbs a
    /// build with `--features verbs` and an RDMA device at every rank.
    #[arg(long)]
    transport: Option<String>,
    /// Topology file: rank r runs on machine r (default: PIPECAST_TOPOLOGY, else all on one switch).
    #[arg(long)]
    topology: Option<std::path::PathBuf>,
    /// Segment size in bytes of the pipelined trees (K/M suffixes allowed; default: the
    /// model's choice). flat, binomial and scatter-allgather always move whole messages.
    #[arg(long)]
    segment: Option<String>,
    /// Most segments in flight from a rank to one child (the engine's window R).
    #[arg(long, default_value_t = pipecast::engine::Config::default().window)]
    window: u32,
    /// Fail a broadcast that makes no progress for this many milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// Seed of the data pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also measure how much of each nonblocking broadcast overlaps with computation
    /// (`overlap_pct`, OSU `osu_ibcast`'s definition: post the broadcast, compute for as long
    /// as a blocking broadcast takes, wait; 100 % when computing hid the broadcast entirely).
    #[arg(long)]
    overlap: bool,
    /// Run the timed broadcasts round robin over N communicators made as views of the job's
    /// (`Comm::view`: every rank in order, like `MPI_Comm_dup`; ids 1..=N), on its one
    /// engine: how many communicators a process has does not change its threads or
    /// descriptors. 0: on the job's communicator. Barriers and the point-to-point reference
    /// stay on the job's communicator; every view is warmed up from every root.
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=65536))]
    comms: u32,
    /// Rank 0 shows which size and tree runs, one line each, also when stderr is not a
    /// terminal (`pipecast demo` forwards it from the lab).
    #[arg(long, hide = true)]
    progress: bool,
    /// Whether every rank reads one monotonic clock (ranks of one host or of one `pipecast
    /// lab`: one kernel), so that a broadcast can also be timed alone, from the root's start
    /// to the last rank's completion (`bcast_*_us`, `bc/T`). `auto`: the ranks compare their
    /// kernel's boot id and time namespace (`transport::clock`); `no`: never.
    #[arg(long, default_value = "auto", value_parser = ["auto", "yes", "no"])]
    shared_clock: String,
    /// Rank 0 also writes the `--json` report to this file.
    #[arg(long, hide = true)]
    report: Option<std::path::PathBuf>,
    /// Instead of broadcasts: the floor of the kernel's receive paths, no protocol run
    /// (comma list of modes, or `all`; docs/multicast.md, "Receivers' CPU: the floor"): a
    /// sender thread sends the first of --sizes as datagrams of the carrier's segment, a
    /// receiver thread lands them in a buffer; its CPU against one memcpy, --iters times.
    #[arg(long, value_name = "MODES")]
    floor: Option<String>,
    /// With --floor: the sender's and the receiver's network namespaces (needs root;
    /// default: both in this one).
    #[arg(long, value_name = "SEND_NS,RECV_NS", requires = "floor")]
    floor_netns: Option<String>,
    /// With --floor: the interface both use.
    #[arg(long, default_value = "eth0", requires = "floor")]
    floor_iface: String,
}

/// One line of the results: the JSON contract of `pipecast bench --json`.
#[derive(Serialize, Clone, Debug)]
struct Row {
    bytes: u64,
    tree: String,
    segment_bytes: u64,
    avg_us: f64,
    min_us: f64,
    max_us: f64,
    p2p_us: f64,
    verified: bool,
    /// Extension: the fastest point-to-point iteration (ratios of minima are steadier on a
    /// loaded machine).
    p2p_min_us: f64,
    /// Extension: the schedule that ran (`auto` resolved by the cost model).
    ran: String,
    /// Extension: what the transport counted during this row's broadcasts, summed over
    /// ranks (raw Ethernet: retransmits, timeouts, kernel drops, …; nonzero counters only;
    /// absent for TCP).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    transport_counters: BTreeMap<String, u64>,
    /// Extension (`--overlap`): percent of a nonblocking broadcast hidden behind computation,
    /// averaged over ranks and iterations.
    #[serde(skip_serializing_if = "Option::is_none")]
    overlap_pct: Option<f64>,
    /// Extension: one `memcpy` of the message at rank 0, measured in the same run — the
    /// physical limit of a broadcast between ranks of one host.
    memcpy_us: f64,
    /// Extension: every iteration's time (the slowest rank's, µs), in order: medians and
    /// spreads for scripts (bench/sim_vs_lab.py).
    times_us: Vec<f64>,
    /// Extension, only where every rank reads one clock (the report's `clock`): each
    /// iteration's broadcast alone, from the root's start to the last rank's return from it
    /// (µs; no barrier in it, unlike `times_us`), its mean, fastest and slowest, and the
    /// same for the point-to-point reference (`p2p_bcast_us`, the mean: T(m) alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    bcast_avg_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bcast_min_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bcast_max_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bcast_times_us: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p2p_bcast_us: Option<f64>,
    /// Extension: the CPU time of that memcpy (rank 0's thread, µs): the reference for
    /// `cpu_us`, which a busy machine inflates far less than wall time.
    memcpy_cpu_us: f64,
    /// Extension: what one broadcast (+ the closing barrier) cost all ranks together, per
    /// iteration: CPU time (every thread, µs), page faults, context switches.
    cpu_us: f64,
    /// Extension: what one receiving rank's process spent per broadcast it received (CPU
    /// time of every thread, µs): the mean over ranks and iterations, and the largest rank's
    /// mean (the root's own CPU is in `cpu_us` only).
    cpu_recv_us: f64,
    cpu_recv_max_us: f64,
    minflt: f64,
    majflt: f64,
    vcsw: f64,
    ivcsw: f64,
    /// Extension: the most file descriptors any rank held after one of this row's broadcasts
    /// (`/proc/self/fd`, sampled after each, untimed).
    fds_peak: usize,
}

#[derive(Serialize)]
struct Report<'a> {
    ranks: usize,
    /// What ran: `tcp` or `raweth:IFACE` (`auto` resolved).
    transport: &'a str,
    /// Where the model's profile came from (`Comm::profile_source`).
    profile: String,
    results: &'a [Row],
    /// Extension (`--comms`): the views the broadcasts ran round robin over (0: none), and
    /// the slowest rank's time to make them, µs.
    comms: u32,
    comms_setup_us: f64,
    /// Extension: whether every rank read one monotonic clock, and how that was decided
    /// (`--shared-clock`): only then do the rows carry `bcast_*_us`.
    shared_clock: bool,
    clock: &'a str,
    /// Extension: descriptors per rank, over ranks (`bench/fds.rs`; absent without /proc).
    #[serde(skip_serializing_if = "Option::is_none")]
    fds: Option<fds::Report>,
}

pub fn run(args: Args) -> CliResult {
    if let Some(modes) = &args.floor {
        let sizes = parse_sizes(&args.sizes)?;
        return floor::run(floor::Floor {
            modes: modes.clone(),
            netns: args.floor_netns.clone(),
            iface: args.floor_iface.clone(),
            bytes: sizes.first().copied().unwrap_or(16 << 20) as usize,
            reps: args.iters.unwrap_or(5),
            json: args.json,
        });
    }
    if let Some(t) = &args.transport {
        t.parse::<Transport>()
            .map_err(|e| format!("--transport: {e}"))?;
        // Wins over an inherited PIPECAST_TRANSPORT (Comm::from_env reads it).
        std::env::set_var("PIPECAST_TRANSPORT", t);
    }
    let sizes = parse_sizes(&args.sizes)?;
    let trees = parse_trees(&args.tree)?;
    let segment = args.segment.as_deref().map(parse_size).transpose()?;
    if segment == Some(0) || segment.is_some_and(|s| s > u64::from(u32::MAX)) {
        return Err("--segment must be between 1 byte and 4 GiB".into());
    }
    if let Some(n) = args.local {
        if n < 2 {
            return Err(
                "--local needs at least 2 ranks (the point-to-point reference uses two)".into(),
            );
        }
        if let Some(path) = &args.topology {
            // The machines' `ranks` (default 1 each) fill them in file order.
            let file =
                pipecast::input::read_topology(path, pipecast::comm::settings::max_input_bytes()?)?;
            let ranks = file.ranks();
            if ranks != n {
                return Err(format!(
                    "{}: {} machines with {ranks} ranks on them, but --local {n} ranks: ranks fill the machines in file order, so give --local {ranks}",
                    path.display(),
                    file.size()
                )
                .into());
            }
        }
        return crate::launch::spawn_local(n, "--local", true);
    }
    let limit = pipecast::comm::settings::max_input_bytes()?;
    let config = Config {
        topology: args
            .topology
            .as_deref()
            .map(|p| pipecast::input::read_topology(p, limit))
            .transpose()?,
        segment,
        timeout: Duration::from_millis(args.timeout_ms),
        engine: pipecast::engine::Config {
            window: args.window.max(1),
            ..Default::default()
        },
        // `--tree multicast` needs the carrier set up (PIPECAST_MULTICAST may say otherwise).
        multicast: if trees.contains(&Algorithm::Tree(pipecast::plan::TreeKind::Multicast)) {
            pipecast::comm::MulticastMode::Auto
        } else {
            pipecast::comm::MulticastMode::Off
        },
        ..Config::default()
    };
    let mut comm = Comm::from_env(config)?;
    let n = comm.size();
    if n < 2 {
        return Err("pipecast bench needs at least 2 ranks".into());
    }
    if let Some(r) = args.root.filter(|&r| r >= n) {
        return Err(format!("--root {r} is not a rank of this {n}-rank job").into());
    }
    let me = comm.rank();
    let (shared_clock, clock) = one_clock(&mut comm, &args.shared_clock)?;
    let t0 = Instant::now();
    let everyone: Vec<usize> = (0..n).collect();
    let mut views = (1..=args.comms)
        .map(|id| comm.view(id, &everyone))
        .collect::<pipecast::Result<Vec<Comm>>>()?;
    let comms_setup_us = max_over_ranks(&mut comm, t0.elapsed().as_micros() as usize)? as f64;
    let mut held = fds::Peak::after_setup();
    let terminal = std::io::stderr().is_terminal();
    let progress = me == 0 && (args.progress || terminal && !args.json);
    let mut rows = Vec::new();
    let mut all_ok = true;
    for &bytes in &sizes {
        let iters = args
            .iters
            .unwrap_or_else(|| ((128 << 20) / bytes.max(1) as usize).clamp(2, 20));
        let mut buf = vec![0u8; bytes as usize];
        let p2p = Algorithm::PointToPoint {
            to: p2p_peer(comm.topology()),
        };
        // The whole message in one segment (see `comm::segment_for`).
        let warm = measure(
            &mut comm,
            &mut buf,
            &p2p,
            None,
            (args.warmup, Some(0), args.seed),
            &mut [],
            &mut held,
        )?;
        let mut p2p_run = measure(
            &mut comm,
            &mut buf,
            &p2p,
            None,
            (iters, Some(0), args.seed),
            &mut [],
            &mut held,
        )?;
        p2p_run.ok &= warm.ok;
        let (p2p_us, p2p_min_us, _, _, _) = summarize(&mut comm, &p2p_run.times, p2p_run.ok)?;
        let p2p_bcast_us = alone(&mut comm, &p2p_run, shared_clock)?.map(|a| a.0);
        let (memcpy_us, memcpy_cpu_us) = if me == 0 {
            memcpy_time(&buf, iters)
        } else {
            (0.0, 0.0)
        };
        for tree in &trees {
            if progress && terminal {
                eprint!("\r\x1b[K{bytes} B, {tree} ...");
            } else if progress {
                eprintln!("  {} … {tree}", size_name(bytes));
            }
            // Every root the timed broadcasts rotate through is warmed up, or the first row of
            // a size would pay each root's first use alone (session 14: `auto`, measured
            // first, read 1.2–1.65 × the best tree at 1–16 MiB on 8 ranks, within 2 % with
            // one root).
            let warmups = match args.root {
                Some(_) => args.warmup,
                None => args.warmup * n,
            } * views.len().max(1);
            held.mark();
            let warm = measure(
                &mut comm,
                &mut buf,
                tree,
                segment,
                (warmups, args.root, args.seed),
                &mut views,
                &mut held,
            )?;
            let before = comm.transport_counters()?;
            let mut run = measure(
                &mut comm,
                &mut buf,
                tree,
                segment,
                (iters, args.root, args.seed),
                &mut views,
                &mut held,
            )?;
            run.ok &= warm.ok;
            let (avg_us, min_us, max_us, verified, times_us) =
                summarize(&mut comm, &run.times, run.ok)?;
            let bcast = alone(&mut comm, &run, shared_clock)?;
            let spent = usage_sum(&mut comm, run.usage)?;
            let (cpu_recv_us, cpu_recv_max_us) = receivers_cpu(&mut comm, run.recv_cpu_ns)?;
            let per_iter = |n: u64| n as f64 / iters as f64;
            let transport_counters = counters_delta(&mut comm, &before)?;
            all_ok &= verified;
            let overlap_pct = if args.overlap {
                let (pct, ok) = overlap(
                    &mut comm,
                    &buf,
                    tree,
                    segment,
                    (iters, args.root, args.seed),
                    &run.times,
                    &mut held,
                )?;
                all_ok &= ok;
                Some(pct)
            } else {
                None
            };
            rows.push(Row {
                bytes,
                tree: tree.to_string(),
                segment_bytes: run.segment,
                avg_us,
                min_us,
                max_us,
                p2p_us,
                verified,
                p2p_min_us,
                ran: run.ran,
                transport_counters,
                overlap_pct,
                memcpy_us,
                times_us,
                bcast_avg_us: bcast.as_ref().map(|a| a.0),
                bcast_min_us: bcast.as_ref().map(|a| a.1),
                bcast_max_us: bcast.as_ref().map(|a| a.2),
                p2p_bcast_us,
                bcast_times_us: bcast.map(|a| a.4),
                memcpy_cpu_us,
                cpu_us: per_iter(spent.cpu_ns).round() / 1000.0,
                cpu_recv_us: cpu_recv_us.round(),
                cpu_recv_max_us: cpu_recv_max_us.round(),
                minflt: per_iter(spent.minflt),
                majflt: per_iter(spent.majflt),
                vcsw: per_iter(spent.vcsw),
                ivcsw: per_iter(spent.ivcsw),
                fds_peak: max_over_ranks(&mut comm, held.since_mark)?,
            });
        }
    }
    if progress && terminal {
        eprint!("\r\x1b[K");
    }
    let fds = fds_over_ranks(&mut comm, held)?;
    if me == 0 {
        let report = Report {
            ranks: n,
            transport: comm.transport(),
            profile: comm.profile_source(),
            results: &rows,
            comms: args.comms,
            comms_setup_us,
            shared_clock,
            clock: &clock,
            fds,
        };
        if let Some(path) = &args.report {
            std::fs::write(path, serde_json::to_string(&report)?)
                .map_err(|e| format!("--report {}: {e}", path.display()))?;
        }
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_table(n, comm.transport(), &report.profile, &rows, &clock);
            if args.comms > 0 {
                println!(
                    "# broadcasts round robin over {} communicators made as views of the job's (made in {comms_setup_us:.0} us, slowest rank)",
                    args.comms
                );
            }
            if let Some(f) = &report.fds {
                println!(
                    "# descriptors per rank (/proc/self/fd, after setup and after each broadcast): {} after setup, peak {} (rank {}), ranks but 0 {}, median peak {}, least {}",
                    f.after_setup, f.peak, f.peak_rank, f.peak_rest, f.peak_median, f.peak_min
                );
            }
        }
    }
    if !all_ok {
        return Err(
            "data verification failed: some rank received wrong bytes (see verified=false)".into(),
        );
    }
    Ok(())
}

/// What [`measure`] saw at this rank.
struct Measured {
    /// Every iteration's time, µs.
    times: Vec<f64>,
    /// Every iteration delivered the right bytes here.
    ok: bool,
    segment: u64,
    /// The schedule that ran.
    ran: String,
    /// This process's CPU time, faults and switches during the timed part of all iterations.
    usage: Usage,
    /// This process's CPU time (ns) in the iterations where it received (was not the root),
    /// and how many those were.
    recv_cpu_ns: (u64, u64),
    /// Every iteration's root, and this rank's monotonic clock (ns) when it called the
    /// broadcast and when the call returned.
    roots: Vec<usize>,
    marks: Vec<(u64, u64)>,
}

/// Times `iters` broadcasts of `buf` (each followed by a barrier) at this rank from `root`
/// (default: rotating) with the pattern of `seed`, counting descriptors into `held` after
/// each. With `views` (`--comms`), broadcast i runs on view (i / roots) mod N, `roots` being
/// the number of ranks when roots rotate, else 1 (so N × roots iterations use every view
/// from every root); the barriers stay on `comm`.
fn measure(
    comm: &mut Comm,
    buf: &mut [u8],
    tree: &Algorithm,
    segment: Option<u64>,
    (iters, root, seed): (usize, Option<usize>, u64),
    views: &mut [Comm],
    held: &mut fds::Peak,
) -> pipecast::Result<Measured> {
    let n = comm.size();
    let me = comm.rank();
    let mut times = Vec::with_capacity(iters);
    let mut ok = true;
    let mut seg = 0;
    let mut ran = tree.to_string();
    let mut usage = Usage::default();
    let mut recv_cpu_ns = (0, 0);
    let mut roots_used = Vec::with_capacity(iters);
    let mut marks = Vec::with_capacity(iters);
    let roots = if root.is_some() { 1 } else { n };
    for it in 0..iters {
        let root = root.unwrap_or(it % n);
        roots_used.push(root);
        let receives = match tree {
            Algorithm::PointToPoint { to } => me == *to,
            _ => me != root,
        };
        let pattern_seed =
            seed ^ (buf.len() as u64).rotate_left(32) ^ (it as u64) << 8 ^ root as u64;
        if me == root {
            fill(buf, pattern_seed);
        } else {
            buf.fill(0);
        }
        comm.barrier()?;
        let u0 = Usage::now();
        let t0 = Instant::now();
        let on = match views.len() {
            0 => &mut *comm,
            k => &mut views[(it / roots) % k],
        };
        let started = monotonic_ns();
        let info = on.bcast_with(buf, root, tree, segment)?;
        let done = monotonic_ns();
        comm.barrier()?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
        marks.push((started, done));
        let spent = Usage::now() - u0;
        usage += spent;
        if receives {
            recv_cpu_ns.0 += spent.cpu_ns;
            recv_cpu_ns.1 += 1;
        }
        seg = info.segment;
        ran = info.tree.to_string();
        // Untimed: no rank checks its bytes (a CPU-bound pass over the message) until every
        // rank's timed barrier has returned; otherwise the ranks released first take the CPU
        // from those still in it, on a host with more ranks than cores.
        comm.barrier()?;
        held.sample();
        if receives && !matches(buf, pattern_seed) {
            tracing::error!(rank = me, root, bytes = buf.len(), tree = %tree, "received wrong bytes");
            ok = false;
        }
    }
    Ok(Measured {
        times,
        ok,
        segment: seg,
        ran,
        usage,
        recv_cpu_ns,
        roots: roots_used,
        marks,
    })
}

/// Whether every rank reads one monotonic clock (`--shared-clock`: `auto` compares the ranks'
/// [`monotonic_identity`]), and the words the report says it with. Every rank decides alike.
fn one_clock(comm: &mut Comm, given: &str) -> pipecast::Result<(bool, String)> {
    let mine = monotonic_identity().unwrap_or_default();
    let all = comm.allgather(mine.as_bytes())?;
    let theirs: std::collections::BTreeSet<&[u8]> = all.iter().map(Vec::as_slice).collect();
    let one = !mine.is_empty() && theirs.len() == 1;
    Ok(match given {
        "yes" => (true, "shared (--shared-clock yes)".into()),
        "no" => (false, "not used (--shared-clock no)".into()),
        _ if one => (
            true,
            "shared (one kernel boot id and time namespace at every rank)".into(),
        ),
        _ => (
            false,
            format!(
                "not shared ({} different boot ids or time namespaces over the ranks)",
                theirs.len()
            ),
        ),
    })
}

/// Each iteration's broadcast alone where every rank reads one clock (`None` otherwise): from
/// the root's call to the last rank's return, gathered after the iterations (untimed); the
/// mean, fastest, slowest and every iteration's (µs), as [`summarize`]. Every rank calls it.
fn alone(comm: &mut Comm, run: &Measured, shared: bool) -> pipecast::Result<Option<Summary>> {
    if !shared {
        return Ok(None);
    }
    let all = comm.allgather(&serde_json::to_vec(&run.marks).expect("serializable"))?;
    let marks: Vec<Vec<(u64, u64)>> = all
        .iter()
        .map(|b| serde_json::from_slice(b).unwrap_or_default())
        .collect();
    let mut per_iter = Vec::with_capacity(run.roots.len());
    for (it, &root) in run.roots.iter().enumerate() {
        let Some(&(start, _)) = marks.get(root).and_then(|m| m.get(it)) else {
            return Ok(None);
        };
        let last = marks
            .iter()
            .filter_map(|m| m.get(it).map(|&(_, done)| done))
            .max()
            .unwrap_or(start);
        per_iter.push(last.saturating_sub(start) as f64 / 1000.0);
    }
    if per_iter.is_empty() {
        return Ok(None);
    }
    let avg = per_iter.iter().sum::<f64>() / per_iter.len() as f64;
    let min = per_iter.iter().copied().fold(f64::INFINITY, f64::min);
    let max = per_iter.iter().copied().fold(0.0, f64::max);
    let ns = |us: f64| (us * 1000.0).round() / 1000.0;
    let per_iter = per_iter.into_iter().map(ns).collect();
    Ok(Some((ns(avg), ns(min), ns(max), true, per_iter)))
}

/// A receiving rank's CPU time per broadcast (µs): the mean over every rank's received
/// broadcasts, and the largest rank's mean (ranks that received none left out).
fn receivers_cpu(comm: &mut Comm, (ns, count): (u64, u64)) -> pipecast::Result<(f64, f64)> {
    let mut mine = ns.to_le_bytes().to_vec();
    mine.extend_from_slice(&count.to_le_bytes());
    let all = comm.allgather(&mine)?;
    let (mut sum, mut n, mut max) = (0u64, 0u64, 0f64);
    for blob in all {
        let word = |i: usize| {
            blob.get(i * 8..i * 8 + 8)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        let (ns, count) = (word(0), word(1));
        if count > 0 {
            sum += ns;
            n += count;
            max = max.max(ns as f64 / count as f64 / 1000.0);
        }
    }
    Ok((sum as f64 / n.max(1) as f64 / 1000.0, max))
}

/// The largest of every rank's `mine`.
fn max_over_ranks(comm: &mut Comm, mine: usize) -> pipecast::Result<usize> {
    let all = comm.allgather(&(mine as u64).to_le_bytes())?;
    Ok(all
        .iter()
        .filter_map(|b| Some(u64::from_le_bytes(b.as_slice().try_into().ok()?) as usize))
        .max()
        .unwrap_or(0))
}

/// Every rank's descriptor counts, over ranks (`None` where /proc could not be read).
fn fds_over_ranks(comm: &mut Comm, mine: fds::Peak) -> pipecast::Result<Option<fds::Report>> {
    let all = comm.allgather(&serde_json::to_vec(&mine).expect("serializable"))?;
    let peaks: Vec<fds::Peak> = all
        .iter()
        .map(|b| serde_json::from_slice(b).unwrap_or_default())
        .collect();
    Ok(fds::Report::over(&peaks).filter(|r| r.peak > 0))
}

/// Every rank's `mine`, summed.
fn usage_sum(comm: &mut Comm, mine: Usage) -> pipecast::Result<Usage> {
    let all = comm.allgather(&serde_json::to_vec(&mine).expect("serializable"))?;
    let mut sum = Usage::default();
    for blob in all {
        sum += serde_json::from_slice(&blob).unwrap_or_default();
    }
    Ok(sum)
}

/// OSU `osu_ibcast`'s overlap: each iteration posts a nonblocking broadcast, computes for this
/// rank's mean blocking time `t_pure` (from `pure_us`), then waits; with `t_total` the whole
/// and `t_cpu` the computation, overlap = 100 × (1 − (t_total − t_cpu) / t_pure), clamped to
/// 0–100. Returns the mean over ranks and iterations, and whether every byte arrived.
fn overlap(
    comm: &mut Comm,
    buf: &[u8],
    tree: &Algorithm,
    segment: Option<u64>,
    (iters, root, seed): (usize, Option<usize>, u64),
    pure_us: &[f64],
    held: &mut fds::Peak,
) -> pipecast::Result<(f64, bool)> {
    let n = comm.size();
    let me = comm.rank();
    let t_pure = pure_us.iter().sum::<f64>() / pure_us.len().max(1) as f64;
    let mut data = buf.to_vec();
    let mut sum = 0.0;
    let mut ok = true;
    for it in 0..iters {
        let root = root.unwrap_or(it % n);
        let pattern_seed = seed ^ 0x6f76 ^ (it as u64) << 8 ^ root as u64;
        if me == root {
            fill(&mut data, pattern_seed);
        } else {
            data.fill(0);
        }
        comm.barrier()?;
        let t0 = Instant::now();
        let request = comm.ibcast_with(data, root, tree, segment)?;
        let cpu = compute_for(Duration::from_secs_f64(t_pure / 1e6));
        let (result, back) = request.wait();
        let total = t0.elapsed().as_secs_f64() * 1e6;
        result?;
        data = back.unwrap_or_default();
        comm.barrier()?;
        held.sample();
        if me != root && !matches(&data, pattern_seed) {
            ok = false;
        }
        let pct = 100.0 * (1.0 - (total - cpu) / t_pure.max(1e-9));
        sum += pct.clamp(0.0, 100.0);
    }
    let mine = serde_json::to_vec(&(sum / iters.max(1) as f64, ok)).expect("serializable");
    let all = comm.allgather(&mine)?;
    let mut mean = 0.0;
    for blob in &all {
        let (pct, theirs): (f64, bool) = serde_json::from_slice(blob).unwrap_or((0.0, false));
        mean += pct;
        ok &= theirs;
    }
    Ok(((mean / all.len().max(1) as f64 * 10.0).round() / 10.0, ok))
}

/// One memcpy of `src` into a buffer already touched, averaged over `iters` copies: its wall
/// time and the CPU time of this thread (µs).
fn memcpy_time(src: &[u8], iters: usize) -> (f64, f64) {
    let mut dst = src.to_vec();
    let iters = iters.max(1);
    let cpu0 = Usage::thread_cpu_ns();
    let t0 = Instant::now();
    for _ in 0..iters {
        dst.copy_from_slice(std::hint::black_box(src));
        std::hint::black_box(&mut dst);
    }
    let wall = t0.elapsed().as_secs_f64() * 1e6;
    let cpu = Usage::thread_cpu_ns().saturating_sub(cpu0) as f64 / 1000.0;
    let us = |t: f64| ((t / iters as f64) * 1000.0).round() / 1000.0;
    (us(wall), us(cpu))
}

/// Busy computation for `d` (what an application does while its broadcast progresses);
/// returns the µs it took.
fn compute_for(d: Duration) -> f64 {
    let t0 = Instant::now();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while t0.elapsed() < d {
        for _ in 0..1000 {
            x = x.rotate_left(5) ^ x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        }
        std::hint::black_box(x);
    }
    t0.elapsed().as_secs_f64() * 1e6
}

/// Gathers every rank's times; an iteration takes as long as its slowest rank. Returns
/// (avg, min, max) over iterations, whether all ranks verified, and the per-iteration times.
fn summarize(comm: &mut Comm, times: &[f64], ok: bool) -> pipecast::Result<Summary> {
    let mine = serde_json::to_vec(&(times, ok)).expect("serializable");
    let all = comm.allgather(&mine)?;
    let mut per_iter = vec![0f64; times.len()];
    let mut all_ok = true;
    for blob in all {
        let (t, ok): (Vec<f64>, bool) = serde_json::from_slice(&blob).unwrap_or_default();
        all_ok &= ok && t.len() == per_iter.len();
        for (p, t) in per_iter.iter_mut().zip(t) {
            *p = p.max(t);
        }
    }
    let avg = per_iter.iter().sum::<f64>() / per_iter.len().max(1) as f64;
    let min = per_iter.iter().copied().fold(f64::INFINITY, f64::min);
    let max = per_iter.iter().copied().fold(0.0, f64::max);
    let ns = |us: f64| (us * 1000.0).round() / 1000.0;
    let per_iter = per_iter.into_iter().map(ns).collect();
    Ok((ns(avg), ns(min), ns(max), all_ok, per_iter))
}

/// What `summarize` returns: avg, min, max (µs), all verified, the per-iteration times.
type Summary = (f64, f64, f64, bool, Vec<f64>);

/// This rank's transport counters since `before`, summed over all ranks (nonzero only).
fn counters_delta(
    comm: &mut Comm,
    before: &BTreeMap<String, u64>,
) -> pipecast::Result<BTreeMap<String, u64>> {
    let mine: BTreeMap<String, u64> = comm
        .transport_counters()?
        .into_iter()
        .map(|(k, v)| {
            let d = v.saturating_sub(before.get(&k).copied().unwrap_or(0));
            (k, d)
        })
        .collect();
    let all = comm.allgather(&serde_json::to_vec(&mine).expect("serializable"))?;
    let mut sum = BTreeMap::new();
    for blob in all {
        let theirs: BTreeMap<String, u64> = serde_json::from_slice(&blob).unwrap_or_default();
        for (k, v) in theirs {
            *sum.entry(k).or_insert(0) += v;
        }
    }
    sum.retain(|_, v| *v > 0);
    Ok(sum)
}

fn print_table(n: usize, transport: &str, profile: &str, rows: &[Row], clock: &str) {
    println!(
        "# pipecast bench: {n} ranks, {transport}; profile: {profile}; time per iteration = broadcast + barrier, slowest rank; /T(m): to the point-to-point time of the message, /memcpy: to one memcpy of it (the limit on one host); cpu/mc: CPU time of all ranks per broadcast over the CPU time of that memcpy; rcv/mc: a receiving rank's (mean)"
    );
    let alone = rows.iter().any(|r| r.bcast_avg_us.is_some());
    println!(
        "# clock: {clock}{}",
        if alone {
            "; bc_avg_us, bc_max_us: the broadcast alone, from the root's start to the last rank's completion (no barrier), bc/T: its mean to the point-to-point's measured alone"
        } else {
            ""
        }
    );
    print!(
        "{:>10} {:>18} {:>9} {:>11} {:>11} {:>11} {:>9} {:>8} {:>8} {:>7} {:>6} {:>3}",
        "bytes",
        "tree",
        "segment",
        "avg_us",
        "min_us",
        "max_us",
        "MB/s",
        "/T(m)",
        "/memcpy",
        "cpu/mc",
        "rcv/mc",
        "ok"
    );
    if alone {
        print!(" {:>11} {:>11} {:>6}", "bc_avg_us", "bc_max_us", "bc/T");
    }
    println!();
    for r in rows {
        let mbps = if r.avg_us > 0.0 {
            r.bytes as f64 / r.avg_us
        } else {
            0.0
        };
        let tree = if r.ran == r.tree {
            r.tree.clone()
        } else {
            format!("{}={}", r.tree, r.ran)
        };
        print!(
            "{:>10} {:>18} {:>9} {:>11.1} {:>11.1} {:>11.1} {:>9.1} {:>8.2} {:>8.1} {:>7.1} {:>6.1} {:>3}",
            r.bytes,
            tree,
            r.segment_bytes,
            r.avg_us,
            r.min_us,
            r.max_us,
            mbps,
            r.avg_us / r.p2p_us.max(1e-9),
            r.avg_us / r.memcpy_us.max(1e-3),
            r.cpu_us / r.memcpy_cpu_us.max(1e-3),
            r.cpu_recv_us / r.memcpy_cpu_us.max(1e-3),
            if r.verified { "yes" } else { "NO" }
        );
        if let (Some(avg), Some(max)) = (r.bcast_avg_us, r.bcast_max_us) {
            let t = r.p2p_bcast_us.unwrap_or(0.0).max(1e-9);
            print!(" {avg:>11.1} {max:>11.1} {:>6.2}", avg / t);
        }
        println!();
        if let Some(pct) = r.overlap_pct {
            println!(
                "{:>10} {:>18} overlap with computation (ibcast): {pct:.1} %",
                "", ""
            );
        }
    }
}

/// The rank T(m) is measured to from rank 0: the first rank on another host, so that T(m) is
/// the network's time where ranks share hosts (rank 1 may be rank 0's neighbour on its host);
/// rank 1 when every rank is a host of its own or all share one.
fn p2p_peer(topology: &pipecast::topology::Topology) -> usize {
    topology
        .hosts()
        .and_then(|h| (1..h.size()).find(|&r| h.host_of(r) != h.host_of(0)))
        .unwrap_or(1)
}

/// `16 MiB`, `4 KiB`, `100003 B`.
pub fn size_name(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Fills `buf` with the seeded pattern (splitmix64 per 8-byte word).
pub fn fill(buf: &mut [u8], seed: u64) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let word = splitmix(seed.wrapping_add(i as u64)).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// Whether `buf` holds the seeded pattern.
pub fn matches(buf: &[u8], seed: u64) -> bool {
    buf.chunks(8).enumerate().all(|(i, chunk)| {
        let word = splitmix(seed.wrapping_add(i as u64)).to_le_bytes();
        chunk == &word[..chunk.len()]
    })
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A `--tree` list: comma-separated trees of `pipecast plan` or scatter-allgather.
pub fn parse_trees(list: &str) -> Result<Vec<Algorithm>, String> {
    list.split(',')
        .map(|t| t.trim().parse::<Algorithm>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tree: {e}, or scatter-allgather"))
}

/// Parses "0,1K,64K,4M".
pub fn parse_sizes(list: &str) -> Result<Vec<u64>, String> {
    list.split(',').map(|s| parse_size(s.trim())).collect()
}

/// `--iters`: a whole number of at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?}: give a whole number of at least 1")),
    }
}

/// Parses "4M", "64KiB", "100" (binary units: K = 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    pipecast::input::parse_bytes(s).ok_or_else(|| {
        format!("size {s:?}: write a whole number of bytes, optionally with K, M or G (e.g. 64K)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(
            parse_sizes("0,1,1K,64K,4M,1G").unwrap(),
            vec![0, 1, 1024, 65536, 4 << 20, 1 << 30]
        );
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert!(parse_size("x").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn pattern_detects_a_changed_byte() {
        let mut buf = vec![0u8; 1003];
        fill(&mut buf, 5);
        assert!(matches(&buf, 5));
        assert!(!matches(&buf, 6));
        buf[1000] ^= 1;
        assert!(!matches(&buf, 5));
    }

    #[test]
    fn the_point_to_point_reference_crosses_the_network() {
        use pipecast::topology::{Hosts, Topology};
        let net = Topology::single_switch(3);
        let shared = |host_of: Vec<usize>| {
            Hosts::new(net.clone(), host_of)
                .unwrap()
                .rank_topology()
                .unwrap()
        };
        // Ranks 0 and 1 share a host: rank 2 is the first on another.
        assert_eq!(p2p_peer(&shared(vec![0, 0, 1, 1, 2])), 2);
        assert_eq!(p2p_peer(&shared(vec![0, 1, 1, 2])), 1);
        assert_eq!(p2p_peer(&Topology::single_switch(4)), 1);
        let one = Hosts::new(Topology::single_switch(1), vec![0, 0, 0])
            .unwrap()
            .rank_topology()
            .unwrap();
        assert_eq!(p2p_peer(&one), 1);
    }
}
