//! The progress thread: owns the transport, runs one engine at a time on a real clock.

use super::link::{Link, LINGER};
use crate::engine::{Bcast, Config as EngineConfig, Setup};
use crate::plan::Lane;
use crate::transport::BufLoan;
use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One engine run: a broadcast (or a barrier phase).
pub struct Job {
    pub lanes: Arc<Vec<Lane>>,
    pub setup: Setup,
    pub engine: EngineConfig,
    pub connect_timeout: Duration,
}

pub enum Op {
    /// Runs `jobs` one after the other on the lent buffer (a barrier is two jobs).
    Run {
        loan: BufLoan,
        jobs: Vec<Job>,
        reply: Sender<crate::Result<u64>>,
    },
    /// The transport's counters (monotonic; empty for TCP, which has none of its own).
    Counters {
        reply: Sender<std::collections::BTreeMap<String, u64>>,
    },
}

/// Serves `ops` until the communicator drops its end. Replies with the run's duration (ns).
pub fn serve(me: usize, mut transport: Link, ops: Receiver<Op>) {
    let start = Instant::now();
    let clock = move || start.elapsed().as_nanos() as u64;
    for op in ops {
        match op {
            Op::Run {
                mut loan,
                jobs,
                reply,
            } => {
                let t0 = clock();
                let mut result = Ok(());
                for job in &jobs {
                    result = drive(me, &mut transport, loan.as_mut_slice(), job, &clock);
                    if let Err(e) = &result {
                        tracing::error!(rank = me, seq = job.setup.seq, error = %e, "broadcast failed; closing connections");
                        transport.shutdown();
                        break;
                    }
                }
                drop(loan);
                reply.send(result.map(|()| clock() - t0)).ok();
            }
            Op::Counters { reply } => {
                reply.send(transport.counters()).ok();
            }
        }
    }
    transport.shutdown();
}

fn drive(
    me: usize,
    transport: &mut Link,
    buf: &mut [u8],
    job: &Job,
    clock: &dyn Fn() -> u64,
) -> crate::Result<()> {
    let mut bcast = Bcast::new(me, &job.lanes, job.setup, job.engine, clock())?;
    transport.connect(&bcast.peers(), job.connect_timeout)?;
    transport.resume(&mut bcast, clock())?;
    let result = run(transport, buf, &mut bcast, clock);
    if result.is_err() {
        tracing::warn!(
            rank = me,
            "state at the failure: {}\n{}",
            bcast.describe(),
            transport.describe_state(clock())
        );
    }
    result
}

fn run(
    transport: &mut Link,
    buf: &mut [u8],
    bcast: &mut Bcast,
    clock: &dyn Fn() -> u64,
) -> crate::Result<()> {
    loop {
        if bcast.is_done() && transport.flushed() {
            return Ok(());
        }
        if bcast.is_done() && transport.lingers() {
            // Done but not all acknowledged: answer peers for a while, then return (the
            // engine's idle timer is off, so `progress` would wait for frames that may never
            // come). Unacknowledged frames left over become no-ops in the next broadcast.
            transport.linger(buf, clock, LINGER)?;
            return Ok(());
        }
        let now = clock();
        bcast.handle_timeout(now)?;
        let wait = bcast
            .poll_timeout()
            .map_or(1_000_000, |t| t.saturating_sub(now))
            .min(100_000_000);
        transport.progress(buf, bcast, clock, Duration::from_nanos(wait))?;
    }
}
