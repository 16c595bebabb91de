//! This host's cost per segment, measured once and cached: the number that, with the link's
//! rate, sets the segment size at default settings (`model::network`; issue 28).
//!
//! **What is measured.** Two ranks in this process broadcast 4 MiB to each other over TCP
//! loopback through the real driver and link (`progress::serve`, `TcpTransport`): once in
//! 4 KiB segments, once in 256 KiB segments, three times each, keeping the fastest. The large
//! segments give the host's byte rate B (what one rank pushes through its stack); the small
//! ones, less their bytes at B, the cost o of one segment end (the sender's and the receiver's
//! progress threads run at once, so a segment costs one end's time). About 50 ms.
//!
//! **Cached** in `$XDG_CACHE_HOME/pipecast` (else `~/.cache/pipecast`), one file per key: the
//! host name, the pipecast build (the file this code was loaded from: its path, size and
//! modification time) and the data interface with its speed, so a new build or another NIC
//! measures again. Ranks of one host starting together take a lock (a file created exclusively):
//! one measures, the others read its result. Where no cache can be written, every process
//! measures.

use super::progress::{self, Job, Op, Outcome};
use crate::engine::{Config as EngineConfig, Setup};
use crate::plan::{self, TreeKind};
use crate::topology::Topology;
use crate::transport::{Buffer, Link as _, TcpTransport, Wake};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A host's measured costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostCost {
    /// CPU time per segment end, µs.
    pub segment_us: f64,
    /// Bytes per µs one rank moves through its network stack (MB/s).
    pub bytes_per_us: f64,
}

/// The cache file's content.
#[derive(Serialize, Deserialize)]
struct Cached {
    key: String,
    cost: HostCost,
}

/// Bumped when the measurement changes: older cache files are then measured again.
const METHOD: u32 = 1;
const MESSAGE: u64 = 4 << 20;
const SMALL: u64 = 4 << 10;
const LARGE: u64 = 256 << 10;

/// This host's cost for data interface `nic` (its name and speed, part of the cache key, as
/// is the host's identity `host`): from the cache, else measured (and cached). `None` when it
/// cannot be measured (no loopback, no threads): the model then charges its default.
pub fn host_cost(nic: &str, host: &str) -> Option<HostCost> {
    let key = format!(
        "method {METHOD}; host {host}; build {}; nic {nic}",
        build_id()
    );
    let Some(dir) = cache_dir() else {
        return measure();
    };
    let file = dir.join(format!(
        "host-cost-{:016x}.json",
        super::agree::fnv1a(key.as_bytes())
    ));
    let read = || -> Option<HostCost> {
        let text = std::fs::read_to_string(&file).ok()?;
        let c: Cached = serde_json::from_str(&text).ok()?;
        (c.key == key && sane(&c.cost)).then_some(c.cost)
    };
    if let Some(c) = read() {
        return Some(c);
    }
    // One process of the host measures; the others wait for it and read its result.
    let lock = dir.join("host-cost.lock");
    let start = Instant::now();
    let held = loop {
        match Lock::take(&dir, &lock) {
            Ok(held) => break Some(held),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if let Some(c) = read() {
                    return Some(c);
                }
                // A process killed while it measured leaves its lock behind.
                let age = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok());
                if age.is_some_and(|a| a > LOCK_STALE) {
                    std::fs::remove_file(&lock).ok();
                } else if start.elapsed() > LOCK_STALE {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            // No cache here (read-only, not ours): measure alone.
            Err(_) => break None,
        }
    };
    if let Some(c) = read() {
        return Some(c);
    }
    let cost = measure()?;
    if held.is_some() {
        let text = serde_json::to_string(&Cached {
            key: key.clone(),
            cost,
        })
        .expect("serializes");
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, &file).is_err() {
            std::fs::remove_file(&tmp).ok();
        }
    }
    drop(held);
    tracing::info!(
        segment_us = cost.segment_us,
        bytes_per_us = cost.bytes_per_us,
        "measured this host's cost per segment ({key})"
    );
    Some(cost)
}

/// A lock older than this was left by a process that died while it measured.
const LOCK_STALE: Duration = Duration::from_secs(30);

/// The cache's lock: a file created exclusively, removed when dropped.
struct Lock(PathBuf);

impl Lock {
    fn take(dir: &std::path::Path, path: &std::path::Path) -> std::io::Result<Lock> {
        std::fs::create_dir_all(dir)?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Lock(path.to_path_buf()))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

fn sane(c: &HostCost) -> bool {
    (0.0..=1e3).contains(&c.segment_us) && (1.0..=1e6).contains(&c.bytes_per_us)
}

fn cache_dir() -> Option<PathBuf> {
    Some(super::settings::cache_home()?.join("pipecast"))
}

/// The file this code runs from (the `pipecast` tool, `libpipecast.so`, or a program linking
/// `libpipecast.a`) with its size and modification time, read from `/proc/self/maps`; the
/// crate's version where that cannot be read.
fn build_id() -> String {
    let here = build_id as fn() -> String as usize;
    let version = env!("CARGO_PKG_VERSION");
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return version.into();
    };
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let Some((lo, hi)) = fields.next().and_then(|r| r.split_once('-')) else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if !(lo..hi).contains(&here) {
            continue;
        }
        let Some(path) = fields.nth(4) else { break };
        let Ok(meta) = std::fs::metadata(path) else {
            break;
        };
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        return format!("{version} {path} {} {mtime}", meta.len());
    }
    version.into()
}

/// Runs the measurement (module doc).
pub fn measure() -> Option<HostCost> {
    let pair = Pair::start().ok()?;
    let mut best = [f64::INFINITY; 2];
    let mut seq = 0;
    for round in 0..4 {
        for (i, segment) in [SMALL, LARGE].into_iter().enumerate() {
            seq += 1;
            let us = pair.broadcast(seq, segment)?;
            // The first round warms the connection and the allocator up.
            if round > 0 {
                best[i] = best[i].min(us);
            }
        }
    }
    let [small, large] = best;
    let bytes_per_us = (MESSAGE as f64 / large).clamp(1.0, 1e6);
    let per_segment = small / (MESSAGE / SMALL) as f64;
    let segment_us = (per_segment - SMALL as f64 / bytes_per_us).clamp(0.0, 1e3);
    Some(HostCost {
        segment_us,
        bytes_per_us,
    })
}

/// Two ranks of this process joined by TCP loopback, each with its progress thread.
struct Pair {
    ops: Vec<(crossbeam_channel::Sender<Op>, Arc<Wake>)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    lanes: Arc<Vec<plan::Lane>>,
}

impl Pair {
    fn start() -> crate::Result<Pair> {
        let mut tcps = (0..2)
            .map(|r| TcpTransport::bind(r, "127.0.0.1"))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<_> = tcps.iter().map(TcpTransport::local_addr).collect();
        let cookie = rand::random();
        for t in &mut tcps {
            t.set_peers(addrs.clone(), cookie);
        }
        let lanes =
            plan::build(&Topology::single_switch(2), 0, &TreeKind::NaiveLinear, None)?.lanes;
        let mut ops = Vec::new();
        let mut threads = Vec::new();
        for (rank, mut tcp) in tcps.into_iter().enumerate() {
            let wake = Arc::new(Wake::new().map_err(|e| {
                super::CommError::Bootstrap(format!("cannot create an eventfd: {e}"))
            })?);
            tcp.set_wake(wake.raw());
            let (tx, rx) = crossbeam_channel::unbounded();
            ops.push((tx, wake.clone()));
            let thread = std::thread::Builder::new()
                .name(format!("pipecast-measure-{rank}"))
                .spawn(move || {
                    if tcp.connect(&[1 - rank], Duration::from_secs(10)).is_ok() {
                        progress::serve(
                            rank,
                            Box::new(tcp),
                            rx,
                            wake,
                            None,
                            progress::Tuning {
                                poll: super::POLL,
                                round: super::ROUND,
                                window: EngineConfig::default().window,
                            },
                        );
                    }
                })
                .map_err(|e| super::CommError::Bootstrap(format!("cannot start a thread: {e}")))?;
            threads.push(thread);
        }
        Ok(Pair {
            ops,
            threads,
            lanes: Arc::new(lanes),
        })
    }

    /// µs for both ranks to finish broadcast `seq` of [`MESSAGE`] bytes in `segment`s.
    fn broadcast(&self, seq: u64, segment: u64) -> Option<f64> {
        let start = Instant::now();
        let replies: Vec<_> = self
            .ops
            .iter()
            .map(|(tx, wake)| {
                let (reply, outcome) = crossbeam_channel::bounded::<Outcome>(1);
                let job = Job {
                    lanes: self.lanes.clone(),
                    rails: Arc::default(),
                    root_name: 0,
                    setup: Setup {
                        seq,
                        root: 0,
                        msize: MESSAGE,
                        segment,
                        deep: false,
                    },
                    engine: EngineConfig::default(),
                    connect_timeout: Duration::from_secs(10),
                    multicast: false,
                };
                let buf = Buffer::Owned(vec![0; MESSAGE as usize]);
                tx.send(Op::Run {
                    buf,
                    jobs: vec![job],
                    reply,
                })
                .ok()?;
                wake.notify();
                Some(outcome)
            })
            .collect::<Option<_>>()?;
        for outcome in replies {
            outcome
                .recv_timeout(Duration::from_secs(10))
                .ok()?
                .result
                .ok()?;
        }
        Some(start.elapsed().as_secs_f64() * 1e6)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.ops.clear();
        for t in self.threads.drain(..) {
            t.join().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measurement_gives_a_sane_cost_and_the_cache_gives_it_back() {
        let cost = measure().expect("loopback works here");
        assert!(sane(&cost), "{cost:?}");
        assert!(cost.bytes_per_us > 10.0, "{cost:?}");
        let id = build_id();
        assert!(
            id.contains(env!("CARGO_PKG_VERSION")) && id.len() > 10,
            "{id}"
        );
    }
}
