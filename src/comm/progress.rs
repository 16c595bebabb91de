//! The progress thread: owns the transport, runs one engine at a time on a real clock.

use super::link::{Link, LINGER};
use crate::engine::{Bcast, Config as EngineConfig, Setup};
use crate::plan::Lane;
use crate::transport::{drive, BufLoan, Transport};
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
                    result = run_job(me, transport.as_mut(), loan.as_mut_slice(), job, &clock);
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

/// Runs one job: connects, resumes and drives its engine, reporting the state at a failure.
fn run_job(
    me: usize,
    transport: &mut dyn Transport,
    buf: &mut [u8],
    job: &Job,
    clock: &dyn Fn() -> u64,
) -> crate::Result<()> {
    let mut bcast = Bcast::new(me, &job.lanes, job.setup, job.engine, clock())?;
    transport.connect(&bcast.peers(), job.connect_timeout)?;
    transport.resume(&mut bcast, clock())?;
    let result = drive(transport, buf, &mut bcast, clock, LINGER);
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
