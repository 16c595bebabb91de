//! `pipecast calibrate`: measure L(m) and g(m) between two ranks as seed 003 §5.1 describes,
//! and write the calibration profile `{"points":[{"bytes":256,"L_us":…,"g_us":…},…]}`.
//!
//! g(m): rank 0 sends `count` messages of m bytes back to back (a long one-way stream); g is
//! the sender's time until the receiver acknowledged the last byte, divided by `count`.
//! RTT(m): ping-pong of m-byte messages, averaged over `reps`. L(m) = RTT(m)/2 − g(m)
//! (clamped at 0: on loopback a large message's g can exceed RTT/2).

use crate::bench::parse_sizes;
use crate::launch::spawn_local;
use crate::CliResult;
use pipecast::comm::{Bootstrap, TcpRendezvous};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Spawn the two ranks locally (otherwise join the job given by PIPECAST_RANK,
    /// PIPECAST_SIZE=2 and PIPECAST_RENDEZVOUS).
    #[arg(long)]
    local: bool,
    /// Message sizes (the profile's points): comma list with K/M suffixes.
    #[arg(long, default_value = "256,512,1K,2K,4K,8K,16K,32K,64K,256K,1M")]
    sizes: String,
    /// Messages per one-way stream (default: up to 2000, at most ~32 MiB per size).
    #[arg(long)]
    count: Option<usize>,
    /// Ping-pong round trips per size (default: up to 200, at most ~16 MiB per size).
    #[arg(long)]
    reps: Option<usize>,
    /// Write the profile here (default: print it on stdout).
    #[arg(short = 'o', long)]
    output: Option<std::path::PathBuf>,
    /// Give up if the peer stalls this long (ms).
    #[arg(long, default_value_t = 10000)]
    timeout_ms: u64,
}

#[derive(Serialize)]
struct Point {
    bytes: u64,
    #[serde(rename = "L_us")]
    l_us: f64,
    g_us: f64,
    rtt_us: f64,
}

#[derive(Serialize)]
struct Profile {
    points: Vec<Point>,
}

pub fn run(args: Args) -> CliResult {
    let sizes = parse_sizes(&args.sizes)?;
    if sizes.iter().any(|&s| s == 0 || s > 1 << 30) {
        return Err("--sizes: every size must be between 1 byte and 1 GiB".into());
    }
    if args.count == Some(0) || args.reps == Some(0) {
        return Err("--count and --reps must be at least 1".into());
    }
    if args.local {
        return spawn_local(2, "--local", false);
    }
    let Some(job) = pipecast::comm::settings::Job::from_env()? else {
        return Err("PIPECAST_RANK is not set: run `pipecast calibrate --local`, or set PIPECAST_RANK, PIPECAST_SIZE=2 and PIPECAST_RENDEZVOUS".into());
    };
    let (rank, size) = (job.rank, job.size);
    if size != 2 {
        return Err(format!("calibrate runs between exactly 2 ranks, not {size}").into());
    }
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut boot = TcpRendezvous::new(rank, 2, &job.rendezvous, timeout)?;
    let ip = pipecast::comm::Settings::from_env()
        .ip
        .map(|ip| ip.trim().to_string())
        .or_else(|| boot.local_ip().map(|ip| ip.to_string()))
        .unwrap_or_else(|| "127.0.0.1".into());
    let listener = TcpListener::bind((ip.as_str(), 0))?;
    let blobs = boot.allgather(listener.local_addr()?.to_string().as_bytes())?;
    let mut stream = if rank == 0 {
        let addr: std::net::SocketAddr = String::from_utf8_lossy(&blobs[1]).parse()?;
        TcpStream::connect_timeout(&addr, timeout)?
    } else {
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + timeout;
        loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => return Err(format!("rank 0 did not connect: {e}").into()),
            }
        }
    };
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    let mut points = Vec::new();
    for &m in &sizes {
        let m = m as usize;
        let count = args.count.unwrap_or(((32 << 20) / m).clamp(100, 2000));
        let reps = args.reps.unwrap_or(((16 << 20) / m).clamp(20, 200));
        let mut msg = vec![0x5Au8; m];
        // Warm-up round trips (connection, caches), not timed.
        for _ in 0..reps.min(10) {
            ping_pong(rank, &mut stream, &mut msg)?;
        }
        let t0 = Instant::now();
        for _ in 0..reps {
            ping_pong(rank, &mut stream, &mut msg)?;
        }
        let rtt = t0.elapsed().as_secs_f64() * 1e6 / reps as f64;
        let t0 = Instant::now();
        let mut ack = [0u8; 1];
        if rank == 0 {
            for _ in 0..count {
                stream.write_all(&msg)?;
            }
            stream.read_exact(&mut ack)?;
        } else {
            for _ in 0..count {
                stream.read_exact(&mut msg)?;
            }
            stream.write_all(&ack)?;
        }
        let g = t0.elapsed().as_secs_f64() * 1e6 / count as f64;
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        points.push(Point {
            bytes: m as u64,
            l_us: round((rtt / 2.0 - g).max(0.0)),
            g_us: round(g),
            rtt_us: round(rtt),
        });
    }
    if rank != 0 {
        return Ok(());
    }
    let json = serde_json::to_string_pretty(&Profile { points })?;
    match &args.output {
        Some(path) => {
            std::fs::write(path, json + "\n")
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            eprintln!("pipecast: wrote {}", path.display());
        }
        None => println!("{json}"),
    }
    Ok(())
}

fn ping_pong(rank: usize, s: &mut TcpStream, msg: &mut [u8]) -> std::io::Result<()> {
    if rank == 0 {
        s.write_all(msg)?;
        s.read_exact(msg)
    } else {
        s.read_exact(msg)?;
        s.write_all(msg)
    }
}
